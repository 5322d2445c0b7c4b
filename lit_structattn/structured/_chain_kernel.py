"""Compiled forward-backward for linear-chain CRFs on CPU (numba), with an exact backward.

The log-space torch implementation in :mod:`.linear_chain` spends its time in per-op overhead on
small problems: a 2-state chain of 50 positions takes some 200 tensor ops forward and twice that
through the double backward that differentiating the marginals needs. Here one compiled loop
per chain does the whole forward-backward, and the backward of the marginals is written out.

Forward, per chain of length L (in float64, normalizing the messages at every step):
``alpha_t`` and ``beta_t`` with ``M_t(i, j) = exp(W_t(i, j) + u_{t+1}(j))``, node marginals
``mu_t ∝ alpha_t * beta_t``, edge marginals ``xi_t(i, j) ∝ alpha_t(i) M_t(i, j) beta_{t+1}(j)``
and ``log Z``.

Backward: for cotangents ``g`` (nodes), ``h`` (edges) and ``z`` (log Z), let
``G(y) = sum_t g_t(y_t) + sum_t h_t(y_t, y_{t+1})``. Since the marginals are the mean of the
sufficient statistics, their vector-Jacobian product is a covariance with G:
``d u_t(c) = mu_t(c) (E[G | y_t = c] - E[G] + z)`` and
``d W_t(i, j) = xi_t(i, j) (E[G | y_t = i, y_{t+1} = j] - E[G] + z)``. By the Markov property
``E[G | y_t = c] = g_t(c) + F_t(c) + B_t(c)`` with the expected past ``F`` and future ``B``:
``F_{t+1}(j) = sum_i P(y_t = i | y_{t+1} = j) (F_t(i) + g_t(i) + h_t(i, j))`` and
``B_t(i) = sum_j P(y_{t+1} = j | y_t = i) (B_{t+1}(j) + g_{t+1}(j) + h_t(i, j))``, where the
conditionals are ``xi / mu``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


def available() -> bool:
    """Whether numba is installed."""
    return importlib.util.find_spec("numba") is not None


def usable(scores: Tensor) -> bool:
    """Whether the compiled kernels take ``scores``: float32/float64 CPU tensors, with numba
    installed (other devices and dtypes use the torch implementation)."""
    return (scores.device.type == "cpu" and scores.dtype in (torch.float32, torch.float64)
            and available())


@functools.cache
def _kernels():
    """Compile (or load from numba's cache) the two kernels on first use."""
    import numba

    @numba.njit(cache=True, parallel=True)
    def forward(unary, transition, lengths, log_z, node, edge):  # pragma: no cover - compiled
        batch, steps, labels = unary.shape
        for b in numba.prange(batch):
            alpha = np.empty((steps, labels))
            beta = np.empty((steps, labels))
            weights = np.empty((max(steps - 1, 1), labels, labels))
            length = lengths[b]
            top = -np.inf
            for c in range(labels):
                top = max(top, unary[b, 0, c])
            total = 0.0
            for c in range(labels):
                alpha[0, c] = math.exp(unary[b, 0, c] - top)
                total += alpha[0, c]
            for c in range(labels):
                alpha[0, c] /= total
            value = top + math.log(total)
            for t in range(length - 1):
                top = -np.inf
                for i in range(labels):
                    for j in range(labels):
                        top = max(top, transition[b, t, i, j] + unary[b, t + 1, j])
                for i in range(labels):
                    for j in range(labels):
                        weights[t, i, j] = math.exp(transition[b, t, i, j] + unary[b, t + 1, j]
                                                    - top)
                total = 0.0
                for j in range(labels):
                    acc = 0.0
                    for i in range(labels):
                        acc += alpha[t, i] * weights[t, i, j]
                    alpha[t + 1, j] = acc
                    total += acc
                for j in range(labels):
                    alpha[t + 1, j] /= total
                value += top + math.log(total)
            log_z[b] = value
            for c in range(labels):
                beta[length - 1, c] = 1.0
            for t in range(length - 2, -1, -1):
                total = 0.0
                for i in range(labels):
                    acc = 0.0
                    for j in range(labels):
                        acc += weights[t, i, j] * beta[t + 1, j]
                    beta[t, i] = acc
                    total += acc
                for i in range(labels):
                    beta[t, i] /= total
            for t in range(length):
                total = 0.0
                for c in range(labels):
                    total += alpha[t, c] * beta[t, c]
                for c in range(labels):
                    node[b, t, c] = alpha[t, c] * beta[t, c] / total
            for t in range(length - 1):
                total = 0.0
                for i in range(labels):
                    for j in range(labels):
                        total += alpha[t, i] * weights[t, i, j] * beta[t + 1, j]
                for i in range(labels):
                    for j in range(labels):
                        edge[b, t, i, j] = alpha[t, i] * weights[t, i, j] * beta[t + 1, j] / total

    @numba.njit(cache=True, parallel=True)
    def backward(node, edge, lengths, g_node, g_edge, g_log_z, d_unary, d_transition):
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
            shift = g_log_z[b] - mean
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


@contextlib.contextmanager
def kernel_threads(threads: int | None = None) -> Iterator[int]:
    """Run the kernels of the block on as many threads as torch uses (``torch.set_num_threads``,
    OMP_NUM_THREADS), or on ``threads``; yields the number chosen.

    Backward functions pass the number their forward chose: numba's OpenMP threading layer
    shares torch's OpenMP runtime and, when it starts, sets the thread count to all cores, so
    torch's own count is restored here and is not read again in the backward. Oversubscribed
    threads run 10x slower on a machine busy with other runs.
    """
    import numba

    wanted = torch.get_num_threads() if threads is None else threads
    chosen = max(1, min(wanted, numba.config.NUMBA_NUM_THREADS))
    try:
        numba.set_num_threads(chosen)
        yield chosen
    finally:
        if torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)


def _array(t: Tensor | None, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A numpy view of ``t`` (strides kept: broadcast transitions are not copied), or zeros of
    ``shape`` for a missing cotangent."""
    if t is None:
        return np.zeros(shape, dtype=dtype)
    return t.detach().numpy()


class ChainInference(torch.autograd.Function):
    """``(log_z [B], node marginals [B, T, C], edge marginals [B, T-1, C, C])`` of a batch of
    chains from ``unary [B, T, C]``, ``transition [B, T-1, C, C]`` (CPU, float32 or float64, any
    strides) and ``lengths [B]``; exactly 0 beyond each length. The kernels accumulate in
    float64. Differentiable once (the backward is the closed form above)."""

    @staticmethod
    def forward(ctx, unary: Tensor, transition: Tensor, lengths: Tensor):
        forward_kernel, _ = _kernels()
        batch, steps, labels = unary.shape
        u = unary.detach().numpy()
        lengths_np = lengths.detach().to(torch.int64).numpy()
        log_z = np.zeros(batch, dtype=u.dtype)
        node = np.zeros((batch, steps, labels), dtype=u.dtype)
        edge = np.zeros((batch, max(steps - 1, 0), labels, labels), dtype=u.dtype)
        with kernel_threads() as ctx.threads:
            forward_kernel(u, transition.detach().numpy(), lengths_np, log_z, node, edge)
        outputs = torch.from_numpy(log_z), torch.from_numpy(node), torch.from_numpy(edge)
        ctx.save_for_backward(*outputs[1:])  # autograd notices if they are changed in place
        ctx.lengths = lengths_np
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, g_log_z: Tensor, g_node: Tensor, g_edge: Tensor):
        _, backward_kernel = _kernels()
        node, edge = (t.numpy() for t in ctx.saved_tensors)
        lengths = ctx.lengths
        d_unary = np.zeros_like(node)
        d_transition = np.zeros_like(edge)
        with kernel_threads(ctx.threads):
            backward_kernel(node, edge, lengths, _array(g_node, node.shape, node.dtype),
                            _array(g_edge, edge.shape, node.dtype),
                            _array(g_log_z, node.shape[:1], node.dtype), d_unary, d_transition)
        return torch.from_numpy(d_unary), torch.from_numpy(d_transition), None
