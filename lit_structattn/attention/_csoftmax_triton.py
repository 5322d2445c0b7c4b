"""csoftmax on CUDA as two Triton kernels: the forward (threshold, output and the state of
every position) and the closed-form backward, each reading its rows once and writing once.

Problem: per row, the threshold tau with ``sum_i min(u_i, exp(z_i - tau)) = 1``; the output is
``a_i = min(u_i, exp(z_i - tau))``, ``u_i`` exactly on the clamped set
``{z_i - log u_i > tau}``. The torch path finds that set with a dozen elementwise passes and a
sort for the rows they leave, each a few kernel launches.

Method, one program per row (several short rows per program), the row in registers:

* a bracket ``lo <= tau <= hi`` on the mass ``M(t) = sum_i min(u_i, exp(z_i - t))``, which is
  monotone and piecewise exponential in t: every position is clamped at the smallest ratio
  ``z_i - log u_i`` (mass ``sum u >= 1``), and ``hi`` is the log-sum-exp of the free scores;
* safeguarded Newton steps: from any point t the piece of M through t, ``s + w exp(t - tau)``
  (``s`` the clamped bounds, ``w`` the free mass at t), is an upper bound of M, so its root
  ``t + log w - log(1 - s)`` is an upper bound of tau; it is taken when it halves the bracket,
  otherwise the bracket is bisected. A row stops when a Newton point has the clamped set of the
  point it came from (it is then the solution), or when the bracket stops shrinking, or after
  ``MAX_ITER`` evaluations; all in log space (``exp(z_i - t)``, never ``exp(z_i)`` alone), so
  that gaps past where ``exp`` underflows are handled like any other;
* the exact closed form on the free set F found at ``hi``, in float64 and from the largest free
  score ``m``: ``tau = m + log sum_F exp(z_i - m) - log(1 - sum_{not F} u_i)``; the output is
  ``u`` on the clamped set and ``min(u_i, exp(z_i - tau))`` elsewhere.

Precision contract: the same as the torch and CPU solvers (the README's tolerance at every score
scale, ``0 <= a <= u`` exactly). The kernel certifies each row on the device. Its clamped set
lies inside the solution's (``hi`` is an upper bound of tau: Newton steps are rounded up), and
a few exact float64 Newton steps from the closed form clamp the free positions found above their
bound (near-ties the float32 search could not separate); if a position that matters is still
missing, the free positions above their bound are cut to it and the mass ``sum_i a_i`` misses 1
by more than the rounding of the exponents and of the sums of bounds. Rows that fail, or that
have a NaN bound, are solved again by the exact path (:func:`.csoftmax.solve`). The input rules
that :func:`._checks.run_transform` checks on the host for the other solvers (``-inf`` masked,
NaN/``+inf`` rows NaN, bounds that must be able to sum to 1) are applied on the device here
(:func:`forward`), so that one flag read per call is the only host synchronisation.

Used on CUDA for rows up to :data:`MAX_LENGTH` when Triton imports and the compiled kernels are
on (``STRUCTATTN_COMPILED=0`` turns them off); with ``TRITON_INTERPRET=1`` the same kernels run
on CPU tensors in Triton's interpreter, which is how the tests check them without a GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import Tensor

from ..common.compiled import triton_serves
from ._checks import check_feasible

__all__ = ["MAX_ITER", "MAX_LENGTH", "backward", "forward", "usable"]

MAX_ITER = 48  # mass evaluations per row: bisection alone narrows a float32 bracket to its ulp
MAX_LENGTH = 2**14  # longer rows do not fit in registers; the torch path serves them
# Short rows are grouped until a program holds this many lanes; in Triton's interpreter, which
# runs the programs one after another, many more.
ROW_ELEMENTS = 2**14 if os.environ.get("TRITON_INTERPRET") == "1" else 256

ExactSolver = Callable[[Tensor, Tensor, Tensor | None], tuple[Tensor, Tensor]]


def usable(z: Tensor) -> bool:
    """Whether the kernels serve csoftmax over ``z [..., L]``: on CUDA, ``L <= MAX_LENGTH``,
    with Triton installed and the compiled kernels not switched off."""
    return triton_serves(z, MAX_LENGTH)


def forward(z: Tensor, u: Tensor, valid: Tensor | None, exact: ExactSolver, name: str
            ) -> tuple[Tensor, Tensor]:
    """``(a, state)``, each ``[..., L]`` (``state`` int8: 0 masked, 1 free, 2 at its bound), for
    scores ``z``, bounds ``u`` and ``valid`` (any strides, ``[..., L]``); the rows the kernel
    does not certify are solved again by ``exact(z, u, valid) -> (a, clamped)`` on those rows.

    The input rules of :func:`._checks.run_transform` are applied here on the device, with no
    host check of their own: a ``-inf`` score is a masked position, a NaN or ``+inf`` one makes
    its row NaN (state 0: no gradient), and bounds that cannot sum to 1 are flagged with the
    uncertified rows; the one flag read then raises their ``ValueError`` (naming ``name``)."""
    length = z.shape[-1]
    rows_z, rows_u = z.reshape(-1, length), u.reshape(-1, length)
    given = torch.ones_like(rows_z, dtype=torch.bool) if valid is None else \
        valid.reshape(-1, length)
    finite = rows_z.isfinite()
    rows_valid = given & (finite | (rows_z != -torch.inf))  # -inf: masked
    broken = (rows_valid & ~finite).any(-1)  # NaN or +inf at a valid position: a NaN row
    rows_z = rows_z.masked_fill(~finite, 0)  # as run_transform's screening does
    a, state, certified = launch(rows_z, rows_u, rows_valid)
    pending = ~certified & ~broken
    if bool((pending | infeasible(rows_u, rows_valid)).any()):  # the one host synchronisation
        check_feasible(u, rows_valid.view(z.shape), name)
        pending_valid = rows_valid[pending]
        exact_a, clamped = exact(rows_z[pending], rows_u[pending], pending_valid)
        a[pending] = exact_a.to(a.dtype)
        state[pending] = (1 + (clamped > 0).to(torch.int8)) * pending_valid
    a = a.masked_fill(broken[:, None], torch.nan)
    state = state.masked_fill(broken[:, None], 0)
    return a.view(z.shape), state.view(z.shape)


def infeasible(u: Tensor, valid: Tensor) -> Tensor:
    """``[N]`` the rows ``[N, L]`` with a valid position whose valid bounds sum to less than 1
    (the tolerance of :func:`._checks.check_feasible`), on the device."""
    total = (u.clamp_min(0) * valid).sum(-1)
    return valid.any(-1) & (total < 1 - torch.finfo(u.dtype).eps ** 0.5)


def launch(z: Tensor, u: Tensor, valid: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """The forward kernel on rows ``z [N, L]``, ``u [N, L]`` and ``valid [N, L]`` (or None), any
    strides: ``(a [N, L], state [N, L] int8, certified [N] bool)``, uncertified rows as the
    kernel left them."""
    n_rows, length = z.shape
    a = torch.empty((n_rows, length), dtype=z.dtype, device=z.device)
    state = torch.empty((n_rows, length), dtype=torch.int8, device=z.device)
    certified = torch.ones(n_rows, dtype=torch.bool, device=z.device)
    if n_rows:
        kernel, _ = _kernels()
        rows, block, warps = _layout(length)
        kernel[(_cdiv(n_rows, rows),)](
            z, u, certified if valid is None else valid, a, state, certified, *z.stride(),
            *u.stride(), *(valid.stride() if valid is not None else (0, 0)), n_rows, length,
            HAS_MASK=valid is not None, WIDE=z.dtype == torch.float64, MAX_ITER=MAX_ITER,
            ROWS=rows, BLOCK=block, num_warps=warps)
    return a, state, certified


def backward(a: Tensor, state: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
    """``(d_scores, d_upper)``, each ``[..., L]`` in the dtype of ``a``, for the cotangent
    ``grad`` of ``a`` (any strides), from the ``(a, state)`` of :func:`forward`."""
    length = a.shape[-1]
    rows_grad = grad.reshape(-1, length)
    d_scores, d_upper = torch.empty_like(a), torch.empty_like(a)
    n_rows = rows_grad.shape[0]
    if n_rows:
        _, kernel = _kernels()
        rows, block, warps = _layout(length)
        kernel[(_cdiv(n_rows, rows),)](
            a, state, rows_grad, d_scores, d_upper, *rows_grad.stride(), n_rows, length,
            WIDE=a.dtype == torch.float64, ROWS=rows, BLOCK=block, num_warps=warps)
    return d_scores, d_upper


def _cdiv(count: int, size: int) -> int:
    """``ceil(count / size)``."""
    return -(-count // size)


def _layout(length: int) -> tuple[int, int, int]:
    """``(rows per program, lanes per row, warps)`` for rows of ``length``: lanes the power of
    two (at least 16) that holds a row, short rows grouped up to :data:`ROW_ELEMENTS` lanes,
    some 8 lanes per thread."""
    block = max(16, 1 << (length - 1).bit_length())
    rows = max(1, ROW_ELEMENTS // block)
    return rows, block, max(1, min(16, rows * block // 256))


def _kernels():
    """The forward and backward kernels (:mod:`._csoftmax_triton_kernels`, imported on first use:
    Triton need not be installed where they do not run)."""
    from . import _csoftmax_triton_kernels as kernels

    return kernels.forward_kernel, kernels.backward_kernel
