"""Constrained alpha-entmax: the alpha-Tsallis counterpart of csoftmax and csparsemax.

``centmax_alpha(z; u) = argmax_{a in simplex, a <= u} a.z + H_alpha(a)`` (the Tsallis entropy
of :mod:`.entmax`). Its solution is ``a_i = min(u_i, [(alpha - 1) z_i - tau]_+^(1/(alpha - 1)))``
with tau making the row sum to 1: alpha = 1 gives csoftmax (:func:`~.csoftmax.csoftmax`),
alpha = 2 csparsemax (:func:`~.csparsemax.csparsemax`), and each of them is dispatched there.

Method, for alpha in (1, 2): with ``x = (alpha - 1) (z - max z)`` the mass ``f(tau)`` decreases
in tau; it is at most the uncapped one, so tau lies below ``-L^(1 - alpha)``, and it is
``sum u >= 1`` once every coordinate reaches ``min(u_i, 1)``, at
``tau = min_i x_i - min(u_i, 1)^(alpha - 1)``. Bisection over that bracket (as for entmax:
:func:`~.entmax.bisect_threshold`) to the resolution of the compute dtype, then an exact step on
the sets found: the free coordinates (``0 < a < u``) are rescaled to carry exactly the mass the
capped ones leave. For alpha = 1.5 the mass is piecewise quadratic: a few bisection passes find
the sets of most rows, the closed form on the sets gives tau, and the closed form on the sets
of that tau again until they stop changing (one or two rounds); the rare row that does not
settle is solved by sorting its 2L breakpoints, in float64.

Backward, on the free set F with ``s = a^(2 - alpha)`` and ``m = sum_F s g / sum_F s``:
``dz_i = s_i (g_i - m)`` on F (``da_F / dz = diag(s) - s s^T / sum(s)``), ``du_i = g_i - m`` on
the capped set (a capped coordinate moves with its bound, and its change is taken from the free
set in proportion to s); a row with no free coordinate gets zero gradient. Contract as for every
transform (:mod:`._checks`), ``ValueError`` for rows whose valid bounds sum to less than 1.

On CUDA alpha = 1.5 is one Triton kernel per direction, shared with csparsemax
(:mod:`._sparse_triton`: the threshold by a safeguarded Newton/bisection in registers, every
row certified on the device, the rare uncertified row solved again by the torch path above);
other alpha run the torch path on every device.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import _sparse_triton
from ._checks import check_scores, run_transform
from ._threshold import center, checks_every_pass, first_true
from .csoftmax import csoftmax
from .csparsemax import csparsemax
from .entmax import bisect_threshold, check_alpha, power, tsallis_exponent


def clip(x: Tensor, u: Tensor, tau: Tensor, exponent: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(uncapped, free, capped)``, each ``[..., L]``: ``[x - tau]_+^exponent`` and the float 0/1
    indicators of ``0 < uncapped <= u`` and of ``uncapped > u`` (float 0/1 sets: on CPU, bool
    tensors are several times slower)."""
    uncapped = power(torch.relu(x - tau), exponent)
    capped = torch.relu(uncapped - u).sign()
    return uncapped, uncapped.sign() - capped, capped


def capped_mass(x: Tensor, reach: Tensor, tau: Tensor, exponent: float) -> Tensor:
    """``sum_i min(min(u_i, 1), [x_i - tau]_+^exponent)`` ``[..., 1]`` with
    ``reach = min(u, 1)^(1 / exponent)``: ``>= 1`` exactly where the mass ``f(tau)`` is (a
    coordinate capped at 1 has the row's mass by itself either way), in three elementwise ops.
    """
    return power(torch.clamp(x - tau, x.new_zeros(()), reach), exponent).sum(
        -1, keepdim=True)


def centmax15_threshold_on(x: Tensor, u: Tensor, free: Tensor, capped: Tensor,
                           tau: Tensor) -> Tensor:
    """The exact threshold ``[..., 1]`` for alpha = 1.5 on the sets ``free`` and ``capped``
    (float 0/1 ``[..., L]``): the smaller root of ``sum_capped u + sum_free (x_i - t)^2 = 1``,
    with the variance taken about the mean (two passes) so that it keeps its digits at any
    scale; the mean if there is none, and ``tau [..., 1]`` for a row with no free coordinate.
    ``x`` finite."""
    size = free.sum(-1, keepdim=True)
    mean = (x * free).sum(-1, keepdim=True) / size.clamp_min(1)
    spread = (torch.square(x - mean) * free).sum(-1, keepdim=True)
    leftover = 1 - (u * capped).sum(-1, keepdim=True)
    root = mean - ((leftover - spread).clamp_min(0) / size.clamp_min(1)).sqrt()
    return torch.where(size > 0, root, tau)


def centmax15_threshold(x: Tensor, u: Tensor) -> Tensor:
    """tau ``[..., 1]`` for alpha = 1.5 by sorting the 2L breakpoints (where a coordinate
    enters, ``x_i``, and where it reaches its bound, ``x_i - sqrt(u_i)``) and sweeping them with
    cumulative sums: the mass at breakpoint b is ``C + S2 - 2 b S1 + n b^2`` (C the capped mass;
    n, S1, S2 the count, sum and sum of squares of the free coordinates), and tau lies on the
    segment above the first breakpoint where it reaches 1, where
    :func:`centmax15_threshold_on` solves it on the sets of the segment's middle. ``x``, ``u``:
    ``[..., L]`` finite halved centered scores and bounds (see :func:`centmax15_solve`). Run in
    float64 by the caller: the sums cancel at large scores."""
    breakpoints = torch.cat([x, x - u.sqrt()], dim=-1)
    entering = torch.cat([torch.ones_like(x), -torch.ones_like(x)], dim=-1)
    # At equal breakpoints the stable sort keeps "enter" events before "cap" events.
    breakpoints, order = breakpoints.sort(dim=-1, descending=True, stable=True)
    entering = entering.gather(-1, order)
    values = torch.cat([x, x], dim=-1).gather(-1, order)
    capped = torch.cat([torch.zeros_like(u), u], dim=-1).gather(-1, order).cumsum(-1)
    count = entering.cumsum(-1)
    first_sum = (entering * values).cumsum(-1)
    second_sum = (entering * values.square()).cumsum(-1)
    mass = capped + second_sum - 2 * breakpoints * first_sum + count * breakpoints.square()
    first = first_true(mass >= 1, default=x.shape[-1] * 2 - 1)
    above = breakpoints.gather(-1, (first - 1).clamp_min(0))
    below = breakpoints.gather(-1, first)
    inside = torch.where(first > 0, (above + below) / 2, below)
    return centmax15_threshold_on(x, u, *clip(x, u, inside, 2.0)[1:], inside)


def rescale(uncapped: Tensor, free: Tensor, capped: Tensor, u: Tensor) -> Tensor:
    """The exact step: ``a [..., L]`` with the free coordinates of ``uncapped`` rescaled to carry
    exactly the mass that the capped ones (at ``u``) leave, and ``a <= u``."""
    free_a = uncapped * free
    leftover = (1 - (u * capped).sum(-1, keepdim=True)).clamp_min(0)
    free_mass = free_a.sum(-1, keepdim=True)
    tiny = torch.finfo(u.dtype).tiny
    scale = torch.where(free_mass > 0, leftover / free_mass.clamp_min(tiny), 1)
    return torch.minimum(free_a * scale, u) + u * capped


def finish(x: Tensor, u: Tensor, tau: Tensor, exponent: float
           ) -> tuple[Tensor, Tensor, Tensor]:
    """``(a, free, capped)`` (see :func:`solve`) at the threshold ``tau [..., 1]``, with the
    exact step :func:`rescale`."""
    uncapped, free, capped = clip(x, u, tau, exponent)
    return rescale(uncapped, free, capped, u), free, capped


PASSES_15 = 10  # bisection passes before the closed form, for alpha = 1.5
SET_ROUNDS = 3  # rounds of the closed form on the sets of the previous threshold


def centmax15_solve(x: Tensor, u: Tensor, reach: Tensor, low: Tensor, high: Tensor,
                    nonempty: Tensor, every_pass: bool | None = None
                    ) -> tuple[Tensor, Tensor, Tensor]:
    """``(a, free, capped)`` for alpha = 1.5: :data:`PASSES_15` bisection passes, then rounds of
    the exact threshold on the sets of the previous one (:func:`centmax15_threshold_on`, from
    the sets at the bracket's middle) until the sets no longer change: they are then exact. A
    row still changing after :data:`SET_ROUNDS` rounds (rare: a set changes inside the
    bracket, or rounding at a large threshold moves a coordinate across a breakpoint), or with
    no free coordinate and a capped mass other than 1, is solved again by sorting
    (:func:`centmax15_threshold`), in float64 down to its output. ``x``, ``u``: ``[..., L]``,
    finite; ``reach``: ``sqrt(min(u, 1))`` (see :func:`capped_mass`); ``low``, ``high``:
    ``[..., 1]``; ``nonempty``: ``[...]``, the rows with a valid
    position. ``every_pass``: stop the rounds once no row changes, as in
    :func:`~.entmax.bisect_threshold`."""
    every_pass = checks_every_pass(x) if every_pass is None else every_pass
    low, high = bisect_threshold(lambda t: capped_mass(x, reach, t, 2.0), low, high, PASSES_15)
    tau = (low + high) / 2
    uncapped, free, capped = clip(x, u, tau, 2.0)
    for _ in range(SET_ROUNDS):
        tau = centmax15_threshold_on(x, u, free, capped, tau)
        uncapped, new_free, new_capped = clip(x, u, tau, 2.0)
        changed = ((new_free - free).abs() + (new_capped - capped).abs()).sum(-1)
        free, capped = new_free, new_capped
        if every_pass and not bool(changed.any()):
            break
    a = rescale(uncapped, free, capped, u)
    # With no free coordinate the sets fix no threshold: the capped mass must be 1 by itself.
    stuck = (free.sum(-1) == 0) & nonempty
    missed = (changed > 0) | (stuck & ((a.sum(-1) - 1).abs() > 16 * torch.finfo(x.dtype).eps))
    solution = a, free, capped
    if bool(missed.any()):
        x64, u64 = x[missed].double(), u[missed].double()
        exact = finish(x64, u64, centmax15_threshold(x64, u64), 2.0)
        for out, value in zip(solution, exact, strict=True):
            out[missed] = value.to(x.dtype)
    return solution


def solve(z: Tensor, u: Tensor, valid: Tensor | None, alpha: float
          ) -> tuple[Tensor, Tensor, Tensor]:
    """``(a, free, capped)``, each ``[..., L]``: constrained alpha-entmax of the scores ``z``
    under the bounds ``u`` (negative values count as 0) over the ``valid`` positions, and the
    float 0/1 sets of :func:`clip`: free (``0 < a <= u``, not capped) and capped (0 at masked
    positions)."""
    exponent = tsallis_exponent(alpha)
    x = (alpha - 1) * center(z, valid)
    u = u.clamp_min(0)
    count = torch.full_like(z[..., :1], z.shape[-1]) if valid is None else \
        valid.sum(-1, keepdim=True).to(z.dtype)
    high = -count.clamp_min(1) ** (1 - alpha)
    room = u.clamp_max(1)
    reach = room.sqrt() if alpha == 1.5 else room ** (alpha - 1)
    all_capped = x - reach  # below this, coordinate i is at its bound
    if valid is not None:
        all_capped = all_capped.masked_fill(~valid, torch.inf)
    low = all_capped.amin(-1, keepdim=True)
    low = torch.minimum(low.masked_fill(~torch.isfinite(low), -1.0), high)
    if valid is not None:  # below every threshold in the bracket, with no room: never any mass
        x, u, reach = torch.where(valid, x, low - 1), u * valid, reach * valid
    if alpha == 1.5:
        return centmax15_solve(x, u, reach, low, high, count.squeeze(-1) > 0)
    tau, _ = bisect_threshold(lambda t: capped_mass(x, reach, t, exponent), low, high)
    return finish(x, u, tau, exponent)


def fused(z: Tensor, alpha: float) -> bool:
    """Whether the Triton kernels take constrained 1.5-entmax of ``z [..., L]`` (see
    :func:`._sparse_triton.usable`): for alpha = 1.5 on CUDA."""
    return alpha == 1.5 and _sparse_triton.usable(z)


def centmax15_rows(z: Tensor, u: Tensor, valid: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(a, state)`` for the rows the Triton kernel did not certify (see
    :func:`._sparse_triton.forward`)."""
    a, free, capped = solve(z, u, valid, 1.5)
    return a, (free + 2 * capped).to(torch.int8)


class CentmaxFunction(torch.autograd.Function):
    """Constrained alpha-entmax (a float alpha in (1, 2)) over the last dimension, with the
    closed-form backward of the module docstring for the scores and the bounds; on CUDA at
    alpha = 1.5 by the Triton kernels."""

    @staticmethod
    def forward(ctx, z: Tensor, u: Tensor, valid: Tensor | None, alpha: float) -> Tensor:
        ctx.alpha = alpha  # before the Triton check, which torch.compile may break the graph at
        ctx.fused = fused(z, alpha)
        if ctx.fused:
            a, state = _sparse_triton.forward(z, u, valid, centmax15_rows, "centmax",
                                              square=True)
            ctx.save_for_backward(a, state)
            return a
        a, free, capped = solve(z, u, valid, alpha)
        ctx.save_for_backward(a, free, capped)
        return a

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor | None, None, None]:
        if ctx.fused:
            a, state = ctx.saved_tensors
            bounded = ctx.needs_input_grad[1]
            return (*_sparse_triton.backward(grad, state, bounded, out=a), None, None)
        a, free, capped = ctx.saved_tensors
        s = (a.sqrt() if ctx.alpha == 1.5 else a.pow(2 - ctx.alpha)) * free
        s_mass = s.sum(-1, keepdim=True)
        mean = (grad * s).sum(-1, keepdim=True) / s_mass.clamp_min(torch.finfo(a.dtype).tiny)
        centered = (grad - mean) * (s_mass > 0)
        grad_u = capped * centered if ctx.needs_input_grad[1] else None
        return s * centered, grad_u, None, None


def centmax(scores: Tensor, upper: Tensor, alpha: float = 1.5, dim: int = -1,
            mask: Tensor | None = None) -> Tensor:
    """Constrained alpha-entmax of ``scores`` with upper bounds ``upper`` along ``dim``.

    Args:
        scores: ``[..., L, ...]`` floating scores.
        upper: upper bounds, same dtype, broadcastable to ``scores``; negative values count as 0.
            Differentiable (gradients flow to ``upper`` too).
        alpha: a number in [1, 2] (1: csoftmax, 2: csparsemax); fixed, not learnable.
        dim: the dimension over which the output sums to 1.
        mask: bool, broadcastable to ``scores``; True = valid. Masked positions get exactly 0
            (and 0 gradient); a slice with no valid position gets all zeros.
    Returns:
        ``a`` of the shape of ``scores`` with ``0 <= a <= upper``, ``sum(a) = 1`` along ``dim``,
        and exact zeros where a score is far below the others.
    Raises:
        ValueError: alpha not a number in [1, 2]; the valid upper bounds of some row sum to less
            than 1 (the row is named); dtype/shape disagreement between ``scores``, ``upper``
            and ``mask``; a bad ``dim``.
    """
    if isinstance(alpha, Tensor):
        raise ValueError("centmax: alpha must be a number in [1, 2] (a fixed alpha; entmax "
                         "takes a tensor)")
    check_scores(scores, "centmax")
    alpha = check_alpha(alpha, scores, dim, "centmax")
    if alpha == 1.0:
        return csoftmax(scores, upper, dim=dim, mask=mask)
    if alpha == 2.0:
        return csparsemax(scores, upper, dim=dim, mask=mask)
    return run_transform(CentmaxFunction, "centmax", scores, upper, dim, mask, options=(alpha,),
                         checks_itself=lambda z: fused(z, alpha))


def centmax15(scores: Tensor, upper: Tensor, dim: int = -1, mask: Tensor | None = None
              ) -> Tensor:
    """:func:`centmax` with alpha = 1.5."""
    return centmax(scores, upper, 1.5, dim=dim, mask=mask)
