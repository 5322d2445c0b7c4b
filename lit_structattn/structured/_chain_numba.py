"""The chain CRF's forward-backward and its backward (see :mod:`._chain_kernel` for the math),
compiled for the CPU with numba: one loop per chain, chains in parallel, in float64 whatever the
scores' dtype.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from ..common.compiled import available, kernel_threads, threads_for

__all__ = ["available", "covariance", "forward", "usable"]


def usable(scores: Tensor) -> bool:
    """Whether the compiled kernels serve a distribution over ``scores``: on CPU, with numba
    installed and the kernels not switched off (see
    :func:`lit_structattn.common.compiled.available`); other devices use the torch
    implementation. The kernels take float32 or float64 tensors: the distributions pass their
    scores in the compute dtype."""
    return scores.device.type == "cpu" and available()


def _threads(node: Tensor) -> int:
    """Threads for a forward or backward pass over chains of the shape of ``node [B, T, C]``
    (the same number both ways: torch's count is not read again between them, see
    :func:`lit_structattn.common.compiled.kernel_threads`)."""
    return threads_for(node.numel() * node.shape[-1])


@functools.cache
def _kernels():
    """Compile (or load from numba's cache) the two kernels on first use."""
    import numba

    @numba.njit(cache=True, parallel=True)
    def forward(unary, transition, lengths, log_z, node, edge):  # pragma: no cover - compiled
        batch, steps, labels = unary.shape
        for b in numba.prange(batch):
            length = lengths[b]
            log_alpha = np.empty((steps, labels))
            # weights[t, i, j] = exp(log_alpha[t, i] + W[t, i, j] - shift), shift the largest
            # term of column j; total[t, j] their sum over i (>= 1, or 0 for an unreachable j)
            weights = np.empty((max(steps - 1, 1), labels, labels))
            total = np.zeros((max(steps - 1, 1), labels))
            shift = np.empty(labels)
            mu = np.empty((steps, labels))  # node marginals in float64
            for c in range(labels):
                log_alpha[0, c] = unary[b, 0, c]
            for t in range(length - 1):
                for j in range(labels):
                    shift[j] = -np.inf
                for i in range(labels):
                    for j in range(labels):
                        shift[j] = max(shift[j], log_alpha[t, i] + transition[b, t, i, j])
                for j in range(labels):  # a column of -inf (label j unreachable) stays -inf
                    if shift[j] == -np.inf:
                        shift[j] = 0.0
                for i in range(labels):
                    for j in range(labels):
                        weight = math.exp(log_alpha[t, i] + transition[b, t, i, j] - shift[j])
                        weights[t, i, j] = weight
                        total[t, j] += weight
                for j in range(labels):
                    log_alpha[t + 1, j] = shift[j] + np.log(total[t, j]) + unary[b, t + 1, j]
            last = length - 1
            most = -np.inf
            for c in range(labels):
                most = max(most, log_alpha[last, c])
            acc = 0.0
            for c in range(labels):
                acc += math.exp(log_alpha[last, c] - most)
            value = most + np.log(acc)
            log_z[b] = value
            for c in range(labels):
                mu[last, c] = math.exp(log_alpha[last, c] - value)
                node[b, last, c] = mu[last, c]
            for t in range(last - 1, -1, -1):
                for j in range(labels):  # mu_{t+1}(j) / total: weights become xi_t(., j)
                    shift[j] = mu[t + 1, j] / total[t, j] if total[t, j] != 0.0 else 0.0
                for i in range(labels):
                    acc = 0.0
                    for j in range(labels):
                        pair = weights[t, i, j] * shift[j]
                        edge[b, t, i, j] = pair
                        acc += pair
                    mu[t, i] = acc
                    node[b, t, i] = acc

    @numba.njit(cache=True, parallel=True)
    def backward(node, edge, lengths, g_node, g_edge, d_unary, d_transition):
        batch, steps, labels = node.shape  # pragma: no cover - compiled
        for b in numba.prange(batch):
            past = np.empty((steps, labels))
            future = np.empty((steps, labels))
            length = lengths[b]
            mean = 0.0
            for t in range(length):
                for c in range(labels):
                    mean += node[b, t, c] * g_node[b, t, c]
            for t in range(length - 1):
                for i in range(labels):
                    for j in range(labels):
                        mean += edge[b, t, i, j] * g_edge[b, t, i, j]
            for c in range(labels):
                past[0, c] = 0.0
                future[length - 1, c] = 0.0
            for t in range(length - 1):
                for j in range(labels):
                    acc = 0.0
                    if node[b, t + 1, j] > 0.0:
                        for i in range(labels):
                            acc += edge[b, t, i, j] * (past[t, i] + g_node[b, t, i]
                                                       + g_edge[b, t, i, j])
                        acc /= node[b, t + 1, j]
                    past[t + 1, j] = acc
            for t in range(length - 2, -1, -1):
                for i in range(labels):
                    acc = 0.0
                    if node[b, t, i] > 0.0:
                        for j in range(labels):
                            acc += edge[b, t, i, j] * (future[t + 1, j] + g_node[b, t + 1, j]
                                                       + g_edge[b, t, i, j])
                        acc /= node[b, t, i]
                    future[t, i] = acc
            shift = -mean
            for t in range(length):
                for c in range(labels):
                    d_unary[b, t, c] = node[b, t, c] * (g_node[b, t, c] + past[t, c]
                                                        + future[t, c] + shift)
            for t in range(length - 1):
                for i in range(labels):
                    for j in range(labels):
                        d_transition[b, t, i, j] = edge[b, t, i, j] * (
                            past[t, i] + g_node[b, t, i] + g_edge[b, t, i, j]
                            + g_node[b, t + 1, j] + future[t + 1, j] + shift)

    return forward, backward


@torch.compiler.disable
def forward(unary: Tensor, transition: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(log_z [B], node [B, T, C], edge [B, T-1, C, C])`` from ``unary [B, T, C]`` and
    ``transition [B, T-1, C, C]`` (CPU, float32 or float64, any strides) and ``lengths [B]``;
    results in the dtype of ``unary``, exactly 0 beyond each length."""
    forward_kernel, _ = _kernels()
    batch, steps, labels = unary.shape
    u = unary.detach().numpy()
    log_z = np.zeros(batch, dtype=u.dtype)
    node = np.zeros((batch, steps, labels), dtype=u.dtype)
    edge = np.zeros((batch, max(steps - 1, 0), labels, labels), dtype=u.dtype)
    with kernel_threads(_threads(unary)):
        forward_kernel(u, transition.detach().numpy(), _lengths(lengths), log_z, node, edge)
    return torch.from_numpy(log_z), torch.from_numpy(node), torch.from_numpy(edge)


@torch.compiler.disable
def covariance(node: Tensor, edge: Tensor, g_node: Tensor | None, g_edge: Tensor | None,
               lengths: Tensor) -> tuple[Tensor, Tensor]:
    """``(d_unary [B, T, C], d_transition [B, T-1, C, C])``: the vector-Jacobian product of the
    marginals ``node`` and ``edge`` (from :func:`forward`) for the cotangents ``g_node`` and
    ``g_edge`` (either may be None, any strides)."""
    _, backward_kernel = _kernels()
    node_np, edge_np = node.detach().numpy(), edge.detach().numpy()
    d_unary = np.zeros_like(node_np)
    d_transition = np.zeros_like(edge_np)
    with kernel_threads(_threads(node)):
        backward_kernel(node_np, edge_np, _lengths(lengths), _array(g_node, node_np),
                        _array(g_edge, edge_np), d_unary, d_transition)
    return torch.from_numpy(d_unary), torch.from_numpy(d_transition)


def _lengths(lengths: Tensor) -> np.ndarray:
    return lengths.detach().to(torch.int64).numpy()


def _array(t: Tensor | None, like: np.ndarray) -> np.ndarray:
    """A numpy view of the cotangent ``t`` (strides kept: broadcast cotangents are not copied),
    or a broadcast zero of the shape of ``like`` for a missing one (no memory)."""
    if t is None:
        return np.broadcast_to(np.zeros((), like.dtype), like.shape)
    return t.detach().numpy()
