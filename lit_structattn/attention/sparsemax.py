"""Sparsemax: the Euclidean projection of the scores onto the probability simplex.

``sparsemax(z) = argmin_{p in simplex} ||p - z||^2 = max(z - tau, 0)`` (Martins & Astudillo,
2016), with the threshold tau found by Michelot's iteration, or by one sort and a cumulative
sum for the rows where that has not converged in a few passes (see ``_threshold``). On CUDA one
Triton kernel per direction does it all (:mod:`._sparse_triton`).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import _sparse_triton
from ._checks import run_transform
from ._threshold import center, checks_every_pass, solve_threshold


def sparsemax_threshold(z: Tensor) -> Tensor:
    """The threshold tau of sparsemax over the last dimension, by sorting.

    Args:
        z: ``[..., L]`` centered scores, ``-inf`` at masked positions.
    Returns:
        ``[..., 1]`` tau; ``+inf`` for rows with no valid position (so that all outputs are 0).
    """
    z_sorted = z.sort(dim=-1, descending=True).values
    is_real = torch.isfinite(z_sorted)
    z_sorted = z_sorted.masked_fill(~is_real, 0)
    cumulative = z_sorted.cumsum(-1)
    k = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    in_support = is_real & (1 + k * z_sorted > cumulative)
    support_size = in_support.sum(-1, keepdim=True)  # the support is a prefix of the sorted order
    total = cumulative.gather(-1, (support_size - 1).clamp_min(0))
    tau = (total - 1) / support_size.clamp_min(1)
    return tau.masked_fill(support_size == 0, torch.inf)


def sparsemax_threshold_iterative(z: Tensor, max_iter: int, every_pass: bool | None = None
                                  ) -> tuple[Tensor, Tensor]:
    """Michelot's algorithm: tau ``[..., 1]`` and whether it converged ``[..., 1]``.

    ``z``: ``[..., L]`` centered scores (maximum 0), ``-inf`` at masked positions. The support
    lies in ``{z > -1}``, so tau starts at -1; each pass sets tau to the threshold of the
    coordinates above the current one. tau only grows and the set only shrinks, so an
    unchanged set size means the exact solution. (Float arithmetic only: on CPU, comparisons
    that produce bool tensors cost several times more than relu/sign.) ``every_pass``: stop
    once all rows have converged (a host synchronization per pass), or run the ``max_iter``
    passes with converged rows held at their threshold; default
    :func:`~._threshold.checks_every_pass` of ``z``'s device.
    """
    every_pass = checks_every_pass(z) if every_pass is None else every_pass
    z = z.clamp_min(-2)  # finite; coordinates below -1 never matter
    tau = torch.full_like(z[..., :1], -1.0)
    size = torch.full_like(tau, -1.0)
    converged = torch.zeros_like(tau, dtype=torch.bool)
    for _ in range(max_iter):
        above = torch.relu(z - tau)
        new_size = above.sign().sum(-1, keepdim=True)
        converged = new_size == size
        if every_pass and bool(converged.all()):
            break
        # sum_{z > tau} z = sum (z - tau)_+ + tau * size
        step = (above.sum(-1, keepdim=True) + tau * new_size - 1) / new_size.clamp_min(1)
        tau = step if every_pass else torch.where(converged, tau, step)
        size = new_size
    return tau, converged


def _solve(z: Tensor, valid: Tensor | None) -> Tensor:
    """Sparsemax ``[..., L]`` of the scores ``z [..., L]`` over the ``valid`` positions, by the
    torch solvers."""
    z = center(z, valid)
    if valid is not None:
        z = z.masked_fill(~valid, -torch.inf)
    tau = solve_threshold(sparsemax_threshold_iterative, sparsemax_threshold, z)
    return (z - tau).clamp_min(0)  # 0 at masked positions, where z = -inf


def _solve_rows(z: Tensor, u: None, valid: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(p, state)`` for the rows the Triton kernel did not certify (see
    :func:`._sparse_triton.forward`)."""
    p = _solve(z, valid)
    return p, (p > 0).to(torch.int8)


class SparsemaxFunction(torch.autograd.Function):
    """Sparsemax over the last dimension with the closed-form backward
    ``dz = 1[p > 0] (g - mean_{p > 0} g)``; on CUDA by the Triton kernels."""

    @staticmethod
    def forward(ctx, z: Tensor, valid: Tensor | None) -> Tensor:
        ctx.fused = _sparse_triton.usable(z)
        if ctx.fused:
            p, state = _sparse_triton.forward(z, None, valid, _solve_rows, "sparsemax")
            ctx.save_for_backward(state)
        else:
            p = _solve(z, valid)
            ctx.save_for_backward(p)
        return p

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (saved,) = ctx.saved_tensors
        if ctx.fused:
            return _sparse_triton.backward(grad, saved, bounded=False)[0], None
        support = saved > 0
        grad = grad * support
        mean = grad.sum(-1, keepdim=True) / support.sum(-1, keepdim=True).clamp_min(1)
        return (grad - mean) * support, None


def sparsemax(scores: Tensor, dim: int = -1, mask: Tensor | None = None) -> Tensor:
    """Sparsemax of ``scores`` along ``dim``: a probability vector with exact zeros.

    Args:
        scores: ``[..., L, ...]`` floating scores.
        dim: the dimension over which the output sums to 1.
        mask: bool, broadcastable to ``scores``; True = valid. Masked positions get exactly 0
            (and 0 gradient); a slice with no valid position gets all zeros.
    Returns:
        ``p`` of the shape of ``scores``, ``p >= 0``, summing to 1 along ``dim``.
    Raises:
        ValueError: non-floating ``scores``, a non-bool or non-broadcastable ``mask``, or a
            bad ``dim``.
    """
    return run_transform(SparsemaxFunction, "sparsemax", scores, None, dim, mask,
                         checks_itself=_sparse_triton.usable)
