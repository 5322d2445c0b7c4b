"""Compiled forward-backward for linear-chain CRFs on CPU (numba), with an exact backward.

The log-space torch implementation in :mod:`.linear_chain` spends its time in per-op overhead on
small problems: a 2-state chain of 50 positions takes some 200 tensor ops forward and twice that
through the double backward that differentiating the marginals needs. Here one compiled loop
per chain does the whole forward-backward, and the backward of the marginals is written out.

Forward, per chain of length L, in float64, exact whatever the score gaps (messages rescaled
by one factor per step underflow to 0/0 once scores differ by more than ~745) and with ``-inf``
scores. The forward pass keeps log alpha: ``log alpha_{t+1}(j) = u_{t+1}(j) +
logsumexp_i(log alpha_t(i) + W_t(i, j))``, computed as ``m_t(j) + log S_t(j)`` from the
weights ``w_t(i, j) = exp(log alpha_t(i) + W_t(i, j) - m_t(j))`` (``m_t(j)`` the largest term,
so ``S_t(j) = sum_i w_t(i, j) >= 1``); ``log Z = logsumexp(log alpha_{L-1})``. The weights
normalized by their column sums are the backward conditionals
``P(y_t = i | y_{t+1} = j) = w_t(i, j) / S_t(j)``, so the marginals follow backwards without a
single ``exp``: ``mu_{L-1} = exp(log alpha_{L-1} - log Z)``,
``xi_t(i, j) = mu_{t+1}(j) w_t(i, j) / S_t(j)`` and ``mu_t(i) = sum_j xi_t(i, j)`` -- products
and ratios of numbers in [0, 1], never a difference.

Backward: the cotangent ``z`` of log Z contributes ``z mu`` and ``z xi`` (torch ops on the
outputs, so log Z is twice differentiable). For cotangents ``g`` (nodes) and ``h`` (edges) of
the marginals, let ``G(y) = sum_t g_t(y_t) + sum_t h_t(y_t, y_{t+1})``. Since the marginals are
the mean of the sufficient statistics, their vector-Jacobian product is a covariance with G:
``d u_t(c) = mu_t(c) (E[G | y_t = c] - E[G])`` and
``d W_t(i, j) = xi_t(i, j) (E[G | y_t = i, y_{t+1} = j] - E[G])``. By the Markov property
``E[G | y_t = c] = g_t(c) + F_t(c) + B_t(c)`` with the expected past ``F`` and future ``B``:
``F_{t+1}(j) = sum_i P(y_t = i | y_{t+1} = j) (F_t(i) + g_t(i) + h_t(i, j))`` and
``B_t(i) = sum_j P(y_{t+1} = j | y_t = i) (B_{t+1}(j) + g_{t+1}(j) + h_t(i, j))``, where the
conditionals are ``xi / mu``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from ..common.compiled import available, kernel_threads, threads_for

__all__ = ["ChainInference", "available", "usable"]


def usable(scores: Tensor) -> bool:
    """Whether the compiled kernels serve a distribution over ``scores``: on CPU, with numba
    installed and the kernels not switched off (see
    :func:`lit_structattn.common.compiled.available`); other devices use the torch
    implementation. The kernels take float32 or float64 tensors: the distributions pass their
    scores in the compute dtype."""
    return scores.device.type == "cpu" and available()


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


def _array(t: Tensor | None, like: np.ndarray) -> np.ndarray:
    """A numpy view of the cotangent ``t`` (strides kept: broadcast cotangents are not copied),
    or a broadcast zero of the shape of ``like`` for a missing one (no memory)."""
    if t is None:
        return np.broadcast_to(np.zeros((), like.dtype), like.shape)
    return t.detach().numpy()


class ChainInference(torch.autograd.Function):
    """``(log_z [B], node marginals [B, T, C], edge marginals [B, T-1, C, C])`` of a batch of
    chains from ``unary [B, T, C]``, ``transition [B, T-1, C, C]`` (CPU, float32 or float64, any
    strides) and ``lengths [B]``; exactly 0 beyond each length. The kernels work in float64;
    results have the dtype of ``unary``.

    Differentiable twice through ``log_z``, whose gradient is the marginals (torch ops on the
    saved outputs), and once through the marginals (the closed form above, :class:`_Covariance`).
    """

    @staticmethod
    def forward(ctx, unary: Tensor, transition: Tensor, lengths: Tensor):
        forward_kernel, _ = _kernels()
        batch, steps, labels = unary.shape
        u = unary.detach().numpy()
        lengths_np = lengths.detach().to(torch.int64).numpy()
        log_z = np.zeros(batch, dtype=u.dtype)
        node = np.zeros((batch, steps, labels), dtype=u.dtype)
        edge = np.zeros((batch, max(steps - 1, 0), labels, labels), dtype=u.dtype)
        with kernel_threads(threads_for(unary.numel() * labels)) as ctx.threads:
            forward_kernel(u, transition.detach().numpy(), lengths_np, log_z, node, edge)
        outputs = torch.from_numpy(log_z), torch.from_numpy(node), torch.from_numpy(edge)
        ctx.save_for_backward(*outputs[1:])  # autograd notices if they are changed in place
        ctx.lengths = lengths_np
        ctx.set_materialize_grads(False)  # no kernel run when only log Z is differentiated
        return outputs

    @staticmethod
    def backward(ctx, g_log_z: Tensor | None, g_node: Tensor | None, g_edge: Tensor | None):
        node, edge = ctx.saved_tensors
        if g_node is None and g_edge is None:
            if g_log_z is None:  # autograd may ask with no cotangent at all
                return None, None, None
            return g_log_z[:, None, None] * node, g_log_z[:, None, None, None] * edge, None
        d_unary, d_transition = _Covariance.apply(node, edge, g_node, g_edge, ctx.lengths,
                                                  ctx.threads)
        if g_log_z is not None:
            d_unary = d_unary + g_log_z[:, None, None] * node
            d_transition = d_transition + g_log_z[:, None, None, None] * edge
        return d_unary, d_transition, None


class _Covariance(torch.autograd.Function):
    """The vector-Jacobian product of the marginals ``(node, edge)`` for the cotangents
    ``(g_node, g_edge)`` (either may be None), by the compiled backward kernel; not
    differentiable."""

    @staticmethod
    def forward(ctx, node: Tensor, edge: Tensor, g_node: Tensor | None, g_edge: Tensor | None,
                lengths: np.ndarray, threads: int):
        _, backward_kernel = _kernels()
        node_np, edge_np = node.detach().numpy(), edge.detach().numpy()
        d_unary = np.zeros_like(node_np)
        d_transition = np.zeros_like(edge_np)
        with kernel_threads(threads):
            backward_kernel(node_np, edge_np, lengths, _array(g_node, node_np),
                            _array(g_edge, edge_np), d_unary, d_transition)
        return torch.from_numpy(d_unary), torch.from_numpy(d_transition)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("LinearChainCRF: marginals from the compiled kernel are differentiable "
                           "once (log Z twice); switch the kernel off for higher derivatives")
