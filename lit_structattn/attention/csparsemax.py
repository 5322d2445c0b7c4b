"""Constrained sparsemax (Malaviya, Ferreira & Martins, 2018).

``csparsemax(z; u) = argmin_{a in simplex, a <= u} ||a - z||^2``; by their Prop. 1
``a_j = max(0, min(u_j, z_j - tau))``. The mass ``f(tau) = sum_j clip(z_j - tau, 0, u_j)`` is
piecewise linear and decreasing in tau with two breakpoints per coordinate: ``z_j`` (where it
leaves 0) and ``z_j - u_j`` (where it reaches its bound). Given the free and clamped sets, tau
follows in closed form. The sets are found by variable fixing (Bitran & Hax; Kiwiel 2008), or,
for rows where that takes more than a few passes, by sorting the 2L breakpoints once and
sweeping them with cumulative sums: tau lies in the first segment where f reaches 1.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ._checks import run_transform
from ._threshold import center, first_true, solve_threshold

LOWER_BOUND_CANDIDATES = (-1.0, -2.0, -4.0, -8.0, -16.0)


def _certain_zeros(z: Tensor, u: Tensor) -> Tensor:
    """Float 0/1 ``[..., L]``: 1 where ``z_j <= t`` for a candidate ``t`` with ``f(t) >= 1``.

    Since f decreases, ``f(t) >= 1`` means ``t <= tau``, so those coordinates are 0 at the
    optimum. The candidates are the largest of a few fixed thresholds below the maximum (0).
    """
    candidates = z.new_tensor(LOWER_BOUND_CANDIDATES).unsqueeze(-1)  # [K, 1]
    mass = torch.minimum(torch.relu(z.unsqueeze(-2) - candidates), u.unsqueeze(-2)).sum(-1)
    reached = (mass >= 1).to(z.dtype)  # [..., K], candidates in decreasing order
    bound = candidates.squeeze(-1)[reached.argmax(-1, keepdim=True)]  # first reached
    bound = torch.where(reached.sum(-1, keepdim=True) > 0, bound, -torch.inf)
    return 1 - torch.relu(z - bound).sign()


def csparsemax_threshold_iterative(
    z: Tensor, u: Tensor, valid: Tensor | None, max_iter: int
) -> tuple[Tensor, Tensor]:
    """tau ``[..., 1]`` by variable fixing (Bitran & Hax), and whether it converged.

    ``z``: ``[..., L]`` finite centered scores (maximum 0), ``u``: bounds ``>= 0`` (0 at masked
    positions), ``valid``: bool or None. Coordinates certainly at 0 are fixed first (see
    :func:`_certain_zeros`). Each pass drops the bounds of the coordinates not yet fixed and
    solves ``sum_j (z_j - tau) = r`` over them (r = 1 minus the mass fixed at upper bounds). If
    clipping that solution adds as much mass at the lower bounds as it removes at the upper ones,
    the clipped solution is optimal; otherwise the violators of the larger side are optimal at
    their bound and are fixed there. Every pass fixes at least one coordinate, so the method is
    exact and finite (Kiwiel, 2008). Float 0/1 indicators: on CPU, bool tensors are slower.
    """
    unfixed = 1 - _certain_zeros(z, u)
    if valid is not None:
        unfixed = unfixed * valid
    slack = z - u  # a coordinate is above its bound where slack > tau
    remaining = torch.ones_like(z[..., :1])
    tau = torch.zeros_like(remaining)
    converged = torch.zeros_like(remaining, dtype=torch.bool)
    tolerance = 4 * torch.finfo(z.dtype).eps
    for _ in range(max_iter):
        count = unfixed.sum(-1, keepdim=True)
        tau = ((z * unfixed).sum(-1, keepdim=True) - remaining) / count.clamp_min(1)
        below = torch.relu(tau - z) * unfixed  # how far under 0
        above = torch.relu(slack - tau) * unfixed  # how far over u
        deficit, excess = below.sum(-1, keepdim=True), above.sum(-1, keepdim=True)
        converged = (count > 0) & ((deficit - excess).abs() <= tolerance)
        if bool(converged.all()):
            break
        fix_upper = (excess > deficit).to(z.dtype)  # [..., 1]: which side is fixed
        fixed_upper = above.sign() * fix_upper
        remaining = remaining - (u * fixed_upper).sum(-1, keepdim=True)
        unfixed = unfixed - fixed_upper - below.sign() * (1 - fix_upper)
    return tau, converged


def csparsemax_threshold(z: Tensor, u: Tensor, valid: Tensor | None) -> Tensor:
    """The threshold tau with ``sum_j clip(z_j - tau, 0, u_j) = 1``, by sorting breakpoints.

    Args:
        z: ``[..., L]`` finite (centered) scores; u: ``[..., L]`` bounds ``>= 0``;
        valid: ``[..., L]`` bool or None.
    Returns:
        ``[..., 1]`` tau.
    """
    length = z.shape[-1]
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
    first = first_true(reached & (mass >= 1), default=2 * length - 1)
    if valid is not None:  # with no crossing (sum u = 1 up to rounding), stop at the last event
        first = torch.minimum(first, (2 * valid.sum(-1, keepdim=True) - 1).clamp_min(0))
    # On the segment just above the first breakpoint with mass >= 1, the sets are those after
    # the previous event: mass(tau) = clamped_sum + free_sum - free_count * tau = 1.
    before = (first - 1).clamp_min(0)
    count = free_count.gather(-1, before).clamp_min(1)
    return (clamped_sum.gather(-1, before) + free_sum.gather(-1, before) - 1) / count


class CsparsemaxFunction(torch.autograd.Function):
    """csparsemax over the last dimension with the closed-form backward of Malaviya et al.:
    ``dz_j = 1[j in A] (g_j - m)``, ``du_j = 1[j in A_R] (g_j - m)``, ``m = mean_{j in A} g_j``,
    where A is the free set (``0 < a_j < u_j``) and A_R the set at its bound; a row with no free
    coordinate gets zero gradient."""

    @staticmethod
    def forward(ctx, z: Tensor, u: Tensor, valid: Tensor | None) -> Tensor:
        z, u = center(z, valid), u.clamp_min(0)
        if valid is not None:
            z, u = z.masked_fill(~valid, 0), u * valid
        tau = solve_threshold(csparsemax_threshold_iterative, csparsemax_threshold, z, u, valid)
        shifted = z - tau
        a = torch.minimum(torch.relu(shifted), u)  # 0 at masked positions, where u = 0
        # Float 0/1 sets (faster than bool on CPU); at masked positions both are 0 as u = 0.
        at_bound = torch.relu(shifted - u).sign()
        free = torch.relu(shifted).sign() * (1 - at_bound)
        if valid is not None:
            at_bound, free = at_bound * valid, free * valid
        ctx.save_for_backward(free, at_bound)
        return a

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:
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
    return run_transform(CsparsemaxFunction, "csparsemax", scores, upper, dim, mask)
