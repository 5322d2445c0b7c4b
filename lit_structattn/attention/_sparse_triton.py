"""sparsemax, csparsemax, 1.5-entmax and constrained 1.5-entmax on CUDA as Triton kernels: one
launch forward, one backward.

The problem: the threshold tau with ``f(tau) = sum_j clip(z_j - tau, 0, u_j) = 1`` (``u = +inf``
for sparsemax), ``f`` piecewise linear and decreasing, with breakpoints at ``z_j`` and
``z_j - u_j``. On CUDA the torch solvers launch a dozen kernels per pass and several passes;
here one program holds ``ROWS`` rows in registers, reads each once and writes its output once.

The method, per row, on the raw scores (the threshold is not shift-invariant, but ``z_j - t``
is exact for the scores near ``t``, which are the free ones, where ``z - max z`` would round
them at large scales): a bracket ``[lo, hi]`` with ``f(lo) >= 1 > f(hi)`` (sparsemax: ``[max z -
1, max z]``; csparsemax: ``[min(z - u) - 1, max z]``) and Newton steps safeguarded by bisection
(rtsafe's rule: a root inside the bracket that moves less than half the move before last, else
the midpoint). At a point ``t`` the free and clamped sets give ``f(t)`` and the root of ``f``'s
linear piece through ``t``, ``t + (f(t) - 1) / |free|``; a Newton point that leaves the sets as
they were is the exact threshold. Points are kept as pairs ``(t, d)``, ``d`` a correction
within about ``t``'s float spacing (``z_j - t - d``; TwoSum keeps the root's digits), so that a
piece of ``f`` narrower than the float spacing of the scores (tight bounds at scales of 1e4) is
still found, by bisecting the pair once the bracket is one float wide. No sort, no host
synchronization inside. For sparsemax, from ``max z - 1``, this is Michelot's iteration.

The precision contract: computed in float32 for float32 and half inputs, in float64 for float64
inputs; the output is ``min(max(z - tau, 0), u)``, so ``0 <= a <= u`` exactly. Each row is
certified on the device: the mass of what was written, summed in float64, must miss 1 by at
most ``1e-5`` in float32 (the floor of the README's tolerance, so within it at every scale), in
float64 ``16 eps (L + 1)`` (the rounding of the sum). Every ``a_j`` is monotone in tau, so no
coordinate is further from the exact solution than the mass is from 1. The rows not certified
(a run that did not settle in :data:`MAX_STEPS` points) are solved again by the exact torch
path. The kernel also applies the input rules that :func:`._checks.run_transform` checks on the
host for the other solvers (a ``-inf`` score is a masked position, a NaN or ``+inf`` one makes
the row NaN, bounds must be able to sum to 1), so that a call waits for the host once: to read
whether any row was flagged (uncertified, or infeasible: then the ``ValueError``).

The backward is the closed form: ``dz = 1[free] (g - m)``, ``du = 1[at bound] (g - m)``, ``m``
the mean of ``g`` over the free set, from the int8 sets the forward saved.

1.5-entmax (``square``: :func:`~.entmax.entmax15`, and :func:`~.centmax.centmax15` with bounds)
is the same problem with the coordinate ``((z_j - tau) / 2)_+^2`` (the scores halved, as
``entmax.py`` writes ``x = (alpha - 1) z``): ``f(tau) = sum_j clip(((z_j - tau) / 2)_+^2, 0,
u_j)``, decreasing, quadratic between the breakpoints ``z_j`` and ``z_j - 2 sqrt(u_j)``. The
same kernel, with the bracket ``[max z - 2, max z]`` (``[min(z - 2 sqrt(min(u, 1))) - 1, max
z]`` with bounds) and, for Newton's point, the exact root of the quadratic piece through ``t``
(see the kernel), so that again a point that leaves the sets as they were is the exact
threshold. The same certification, the same fallback (the exact torch paths of ``entmax.py``
and ``centmax.py``). The backward: ``s = sqrt(a)`` on the free set, ``m = sum s g / sum s``,
``dz = s (g - m)``, ``du = 1[at bound] (g - m)``, from the sets and the output the forward
saved. Other alpha (and a tensor alpha) stay on the torch path on every device: the pieces
of their mass have no closed-form root, which this exactness test needs (a kernel for them,
Newton's step certified by the mass alone, is not written yet).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..common.compiled import triton_serves
from ._checks import check_feasible

__all__ = ["backward", "forward", "usable"]

MAX_LENGTH = 2**14  # longer rows would spill registers: the torch solvers take them
MAX_STEPS = 64  # points per row: Newton settles in a few, bisection halves the bracket
ELEMENTS = 1024  # scores per program: short rows are packed several to a program

# ``exact(z, u, valid)`` for the rows the kernel did not certify: ``(out, state)`` as the kernel
# writes them (``u``, ``valid`` may be None).
ExactRows = Callable[[Tensor, Tensor | None, Tensor | None], tuple[Tensor, Tensor]]


def usable(z: Tensor) -> bool:
    """Whether the kernels serve ``z [..., L]``: on CUDA, Triton installed, the compiled kernels
    not switched off (``STRUCTATTN_COMPILED=0``), rows at most :data:`MAX_LENGTH` long."""
    return triton_serves(z, MAX_LENGTH)


def forward(z: Tensor, u: Tensor | None, valid: Tensor | None, exact: ExactRows, name: str,
            square: bool = False) -> tuple[Tensor, Tensor]:
    """``(out, state)``, each ``[..., L]``: sparsemax of ``z [..., L]`` (``u`` None) or its
    csparsemax with bounds ``u [..., L]`` (negative counts as 0), with ``square`` 1.5-entmax
    or constrained 1.5-entmax, over the ``valid [..., L]`` positions (bool or None); ``out``
    in the dtype of ``z``, exactly 0 at invalid positions;
    ``state`` int8: 0 where ``out = 0``, 1 free, 2 at the bound. The kernel applies the input
    rules of :func:`._checks.run_transform` itself: a ``-inf`` score is a masked position, a
    NaN or ``+inf`` one makes its row NaN, and bounds that cannot sum to 1 raise its
    ``ValueError`` (naming the transform ``name``)."""
    shape, length = z.shape, z.shape[-1]
    scores = z.reshape(-1, length)
    rows = scores.shape[0]
    out = torch.empty(shape, dtype=z.dtype, device=z.device)
    state = torch.empty(shape, dtype=torch.int8, device=z.device)
    flagged = torch.empty(rows, dtype=torch.int8, device=z.device)
    bounds = scores if u is None else u.reshape(-1, length)
    mask = scores if valid is None else valid.reshape(-1, length).view(torch.uint8)
    if rows:
        block, per_program = _tile(length)
        kernel, _ = _kernels()
        eps = torch.finfo(z.dtype).eps
        kernel[(_programs(rows, per_program),)](
            scores, bounds, mask, out, state, flagged, *scores.stride(), *bounds.stride(),
            *mask.stride(), rows, length, BOUNDED=u is not None, MASKED=valid is not None,
            SQUARE=square, WIDE=z.dtype == torch.float64,
            TOLERANCE=_tolerance(z.dtype, length), FEASIBLE=1 - eps**0.5, MAX_STEPS=MAX_STEPS,
            ROWS=per_program, BLOCK=block, num_warps=_warps(block * per_program))
    redo = flagged.view(shape[:-1]).bool()
    if bool(redo.any()):  # the host synchronization: rare rows, solved exactly by torch
        finite = z.isfinite()  # the rows flagged hold no NaN or +inf at a valid position
        finite = finite if valid is None else finite & valid
        if u is not None:
            check_feasible(u, finite, name)
        out[redo], state[redo] = exact(z[redo].masked_fill(~finite[redo], 0),
                                       None if u is None else u[redo], finite[redo])
    return out, state


def backward(grad: Tensor, state: Tensor, bounded: bool, out: Tensor | None = None
             ) -> tuple[Tensor, Tensor | None]:
    """``(d_scores, d_upper)``, each ``[..., L]`` in the dtype of ``grad [..., L]`` (any
    strides): the closed-form backward for the cotangent ``grad`` of the output whose ``state``
    :func:`forward` returned; ``d_upper`` None unless ``bounded``. ``out``: that output, for
    the 1.5-entmax family (``square``), None for the sparsemax family."""
    length = grad.shape[-1]
    cotangent = grad.reshape(-1, length)
    rows = cotangent.shape[0]
    d_scores = torch.empty(grad.shape, dtype=grad.dtype, device=grad.device)
    d_upper = torch.empty_like(d_scores) if bounded else None
    if rows:
        block, per_program = _tile(length)
        _, kernel = _kernels()
        kernel[(_programs(rows, per_program),)](
            cotangent, state if out is None else out, state, d_scores,
            d_scores if d_upper is None else d_upper, *cotangent.stride(), rows, length,
            BOUNDED=bounded, SQUARE=out is not None, WIDE=grad.dtype == torch.float64,
            ROWS=per_program, BLOCK=block, num_warps=_warps(block * per_program))
    return d_scores, d_upper


def _tolerance(dtype: torch.dtype, length: int) -> float:
    """How far the mass of a certified row may be from 1: the README's ``1e-5`` in float32 (the
    floor of its tolerance), the rounding of a sum of ``length`` terms in float64."""
    return 1e-5 if dtype != torch.float64 else 16 * torch.finfo(dtype).eps * (length + 1)


def _programs(rows: int, per_program: int) -> int:
    """Programs in the grid: ``ceil(rows / per_program)``."""
    return -(-rows // per_program)


def _tile(length: int) -> tuple[int, int]:
    """``(BLOCK, ROWS)``: the power of two that holds a row, and how many rows one program
    takes (at most :data:`ELEMENTS` scores between them, at least one row)."""
    block = max(2, 1 << (length - 1).bit_length())
    return block, max(1, ELEMENTS // block)


def _warps(elements: int) -> int:
    """Warps for a tile of ``elements``: about 8 scores per thread, 1 to 16 warps."""
    return min(16, max(1, elements // 256))


def _kernels():
    """The forward and backward kernels (:mod:`._sparse_triton_kernels`, imported on first use:
    Triton need not be installed where they do not run). Where the environment set
    ``TRITON_INTERPRET=1`` before Triton was imported, they run in Triton's interpreter on the
    CPU (as the tests do where there is no GPU)."""
    from . import _sparse_triton_kernels as kernels

    return kernels.forward_kernel, kernels.backward_kernel
