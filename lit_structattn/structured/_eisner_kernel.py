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

Weights are kept in probability space (float64) after subtracting the sentence's largest arc
score; a sentence whose partition function over- or underflows there is flagged, and the caller
solves it in log space instead.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ._chain_kernel import available, kernel_threads, usable

__all__ = ["TreeInference", "available", "run", "usable"]


@functools.cache
def _kernel():
    """Compile (or load from numba's cache) the kernel on first use."""
    import numba

    @numba.njit(cache=True, parallel=True)
    def inside_outside(arcs, cotangent, lengths, multiroot, log_z, marginals, vjp, ok):
        batch, size, _ = arcs.shape  # pragma: no cover - compiled
        for b in numba.prange(batch):
            n = lengths[b]
            shift = -np.inf
            for h in range(n + 1):
                for m in range(1, n + 1):
                    if h != m:
                        shift = max(shift, arcs[b, h, m])
            w = np.zeros((n + 1, n + 1))
            v = np.zeros((n + 1, n + 1))
            for h in range(n + 1):
                for m in range(1, n + 1):
                    if h != m:
                        w[h, m] = np.exp(arcs[b, h, m] - shift)
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
            ok[b] = z > 0.0 and z < np.inf
            if not ok[b]:
                continue
            log_z[b] = np.log(z) + n * shift
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

    return inside_outside


def run(arcs: Tensor, cotangent: Tensor | None, lengths: Tensor, multiroot: bool,
        threads: int | None = None):
    """``(log_z [B], marginals [B, N+1, N+1], vjp [B, N+1, N+1], ok [B])`` as float64 numpy
    arrays; ``vjp`` is 0 without a cotangent, and rows with ``ok`` False are not computed.
    ``threads``: see :func:`kernel_threads`."""
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
    ``arcs [B, N+1, N+1]`` (CPU; ``arcs[b, h, m]`` scores h -> m, non-arcs ignored) with
    ``lengths [B]``; marginals exactly 0 at non-arcs. Rows with ``ok`` False over- or underflowed
    in probability space and hold no result. Differentiable once (the backward is the covariance
    above)."""

    @staticmethod
    def forward(ctx, arcs: Tensor, lengths: Tensor, multiroot: bool):
        ctx.threads = torch.get_num_threads()  # for the backward, see kernel_threads
        log_z, marginals, _, ok = run(arcs, None, lengths, multiroot, ctx.threads)
        ctx.save_for_backward(arcs)
        ctx.lengths, ctx.multiroot = lengths.detach().clone(), multiroot  # may be an inference
        # tensor (built under torch.inference_mode), which save_for_backward refuses
        ok = torch.from_numpy(ok)
        ctx.mark_non_differentiable(ok)
        return (torch.from_numpy(log_z).to(arcs.dtype),
                torch.from_numpy(marginals).to(arcs.dtype), ok)

    @staticmethod
    @once_differentiable
    def backward(ctx, g_log_z: Tensor | None, g_marginals: Tensor | None, _):
        (arcs,) = ctx.saved_tensors
        _, marginals, vjp, _ = run(arcs, g_marginals, ctx.lengths, ctx.multiroot, ctx.threads)
        grad = torch.from_numpy(vjp)
        if g_log_z is not None:
            grad = grad + g_log_z.to(torch.float64)[:, None, None] * torch.from_numpy(marginals)
        return grad.to(arcs.dtype), None, None
