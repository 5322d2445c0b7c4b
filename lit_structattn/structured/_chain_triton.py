"""The chain CRF's forward-backward and its backward (see :mod:`._chain_kernel` for the math) as
Triton kernels for CUDA: one program per chain, its ``C`` labels (padded to a power of two) held
as vectors and ``[C, C]`` tiles, one loop over time, in float64 whatever the scores' dtype.

A whole batch then takes two kernel launches forward and two backward, where the torch
implementation launches several kernels per time step (or per level of its log-depth tree).
The weights ``w_t`` and column sums ``S_t`` of the forward pass are kept in float64 buffers
for the backward sweep, as in the numba kernel. With ``TRITON_INTERPRET=1`` the same kernels run
on CPU tensors in Triton's interpreter, which is how the tests check them without a GPU (the
CRF itself uses numba or torch on the CPU).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..common.compiled import triton_serves

__all__ = ["covariance", "forward", "usable"]


def usable(scores: Tensor) -> bool:
    """Whether the Triton kernels serve a distribution over ``scores``: on CUDA, with Triton
    installed and the compiled kernels not switched off (``STRUCTATTN_COMPILED=0``)."""
    return triton_serves(scores)


def forward(unary: Tensor, transition: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(log_z [B], node [B, T, C], edge [B, T-1, C, C])`` from ``unary [B, T, C]`` and
    ``transition [B, T-1, C, C]`` (float32 or float64, any strides, on one device) and
    ``lengths [B]``; results in the dtype of ``unary``, exactly 0 beyond each length."""
    batch, steps, labels = unary.shape
    kernel, _ = _kernels()
    log_z = _zeros((batch,), unary)
    node = _zeros((batch, steps, labels), unary)
    edge = _zeros((batch, steps - 1, labels, labels), unary)
    weights = _zeros(edge.shape, unary, torch.float64)
    totals = _zeros((batch, steps - 1, labels), unary, torch.float64)
    if batch:
        kernel[(batch,)](unary, transition, lengths.to(unary.device, torch.int64), log_z, node,
                         edge, weights, totals, *unary.stride(), *transition.stride(), steps,
                         labels, BLOCK=_block(labels))
    return log_z, node, edge


def covariance(node: Tensor, edge: Tensor, g_node: Tensor | None, g_edge: Tensor | None,
               lengths: Tensor) -> tuple[Tensor, Tensor]:
    """``(d_unary [B, T, C], d_transition [B, T-1, C, C])``: the vector-Jacobian product of the
    marginals ``node`` and ``edge`` (from :func:`forward`) for the cotangents ``g_node`` and
    ``g_edge`` (either may be None, any strides)."""
    batch, steps, labels = node.shape
    _, kernel = _kernels()
    g_node, g_edge = _cotangent(g_node, node), _cotangent(g_edge, edge)
    d_unary = _zeros(node.shape, node)
    d_transition = _zeros(edge.shape, edge)
    past = _zeros(node.shape, node, torch.float64)
    if batch:
        kernel[(batch,)](node, edge, g_node, g_edge, lengths.to(node.device, torch.int64),
                         d_unary, d_transition, past, *g_node.stride(), *g_edge.stride(), steps,
                         labels, BLOCK=_block(labels))
    return d_unary, d_transition


def _zeros(shape: tuple[int, ...], like: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """Zeros of ``shape`` on the device of ``like`` (in its dtype unless ``dtype``), carved from
    at least one element: an empty CUDA tensor (no edges when T = 1) has no address to pass."""
    count = math.prod(shape)
    return like.new_zeros(max(count, 1), dtype=dtype or like.dtype)[:count].view(shape)


def _cotangent(grad: Tensor | None, like: Tensor) -> Tensor:
    """``grad``, or a zero broadcast to the shape of ``like`` (no memory) when it is missing or
    empty."""
    if grad is None or grad.numel() == 0:
        return like.new_zeros(()).expand(like.shape)
    return grad


def _block(labels: int) -> int:
    """The power of two (at least 2) that holds ``labels``."""
    return max(2, 1 << (labels - 1).bit_length())


def _kernels():
    """The forward and backward kernels (:mod:`._chain_triton_kernels`, imported on first use:
    Triton need not be installed where they do not run). Where the environment set
    ``TRITON_INTERPRET=1`` before Triton was imported, they run in Triton's interpreter on the
    CPU (as the tests do where there is no GPU)."""
    from . import _chain_triton_kernels as kernels

    return kernels.forward_kernel, kernels.covariance_kernel
