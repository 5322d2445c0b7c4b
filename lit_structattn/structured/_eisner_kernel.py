"""Compiled inside-outside for projective dependency CRFs on CPU (numba), with an exact backward.

The torch implementation in :mod:`.dependency` runs Eisner's algorithm as ``N`` batched steps of
small tensor ops and differentiates the marginals by a double backward; on sentences of a few
dozen words that is almost all per-op overhead. Here one compiled loop per sentence (sentences in
parallel) runs Eisner's inside and outside passes.

Both passes run in the *expectation semiring* (Eisner 2002; Li & Eisner 2009): every chart item
holds ``(p, q)`` where ``p`` sums the weights ``w(T)`` of the partial trees and ``q`` sums
``w(T) G(T)`` for ``G(T) = sum_{arcs a in T} v_a``. With ``v = 0`` this is plain inside-outside
and gives the marginals ``mu_a = p_in(a) p_out(a) / Z``; with ``v`` the cotangent of the
marginals it gives their vector-Jacobian product, a covariance:
``d theta_a = E[1_a G] - mu_a E[G] = (p_in q_out + q_in p_out)(a) / Z - mu_a q_Z / Z``.

Weights are kept in probability space (float64), each arc score less the largest score of an
arc into the same word, so every tree weighs at most 1. A sentence whose (scaled) partition
function falls below ``_SMALLEST`` (its best tree lies more than ~575 nats below the best head
of every word: partial trees that matter could then be denormal) or overflows, or whose results
are not finite, is flagged, and the caller solves it in log space instead.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

from ..common.compiled import available, kernel_threads, threads_for
from ._chain_numba import usable

__all__ = ["TreeInference", "available", "run", "usable"]

# Scaled partition functions below this go to the log-space solver: every partial tree of a tree
# with probability above 1e-50 then weighs more than 1e-300, a normal float64 number.
_SMALLEST = 1e-250


@functools.cache
def _kernel():
    """Compile (or load from numba's cache) the kernel on first use."""
    import numba

    @numba.njit(cache=True, parallel=True)
    def inside_outside(arcs, cotangent, lengths, multiroot, log_z, marginals, vjp, ok):
        batch, size, _ = arcs.shape  # pragma: no cover - compiled
        for b in numba.prange(batch):
            n = lengths[b]
            # every tree gives each word one head: scaling column m by its largest arc keeps
            # every tree's weight in (0, 1] and the best one's as large as possible
            shift = np.full(n + 1, -np.inf)
            for h in range(n + 1):
                for m in range(1, n + 1):
                    if h != m:
                        shift[m] = max(shift[m], arcs[b, h, m])
            w = np.zeros((n + 1, n + 1))
            v = np.zeros((n + 1, n + 1))
            for h in range(n + 1):
                for m in range(1, n + 1):
                    if h != m:
                        w[h, m] = np.exp(arcs[b, h, m] - shift[m])
                        v[h, m] = cotangent[b, h, m]
            # inside: [0] = p, [1] = q for IR, IL (incomplete), CR, CL (complete) spans [s, t]
            ir = np.zeros((2, n + 1, n + 1))
            il = np.zeros((2, n + 1, n + 1))
            cr = np.zeros((2, n + 1, n + 1))
            cl = np.zeros((2, n + 1, n + 1))
            for s in range(n + 1):
                cr[0, s, s] = 1.0
                cl[0, s, s] = 1.0
            for width in range(1, n + 1):
                for s in range(n + 1 - width):
                    t = s + width
                    last = s if (not multiroot and s == 0) else t - 1  # one root child
                    acc_p = 0.0
                    acc_q = 0.0
                    for r in range(s, last + 1):
                        acc_p += cr[0, s, r] * cl[0, r + 1, t]
                        acc_q += cr[0, s, r] * cl[1, r + 1, t] + cr[1, s, r] * cl[0, r + 1, t]
                    ir[0, s, t] = acc_p * w[s, t]
                    ir[1, s, t] = (acc_q + acc_p * v[s, t]) * w[s, t]
                    il[0, s, t] = acc_p * w[t, s]
                    il[1, s, t] = (acc_q + acc_p * v[t, s]) * w[t, s]
                    p = 0.0
                    q = 0.0
                    for r in range(s + 1, t + 1):
                        p += ir[0, s, r] * cr[0, r, t]
                        q += ir[0, s, r] * cr[1, r, t] + ir[1, s, r] * cr[0, r, t]
                    cr[0, s, t] = p
                    cr[1, s, t] = q
                    p = 0.0
                    q = 0.0
                    for r in range(s, t):
                        p += cl[0, s, r] * il[0, r, t]
                        q += cl[0, s, r] * il[1, r, t] + cl[1, s, r] * il[0, r, t]
                    cl[0, s, t] = p
                    cl[1, s, t] = q
            z = cr[0, 0, n]
            ok[b] = z > _SMALLEST and z < np.inf
            if not ok[b]:
                continue
            log_z[b] = np.log(z) + shift[1:].sum()
            mean = cr[1, 0, n] / z
            # outside, widest spans first; at one width complete spans before incomplete ones
            oir = np.zeros((2, n + 1, n + 1))
            oil = np.zeros((2, n + 1, n + 1))
            ocr = np.zeros((2, n + 1, n + 1))
            ocl = np.zeros((2, n + 1, n + 1))
            ocr[0, 0, n] = 1.0
            for width in range(n, 0, -1):
                for s in range(n + 1 - width):
                    t = s + width
                    gp, gq = ocr[0, s, t], ocr[1, s, t]
                    for r in range(s + 1, t + 1):
                        oir[0, s, r] += gp * cr[0, r, t]
                        oir[1, s, r] += gp * cr[1, r, t] + gq * cr[0, r, t]
                        ocr[0, r, t] += gp * ir[0, s, r]
                        ocr[1, r, t] += gp * ir[1, s, r] + gq * ir[0, s, r]
                    gp, gq = ocl[0, s, t], ocl[1, s, t]
                    for r in range(s, t):
                        ocl[0, s, r] += gp * il[0, r, t]
                        ocl[1, s, r] += gp * il[1, r, t] + gq * il[0, r, t]
                        oil[0, r, t] += gp * cl[0, s, r]
                        oil[1, r, t] += gp * cl[1, s, r] + gq * cl[0, s, r]
                for s in range(n + 1 - width):
                    t = s + width
                    # outside of the shared sum acc = sum_r CR[s, r] CL[r + 1, t]
                    gp = oir[0, s, t] * w[s, t] + oil[0, s, t] * w[t, s]
                    gq = ((oir[1, s, t] + oir[0, s, t] * v[s, t]) * w[s, t]
                          + (oil[1, s, t] + oil[0, s, t] * v[t, s]) * w[t, s])
                    last = s if (not multiroot and s == 0) else t - 1
                    for r in range(s, last + 1):
                        ocr[0, s, r] += gp * cl[0, r + 1, t]
                        ocr[1, s, r] += gp * cl[1, r + 1, t] + gq * cl[0, r + 1, t]
                        ocl[0, r + 1, t] += gp * cr[0, s, r]
                        ocl[1, r + 1, t] += gp * cr[1, s, r] + gq * cr[0, s, r]
            for s in range(n + 1):
                for t in range(s + 1, n + 1):
                    mu = ir[0, s, t] * oir[0, s, t] / z
                    marginals[b, s, t] = mu
                    vjp[b, s, t] = (ir[0, s, t] * oir[1, s, t] + ir[1, s, t] * oir[0, s, t]) / z \
                        - mu * mean
                    if s > 0:
                        mu = il[0, s, t] * oil[0, s, t] / z
                        marginals[b, t, s] = mu
                        vjp[b, t, s] = (il[0, s, t] * oil[1, s, t]
                                        + il[1, s, t] * oil[0, s, t]) / z - mu * mean
            if not (np.isfinite(marginals[b]).all() and np.isfinite(vjp[b]).all()):
                ok[b] = False  # an outside score overflowed: leave the row to the caller
                marginals[b] = 0.0
                vjp[b] = 0.0

    return inside_outside


@torch.compiler.disable
def run(arcs: Tensor, cotangent: Tensor | None, lengths: Tensor, multiroot: bool,
        threads: int | None = None):
    """``(log_z [B], marginals [B, N+1, N+1], vjp [B, N+1, N+1], ok [B])`` as float64 numpy
    arrays; ``vjp`` is 0 without a cotangent, and rows with ``ok`` False are not computed.
    ``threads``: see :func:`lit_structattn.common.compiled.kernel_threads`."""
    batch, size, _ = arcs.shape
    a = arcs.detach().contiguous().numpy()
    if cotangent is None:
        v = np.zeros_like(a)
    else:
        v = cotangent.detach().to(arcs.dtype).contiguous().numpy()
    log_z = np.zeros(batch)
    marginals = np.zeros((batch, size, size))
    vjp = np.zeros((batch, size, size))
    ok = np.zeros(batch, dtype=np.bool_)
    with kernel_threads(threads):
        _kernel()(a, v, lengths.detach().to(torch.int64).numpy(), multiroot, log_z, marginals,
                  vjp, ok)
    return log_z, marginals, vjp, ok


class TreeInference(torch.autograd.Function):
    """``(log_z [B], marginals [B, N+1, N+1], ok [B] bool)`` of projective trees over
    ``arcs [B, N+1, N+1]`` (CPU, float32 or float64; ``arcs[b, h, m]`` scores h -> m, non-arcs
    ignored) with ``lengths [B]``; marginals exactly 0 at non-arcs. Rows with ``ok`` False
    over- or underflowed in probability space and hold zeros. Differentiable twice through
    ``log_z``, whose gradient is the marginals (torch ops on the saved output), and once through
    the marginals (the covariance above, :class:`_Covariance`)."""

    @staticmethod
    def forward(ctx, arcs: Tensor, lengths: Tensor, multiroot: bool):
        ctx.threads = threads_for(arcs.numel() * arcs.shape[-1])  # the backward uses it too
        log_z, marginals, _, ok = run(arcs, None, lengths, multiroot, ctx.threads)
        log_z = torch.from_numpy(log_z).to(arcs.dtype)
        marginals = torch.from_numpy(marginals).to(arcs.dtype)
        ctx.save_for_backward(arcs, marginals)
        ctx.lengths, ctx.multiroot = lengths.detach().clone(), multiroot  # may be an inference
        # tensor (built under torch.inference_mode), which save_for_backward refuses
        ok = torch.from_numpy(ok)
        ctx.mark_non_differentiable(ok)
        ctx.set_materialize_grads(False)  # no kernel run when only log Z is differentiated
        return log_z, marginals, ok

    @staticmethod
    def backward(ctx, g_log_z: Tensor | None, g_marginals: Tensor | None, _):
        arcs, marginals = ctx.saved_tensors
        if g_marginals is None:  # autograd may ask with no cotangent at all
            return None if g_log_z is None else g_log_z[:, None, None] * marginals, None, None
        grad = _Covariance.apply(arcs, g_marginals, ctx.lengths, ctx.multiroot, ctx.threads)
        if g_log_z is not None:
            grad = grad + g_log_z[:, None, None] * marginals
        return grad, None, None


class _Covariance(torch.autograd.Function):
    """The vector-Jacobian product of the marginals of ``arcs`` for the cotangent
    ``g_marginals``, by the compiled kernel; not differentiable."""

    @staticmethod
    def forward(ctx, arcs: Tensor, g_marginals: Tensor, lengths: Tensor, multiroot: bool,
                threads: int):
        _, _, vjp, _ = run(arcs, g_marginals, lengths, multiroot, threads)
        return torch.from_numpy(vjp).to(arcs.dtype)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("DependencyCRF: marginals from the compiled kernel are differentiable "
                           "once (log Z twice); switch the kernel off for higher derivatives")
