"""Constrained softmax (Martins & Kreutzer, 2017).

``csoftmax(z; u) = argmin_{a in simplex, a <= u} KL(a || softmax(z))``. By their Prop. 1 the
solution is ``a_i = min(u_i, exp(z_i - tau))``: the coordinates whose ratio
``exp(z_i) / u_i`` is largest are clamped at their bound and the rest share the leftover
mass ``1 - s`` in proportion to ``exp(z_i)``. The clamped set is found by the authors' loop
(renormalize the free coordinates, clamp every violator, repeat; the set only grows), or, for
rows where that takes more than a few passes, by sorting on ``r_i = z_i - log u_i``: the
clamped set is a prefix of that order, every prefix size k is tried at once with cumulative
sums in log space, and the first k whose next coordinate is not violated is the solution.
The sort runs in float64, so that the leftover mass ``1 - s`` of tight bounds keeps its digits.
The output is ``u`` on the clamped set and ``exp(z - tau)`` elsewhere, so that a clamped
coordinate is exactly at its bound whatever the rounding of tau.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import _compiled, _csoftmax_triton, _threshold
from ._checks import run_transform
from ._threshold import center, checks_every_pass, first_true


def _exclusive_cumsum(x: Tensor) -> Tensor:
    """``out[..., k] = sum_{j < k} x[..., j]`` over the last dimension."""
    return torch.cat([torch.zeros_like(x[..., :1]), x[..., :-1]], dim=-1).cumsum(-1)


def _log_leftover(clamped_mass: Tensor) -> Tensor:
    """``log(1 - s)``, finite even where rounding makes ``s >= 1`` (the free coordinates then
    share a mass below the floating-point resolution)."""
    return (1 - clamped_mass).clamp_min(torch.finfo(clamped_mass.dtype).tiny).log()


def csoftmax_threshold_iterative(z: Tensor, u: Tensor, max_iter: int,
                                 every_pass: bool | None = None
                                 ) -> tuple[Tensor, Tensor, Tensor]:
    """``(tau [..., 1], clamped [..., L] float 0/1, converged [..., 1] bool)`` by clamping
    violators until none is left.

    ``z``: ``[..., L]`` finite centered scores (maximum 0); ``u``: bounds ``>= 0`` (0 at masked
    positions). With ``e = exp(z)``, ``Z`` the free mass and ``s`` the clamped mass, the free
    coordinates get ``e_i (1 - s) / Z``, so a violator is ``e_i (1 - s) > u_i Z``: no logarithm
    inside the loop, and float 0/1 indicators rather than bool tensors (much faster on CPU).
    The decisions and ``log Z`` are exact only while ``Z`` is far above the subnormal range
    (``Z >= tiny / eps``: the free coordinates that underflow then carry a negligible share);
    a row whose free mass is smaller (its free scores lie some 87 nats, in float32, below the
    clamped ones) is left unconverged, for the log-space sort. ``every_pass``: stop once all
    rows have converged (a host synchronization per pass), or run the ``max_iter`` passes
    (a converged row's clamped set no longer changes, so its values neither); default
    :func:`~._threshold.checks_every_pass` of ``z``'s device.
    """
    every_pass = checks_every_pass(z) if every_pass is None else every_pass
    e = z.exp()
    clamped = (u <= 0).to(z.dtype)  # 1 = clamped at its bound
    size = clamped.sum(-1, keepdim=True)
    free_mass = clamped_mass = torch.zeros_like(size)
    converged = torch.zeros_like(size, dtype=torch.bool)
    finfo = torch.finfo(z.dtype)
    for _ in range(max_iter):
        free_mass = (e * (1 - clamped)).sum(-1, keepdim=True)  # not a difference: no cancellation
        clamped_mass = (u * clamped).sum(-1, keepdim=True)
        violation = torch.relu(e * (1 - clamped_mass) - u * free_mass).sign()
        clamped = torch.maximum(clamped, violation)
        new_size = clamped.sum(-1, keepdim=True)
        converged = (new_size == size) & (free_mass >= finfo.tiny / finfo.eps)
        if every_pass and bool(converged.all()):
            break
        size = new_size
    tau = free_mass.clamp_min(finfo.tiny).log() - _log_leftover(clamped_mass)
    return tau, clamped, converged


def csoftmax_threshold(z: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """``(tau [..., 1], clamped [..., L] float 0/1)`` with
    ``sum_i where(clamped, u_i, exp(z_i - tau)) = 1``, by sorting, in log space.

    The clamped set is a prefix of the order of decreasing ``r_i = z_i - log u_i``; every prefix
    size k is tried at once with cumulative sums (``logcumsumexp`` for the free mass, exact at
    any gap), and the first k whose next coordinate is not violated is the solution.

    Args:
        z: ``[..., L]`` finite centered scores;
        u: ``[..., L]`` upper bounds ``>= 0`` (0 at masked positions).
    """
    ratio = z - u.log()  # +inf where u = 0: such coordinates sort first and are clamped at 0
    order = ratio.argsort(dim=-1, descending=True)
    ratio_sorted = ratio.gather(-1, order)
    z_sorted = z.gather(-1, order)
    clamped_mass = _exclusive_cumsum(u.gather(-1, order))  # mass of the first k coordinates
    free_log_mass = z_sorted.flip(-1).logcumsumexp(-1).flip(-1)  # log sum_{j >= k} exp(z_j)
    tau = free_log_mass - _log_leftover(clamped_mass)  # threshold if the first k are clamped
    first_free = first_true(ratio_sorted <= tau, default=z.shape[-1] - 1)
    prefix = (torch.arange(z.shape[-1], device=z.device) < first_free).to(z.dtype)
    return tau.gather(-1, first_free), torch.zeros_like(z).scatter(-1, order, prefix)


def _clip(z: Tensor, u: Tensor, tau: Tensor, clamped: Tensor) -> Tensor:
    """``a [..., L]``: ``u`` on the clamped set, ``min(u, exp(z - tau))`` elsewhere (so that
    ``a <= u`` holds exactly whatever the rounding of tau)."""
    return torch.where(clamped > 0, u, torch.exp(z - tau).minimum(u))


def solve_csoftmax(z: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """``(a [..., L], clamped [..., L] float 0/1)`` of csoftmax for centered ``z`` and bounds
    ``u`` (0 where invalid): the violator loop for at most :data:`_threshold.MAX_ITER` passes,
    then, for the rows it has not solved, the log-space sort, in float64 down to the output."""
    tau, clamped, converged = csoftmax_threshold_iterative(z, u, max_iter=_threshold.MAX_ITER)
    a = _clip(z, u, tau, clamped)
    pending = ~converged.squeeze(-1)
    if bool(pending.any()):
        z64, u64 = z[pending].double(), u[pending].double()
        exact_tau, exact_clamped = csoftmax_threshold(z64, u64)
        a[pending] = _clip(z64, u64, exact_tau, exact_clamped).to(z.dtype)
        clamped[pending] = exact_clamped.to(z.dtype)
    return a, clamped


def solve(z: Tensor, u: Tensor, valid: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(a [..., L], clamped [..., L] float 0/1)`` of csoftmax for scores ``z``, bounds ``u``
    (negative values count as 0) and ``valid`` (or None), by the exact solvers: compiled on the
    CPU (:mod:`._compiled`), torch elsewhere."""
    u = u.clamp_min(0)
    z = center(z, valid)
    if valid is not None:
        u = u.masked_fill(~valid, 0)
        z = z.masked_fill(~valid, 0)
    exact = _compiled.solve_csoftmax if _compiled.usable(z) else solve_csoftmax
    return exact(z, u)


class CsoftmaxFunction(torch.autograd.Function):
    """csoftmax over the last dimension with the closed-form backward of Martins & Kreutzer:
    ``dz_i = 1[i in A] a_i (g_i - m)``, ``du_i = 1[i not in A] (g_i - m)``,
    ``m = sum_{i in A} a_i g_i / (1 - s)``, where A is the set of coordinates below their bound.
    On CUDA both directions are Triton kernels (:mod:`._csoftmax_triton`) where they serve."""

    @staticmethod
    def forward(ctx, z: Tensor, u: Tensor, valid: Tensor | None) -> Tensor:
        ctx.kernel = _csoftmax_triton.usable(z)
        if ctx.kernel:
            a, state = _csoftmax_triton.forward(z, u, valid, solve, "csoftmax")
            ctx.save_for_backward(a, state)
            return a
        a, clamped = solve(z, u, valid)
        free = clamped == 0
        ctx.save_for_backward(a, free, valid)
        return a

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        if ctx.kernel:
            return (*_csoftmax_triton.backward(*ctx.saved_tensors, grad), None)
        a, free, valid = ctx.saved_tensors
        free_a = a * free
        free_mass = free_a.sum(-1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)
        centered = grad - (free_a * grad).sum(-1, keepdim=True) / free_mass
        at_bound = ~free if valid is None else valid & ~free
        return free_a * centered, centered * at_bound, None


def csoftmax(
    scores: Tensor, upper: Tensor, dim: int = -1, mask: Tensor | None = None
) -> Tensor:
    """Constrained softmax of ``scores`` with upper bounds ``upper`` along ``dim``.

    Args:
        scores: ``[..., L, ...]`` floating scores.
        upper: upper bounds, same dtype, broadcastable to ``scores``; negative values count as 0.
            Differentiable (gradients flow to ``upper`` too).
        dim: the dimension over which the output sums to 1.
        mask: bool, broadcastable to ``scores``; True = valid. Masked positions get exactly 0
            (and 0 gradient); a slice with no valid position gets all zeros.
    Returns:
        ``a`` of the shape of ``scores`` with ``0 <= a <= upper`` and ``sum(a) = 1`` along ``dim``.
    Raises:
        ValueError: the valid upper bounds of some row sum to less than 1 (the row is named);
            dtype/shape disagreement between ``scores``, ``upper`` and ``mask``; a bad ``dim``.
    """
    return run_transform(CsoftmaxFunction, "csoftmax", scores, upper, dim, mask,
                         checks_itself=_csoftmax_triton.usable)
