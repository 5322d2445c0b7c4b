"""Compiled forward-backward for linear-chain CRFs, with an exact backward: numba on the CPU
(:mod:`._chain_numba`), Triton on CUDA (:mod:`._chain_triton`).

The log-space torch implementation in :mod:`.linear_chain` spends its time in per-op overhead on
small problems: a 2-state chain of 50 positions takes some 200 tensor ops forward and twice that
through the double backward that differentiating the marginals needs (on a GPU, each op is a
kernel launch). Here one compiled loop per chain does the whole forward-backward, and the
backward of the marginals is written out. Both backends compute what follows in float64.

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

from types import ModuleType

import torch
from torch import Tensor

from . import _chain_numba, _chain_triton

__all__ = ["BACKENDS", "ChainInference", "backend_for"]

# The compiled backends, each a module with ``usable(scores)``, ``forward`` and ``covariance``.
BACKENDS = (_chain_numba, _chain_triton)


def backend_for(scores: Tensor) -> ModuleType | None:
    """The compiled backend that serves a chain CRF over ``scores`` (numba on the CPU, Triton on
    CUDA, each when installed and not switched off by ``STRUCTATTN_COMPILED=0``), or None: the
    torch implementation then runs."""
    for backend in BACKENDS:
        if backend.usable(scores):
            return backend
    return None


class ChainInference(torch.autograd.Function):
    """``(log_z [B], node marginals [B, T, C], edge marginals [B, T-1, C, C])`` of a batch of
    chains from ``unary [B, T, C]``, ``transition [B, T-1, C, C]`` (float32 or float64, any
    strides) and ``lengths [B]``, by ``backend`` (see :func:`backend_for`); exactly 0 beyond each
    length, in the dtype of ``unary``.

    Differentiable twice through ``log_z``, whose gradient is the marginals (torch ops on the
    saved outputs), and once through the marginals (the closed form above, :class:`_Covariance`).
    """

    @staticmethod
    def forward(ctx, unary: Tensor, transition: Tensor, lengths: Tensor, backend: ModuleType):
        outputs = backend.forward(unary, transition, lengths)
        ctx.save_for_backward(*outputs[1:])  # autograd notices if they are changed in place
        ctx.lengths, ctx.backend = lengths, backend
        ctx.set_materialize_grads(False)  # no kernel run when only log Z is differentiated
        return outputs

    @staticmethod
    def backward(ctx, g_log_z: Tensor | None, g_node: Tensor | None, g_edge: Tensor | None):
        node, edge = ctx.saved_tensors
        if g_node is None and g_edge is None:
            if g_log_z is None:  # autograd may ask with no cotangent at all
                return None, None, None, None
            return g_log_z[:, None, None] * node, g_log_z[:, None, None, None] * edge, None, None
        d_unary, d_transition = _Covariance.apply(node, edge, g_node, g_edge, ctx.lengths,
                                                  ctx.backend)
        if g_log_z is not None:
            d_unary = d_unary + g_log_z[:, None, None] * node
            d_transition = d_transition + g_log_z[:, None, None, None] * edge
        return d_unary, d_transition, None, None


class _Covariance(torch.autograd.Function):
    """The vector-Jacobian product of the marginals ``(node, edge)`` for the cotangents
    ``(g_node, g_edge)`` (either may be None), by the backend's backward kernel; not
    differentiable."""

    @staticmethod
    def forward(ctx, node: Tensor, edge: Tensor, g_node: Tensor | None, g_edge: Tensor | None,
                lengths: Tensor, backend: ModuleType):
        return backend.covariance(node, edge, g_node, g_edge, lengths)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("LinearChainCRF: marginals from the compiled kernel are differentiable "
                           "once (log Z twice); switch the kernel off for higher derivatives")
