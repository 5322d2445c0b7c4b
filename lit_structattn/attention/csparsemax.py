"""Constrained sparsemax (Malaviya, Ferreira & Martins, 2018).

``csparsemax(z; u) = argmin_{a in simplex, a <= u} ||a - z||^2``; by their Prop. 1
``a_j = max(0, min(u_j, z_j - tau))``. The mass ``f(tau) = sum_j clip(z_j - tau, 0, u_j)`` is
piecewise linear and decreasing in tau with two breakpoints per coordinate: ``z_j`` (where it
leaves 0) and ``z_j - u_j`` (where it reaches its bound). Given the free and clamped sets, tau
follows in closed form. The sets are found by variable fixing (Bitran & Hax; Kiwiel 2008);
on large inputs the coordinates still unfixed after a few passes are gathered into narrow rows
and solved there, narrow rows by evaluating the mass at every breakpoint at once, and the rare
rows left over by sorting the 2L breakpoints once and sweeping them with cumulative sums.
Every row's mass is then checked: a row the fast passes got wrong (their decisions compare sums
of scores that nearly cancel at scales of 1e3 and more) is solved again by the sort, in float64.
On CPU a compiled float64 variable fixing (``_compiled``) replaces the torch passes; on CUDA one
Triton kernel per direction does it all (:mod:`._sparse_triton`).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import _compiled, _sparse_triton, _threshold
from ._checks import run_transform
from ._threshold import center, checks_every_pass, first_true, sort_pending

LOWER_BOUND_CANDIDATES = (-1.0, -2.0, -4.0, -8.0, -16.0)


def _certain_zeros(z: Tensor, u: Tensor) -> Tensor:
    """Float 0/1 ``[..., L]``: 1 where ``z_j <= t`` for a candidate ``t`` with ``f(t) >= 1``.

    Since f decreases, ``f(t) >= 1`` means ``t <= tau``, so those coordinates are 0 at the
    optimum. The candidates are the largest of a few fixed thresholds below the maximum (0).
    One candidate at a time: a ``[..., K, L]`` table would cost page faults on large inputs.
    """
    bound = torch.full_like(z[..., :1], -torch.inf)
    for candidate in sorted(LOWER_BOUND_CANDIDATES):  # increasing: the largest reached wins
        mass = torch.minimum(torch.relu(z - candidate), u).sum(-1, keepdim=True)
        bound = torch.where(mass >= 1, candidate, bound)
    return 1 - torch.relu(z - bound).sign()


def fix_variables(
    z: Tensor, u: Tensor, unfixed: Tensor, remaining: Tensor, max_iter: int, stop_width: int = 0,
    every_pass: bool | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Passes of variable fixing (Bitran & Hax; Kiwiel 2008) for ``sum_j clip(z_j - tau, 0, u_j)
    = remaining`` over the coordinates not yet fixed.

    Args:
        z: ``[..., L]`` finite scores; u: ``[..., L]`` bounds ``>= 0``;
        unfixed: float 0/1 ``[..., L]``, the coordinates whose set is not known yet (the others
            are known to be 0 or at their bound, and ``remaining`` excludes the mass of the
            latter); remaining: ``[..., 1]``.
        max_iter: at most this many passes.
        stop_width: stop early once no row has more than this many unfixed coordinates.
        every_pass: check after every pass whether to stop (a host synchronization per pass),
            or run the ``max_iter`` passes with converged rows held as they are (no
            ``stop_width``); default :func:`~._threshold.checks_every_pass` of ``z``'s
            device.
    Returns:
        ``(tau [..., 1], converged [..., 1] bool, unfixed, remaining)`` after the last pass.

    Each pass drops the bounds of the unfixed coordinates and solves ``sum_j (z_j - tau) = r``
    over them. If clipping that solution adds as much mass at the lower bounds as it removes at
    the upper ones, the clipped solution is optimal; otherwise the violators of the larger side
    are optimal at their bound and are fixed there. Every pass fixes at least one coordinate, so
    the method is exact and finite. Float 0/1 indicators: on CPU, bool tensors are slower.
    """
    every_pass = checks_every_pass(z) if every_pass is None else every_pass
    slack = z - u  # a coordinate is above its bound where slack > tau
    tau = torch.zeros_like(remaining)
    converged = torch.zeros_like(remaining, dtype=torch.bool)
    eps = torch.finfo(z.dtype).eps
    for _ in range(max_iter):
        count = unfixed.sum(-1, keepdim=True)
        tau = ((z * unfixed).sum(-1, keepdim=True) - remaining) / count.clamp_min(1)
        below = torch.relu(tau - z) * unfixed  # how far under 0
        above = torch.relu(slack - tau) * unfixed  # how far over u
        deficit, excess = below.sum(-1, keepdim=True), above.sum(-1, keepdim=True)
        # The rounding of the two sums and of tau, relative to their own size: at any score
        # scale, a difference within it is no evidence for either side.
        tolerance = 4 * eps * (deficit + excess + count * (tau.abs() + 1) + remaining.abs())
        converged = (count > 0) & ((deficit - excess).abs() <= tolerance)
        if every_pass and bool(converged.all()):
            break
        fix_upper = (excess > deficit).to(z.dtype)  # [..., 1]: which side is fixed
        fixed_upper = above.sign() * fix_upper
        if not every_pass:  # a converged row fixes nothing more
            fix_upper, fixed_upper = fix_upper * ~converged, fixed_upper * ~converged
            below = below * ~converged
        remaining = remaining - (u * fixed_upper).sum(-1, keepdim=True)
        unfixed = unfixed - fixed_upper - below.sign() * (1 - fix_upper)
        if every_pass and stop_width and int(unfixed.sum(-1).max()) <= stop_width:
            break
    return tau, converged, unfixed, remaining


def compact(z: Tensor, u: Tensor, unfixed: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The unfixed coordinates of every row gathered into ``[..., K]`` tensors, K the largest
    unfixed count: ``(z, u, unfixed)``; padding slots have ``unfixed = u = 0``."""
    width = int(unfixed.sum(-1).max())
    index = unfixed.topk(width, dim=-1, sorted=False).indices
    kept = unfixed.gather(-1, index)
    return z.gather(-1, index), u.gather(-1, index) * kept, kept


def threshold_by_enumeration(
    z: Tensor, u: Tensor, unfixed: Tensor, remaining: Tensor
) -> Tensor:
    """tau ``[..., 1]`` with ``sum_j clip(z_j - tau, 0, u_j) = remaining`` over the unfixed
    coordinates, by evaluating the mass at all 2K breakpoints at once (for narrow rows).
    ``u`` must be 0 where ``unfixed`` is 0.

    The mass decreases in tau and is linear between breakpoints, so tau lies above the largest
    breakpoint ``t`` whose mass is still ``>= remaining``, on a segment where the free
    coordinates are those with ``z_j - u_j <= t < z_j``. The rows go last (``[K, rows]``,
    ``[2K, K, rows]``): with the long dimension innermost the elementwise work vectorizes.
    """
    shape = z.shape
    z, u, unfixed = (t.reshape(-1, shape[-1]).T.contiguous() for t in (z, u, unfixed))
    remaining = remaining.reshape(1, -1)
    candidates = torch.cat([z, z - u])  # [2K, rows]
    real = torch.cat([unfixed, unfixed]) > 0
    gaps = z.unsqueeze(0) - candidates.unsqueeze(1)  # [2K, K, rows]
    mass = torch.clamp(gaps, z.new_zeros(()), u.unsqueeze(0)).sum(1)  # padding: u = 0
    # The lowest breakpoint (every coordinate at its bound) always qualifies, so that rounding
    # in sum(u) = remaining cannot leave a row without a segment.
    lowest = candidates.masked_fill(~real, torch.inf).amin(0, keepdim=True)
    enough = ((mass >= remaining) | (candidates <= lowest)) & real
    empty = ~real.any(0, keepdim=True)  # a row with no valid coordinate: any tau will do
    start = candidates.masked_fill(~enough, -torch.inf).amax(0, keepdim=True).masked_fill(empty, 0)
    start_mass = mass.masked_fill(~enough, torch.inf).amin(0, keepdim=True).masked_fill(empty, 0)
    free = ((z - u <= start) & (z > start)).to(z.dtype) * unfixed
    tau = start + (start_mass - remaining) / free.sum(0, keepdim=True).clamp_min(1)
    return tau.reshape(*shape[:-1], 1)


ENUMERATION_WIDTH = 16  # rows at most this wide ...
ENUMERATION_SIZE = 2**17  # ... whose [2K, K, rows] mass table has at most this many entries
COMPACT_ABOVE = 2**15  # inputs with more scores gather their unfixed coordinates (see below)


def csparsemax_threshold(
    z: Tensor, u: Tensor, valid: Tensor | None, remaining: Tensor | None = None
) -> Tensor:
    """The threshold tau with ``sum_j clip(z_j - tau, 0, u_j) = remaining`` (default 1), by
    sorting the 2L breakpoints and sweeping them with cumulative sums.

    Args:
        z: ``[..., L]`` finite scores; u: ``[..., L]`` bounds ``>= 0``;
        valid: ``[..., L]`` bool or None; remaining: ``[..., 1]`` or None.
    Returns:
        ``[..., 1]`` tau.
    """
    length = z.shape[-1]
    needed = 1.0 if remaining is None else remaining
    zeros = torch.zeros_like(z)
    breakpoints = torch.cat([z, z - u], dim=-1)  # [..., 2L]: enter the free set, then clamp
    entering = torch.cat([torch.ones_like(z), -torch.ones_like(z)], dim=-1)
    if valid is not None:
        both = torch.cat([valid, valid], dim=-1)
        breakpoints = breakpoints.masked_fill(~both, -torch.inf)  # never reached
        entering = entering.masked_fill(~both, 0)
    # At equal breakpoints the stable sort keeps "enter" events before "clamp" events.
    breakpoints, order = breakpoints.sort(dim=-1, descending=True, stable=True)
    entering = entering.gather(-1, order)
    free_count = entering.cumsum(-1)
    free_sum = (entering * torch.cat([z, z], dim=-1).gather(-1, order)).cumsum(-1)
    clamped_sum = torch.cat([zeros, u], dim=-1).gather(-1, order).cumsum(-1)
    reached = torch.isfinite(breakpoints)
    mass = clamped_sum + free_sum - free_count * breakpoints.masked_fill(~reached, 0)
    first = first_true(reached & (mass >= needed), default=2 * length - 1)
    if valid is not None:  # with no crossing (sum u = needed up to rounding), stop at the end
        first = torch.minimum(first, (2 * valid.sum(-1, keepdim=True) - 1).clamp_min(0))
    # On the segment just above the first breakpoint where the mass suffices, the sets are
    # those after the previous event: mass(tau) = clamped_sum + free_sum - free_count * tau.
    before = (first - 1).clamp_min(0)
    count = free_count.gather(-1, before).clamp_min(1)
    return (clamped_sum.gather(-1, before) + free_sum.gather(-1, before) - needed) / count


def _enumerable(z: Tensor) -> bool:
    """Rows narrow enough, and few enough, for :func:`threshold_by_enumeration`."""
    return z.shape[-1] <= ENUMERATION_WIDTH and 2 * z.shape[-1] * z.numel() <= ENUMERATION_SIZE


def solve_csparsemax_threshold(z: Tensor, u: Tensor, valid: Tensor | None) -> Tensor:
    """tau ``[..., 1]`` of csparsemax for centered ``z`` and bounds ``u`` (0 where invalid).

    Narrow rows are solved by enumerating their breakpoints. Otherwise variable fixing runs;
    it roughly halves the unfixed coordinates per pass, and fixed ones never change again, so on
    large inputs (more than :data:`COMPACT_ABOVE` scores, where a pass costs more than its
    fixed overhead) it stops once at most a quarter of every row is unfixed, gathers those
    coordinates into narrower rows (:func:`compact`) and goes on there. Rows that have not
    converged after :data:`MAX_ITER` passes (rare) are solved by sorting their breakpoints.
    """
    unfixed = 1 - _certain_zeros(z, u)
    if valid is not None:
        unfixed = unfixed * valid
    u = u * unfixed  # the coordinates known to be 0 contribute nothing at any tau
    remaining = torch.ones_like(z[..., :1])
    if _enumerable(z):
        return threshold_by_enumeration(z, u, unfixed, remaining)
    quarter = z.shape[-1] // 4 if z.numel() > COMPACT_ABOVE else 0
    tau, converged, unfixed, remaining = fix_variables(
        z, u, unfixed, remaining, _threshold.MAX_ITER, stop_width=quarter
    )
    if bool(converged.all()):
        return tau
    if quarter and int(unfixed.sum(-1).max()) <= quarter:
        z, u, unfixed = compact(z, u, unfixed)
        if _enumerable(z):
            return threshold_by_enumeration(z, u, unfixed, remaining)
        tau, converged, unfixed, remaining = fix_variables(
            z, u, unfixed, remaining, _threshold.MAX_ITER
        )
    return sort_pending(tau, converged, csparsemax_threshold, z, u, unfixed > 0, remaining)


def _clip(
    z: Tensor, u: Tensor, tau: Tensor, valid: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """``(a, free, at_bound)``, each ``[..., L]``: ``a = clip(z - tau, 0, u)`` and the float 0/1
    indicators of ``0 < a < u`` and of ``a = u < z - tau`` (both 0 at masked positions). Float
    0/1 sets are faster than bool ones on CPU."""
    shifted = z - tau
    at_bound = torch.relu(shifted - u).sign()
    free = torch.relu(shifted).sign() * (1 - at_bound)
    if valid is not None:
        at_bound, free = at_bound * valid, free * valid
    return torch.minimum(torch.relu(shifted), u), free, at_bound


def _uncertified(a: Tensor, free: Tensor, valid: Tensor | None) -> Tensor:
    """``[...]`` bool: the non-empty rows of ``a [..., L]`` whose mass misses 1 by more than the
    rounding of a sum of free coordinates (``16 eps (|free| + 1)``).

    The fast solvers are exact up to rounding, but their decisions compare sums of scores, which
    at scales of 1e3 and more nearly cancel; this check catches a wrong decision wherever it
    happened, and a row whose only free coordinate sits at its bound (bounds summing to exactly
    1) but carries the rounding of a large tau.
    """
    eps = torch.finfo(a.dtype).eps
    missed = (a.sum(-1) - 1).abs() > 16 * eps * (free.sum(-1) + 1)
    return missed if valid is None else missed & valid.any(-1)


def _solve(z: Tensor, u: Tensor, valid: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """``(a, free, at_bound)`` of csparsemax (see :func:`_clip`) for the scores ``z [..., L]``
    and bounds ``u [..., L]`` over the ``valid`` positions, by the compiled CPU solver or the
    torch solvers, with every row certified (:func:`_uncertified`)."""
    z, u = center(z, valid), u.clamp_min(0)
    if valid is not None:
        z, u = z.masked_fill(~valid, 0), u * valid
    if _compiled.usable(z):
        a, free, at_bound = _compiled.solve_csparsemax(z, u, valid)
    else:
        a, free, at_bound = _clip(z, u, solve_csparsemax_threshold(z, u, valid), valid)
    uncertified = _uncertified(a, free, valid)
    if bool(uncertified.any()):  # solve those rows again, exactly, in float64
        rows = (z[uncertified].double(), u[uncertified].double())
        row_valid = None if valid is None else valid[uncertified]
        exact = _clip(*rows, csparsemax_threshold(*rows, row_valid), row_valid)
        for out, value in zip((a, free, at_bound), exact, strict=True):
            out[uncertified] = value.to(z.dtype)
    return a, free, at_bound


def _solve_rows(z: Tensor, u: Tensor, valid: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(a, state)`` for the rows the Triton kernel did not certify (see
    :func:`._sparse_triton.forward`)."""
    a, free, at_bound = _solve(z, u, valid)
    return a, (free + 2 * at_bound).to(torch.int8)


class CsparsemaxFunction(torch.autograd.Function):
    """csparsemax over the last dimension with the closed-form backward of Malaviya et al.:
    ``dz_j = 1[j in A] (g_j - m)``, ``du_j = 1[j in A_R] (g_j - m)``, ``m = mean_{j in A} g_j``,
    where A is the free set (``0 < a_j < u_j``) and A_R the set at its bound; a row with no free
    coordinate gets zero gradient. On CUDA by the Triton kernels."""

    @staticmethod
    def forward(ctx, z: Tensor, u: Tensor, valid: Tensor | None) -> Tensor:
        ctx.fused = _sparse_triton.usable(z)
        if ctx.fused:
            a, state = _sparse_triton.forward(z, u, valid, _solve_rows, "csparsemax")
            ctx.save_for_backward(state)
        else:
            a, free, at_bound = _solve(z, u, valid)
            ctx.save_for_backward(free, at_bound)
        return a

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        if ctx.fused:
            bounded = ctx.needs_input_grad[1]
            return (*_sparse_triton.backward(grad, *ctx.saved_tensors, bounded=bounded), None)
        free, at_bound = ctx.saved_tensors
        n_free = free.sum(-1, keepdim=True)
        mean = (grad * free).sum(-1, keepdim=True) / n_free.clamp_min(1)  # free: float 0/1
        centered = (grad - mean) * (n_free > 0)
        return centered * free, centered * at_bound, None


def csparsemax(
    scores: Tensor, upper: Tensor, dim: int = -1, mask: Tensor | None = None
) -> Tensor:
    """Constrained sparsemax of ``scores`` with upper bounds ``upper`` along ``dim``.

    Args:
        scores: ``[..., L, ...]`` floating scores.
        upper: upper bounds, same dtype, broadcastable to ``scores``; negative values count as 0.
            Differentiable (gradients flow to ``upper`` too).
        dim: the dimension over which the output sums to 1.
        mask: bool, broadcastable to ``scores``; True = valid. Masked positions get exactly 0
            (and 0 gradient); a slice with no valid position gets all zeros.
    Returns:
        ``a`` of the shape of ``scores`` with ``0 <= a <= upper``, ``sum(a) = 1`` along ``dim``,
        and exact zeros where a score is far below the others.
    Raises:
        ValueError: the valid upper bounds of some row sum to less than 1 (the row is named);
            dtype/shape disagreement between ``scores``, ``upper`` and ``mask``; a bad ``dim``.
    """
    return run_transform(CsparsemaxFunction, "csparsemax", scores, upper, dim, mask,
                         checks_itself=_sparse_triton.usable)
