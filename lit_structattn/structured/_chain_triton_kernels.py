"""Triton kernels of the chain CRF (see :mod:`._chain_kernel` for the math and
:mod:`._chain_triton` for how they are called). Imported on first use: ``triton.jit`` then
compiles them for the GPU, or hands them to Triton's interpreter where ``TRITON_INTERPRET=1``.

One program per chain ``b``; ``c = arange(BLOCK)`` indexes labels (``ok = c < C``); vectors are
``[BLOCK]`` and tiles ``[BLOCK, BLOCK]`` indexed ``[i, j]`` (label ``i`` at ``t``, ``j`` at
``t + 1``). Outputs and buffers are contiguous; the inputs come with their strides (a shared
transition is a ``[B, T-1, C, C]`` view with stride 0 over batch and time).
"""

from __future__ import annotations

import triton
import triton.language as tl

# log(0), which masked lanes load: they add nothing to a max or to a sum of exps. A Triton
# constexpr: a kernel reads no other kind of global.
NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def _chain_program(lengths, labels, BLOCK: tl.constexpr):  # pragma: no cover - compiled
    """This program's chain ``b`` (int64), the label lanes ``c`` and their mask ``ok``, the
    tile mask ``tile_ok`` and contiguous offsets ``tile`` of ``[C, C]`` entries, and the
    chain's length."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    ok = c < labels
    return b, c, ok, ok[:, None] & ok[None, :], c[:, None] * labels + c[None, :], \
        tl.load(lengths + b)


@triton.jit
def forward_kernel(unary, transition, lengths, log_z, node, edge, weights, totals,
                   su_b, su_t, su_c, sw_b, sw_t, sw_i, sw_j, steps, labels,
                   BLOCK: tl.constexpr):  # pragma: no cover - compiled
    """log Z, node and edge marginals of chain ``b``; ``weights [B, T-1, C, C]`` and ``totals
    [B, T-1, C]`` (float64) hold ``w_t`` and ``S_t`` between the two sweeps."""
    b, c, ok, tile_ok, tile, length = _chain_program(lengths, labels, BLOCK)
    unary += b * su_b
    transition += b * sw_b + c[:, None] * sw_i + c[None, :] * sw_j
    node += b * steps * labels
    edge += b * (steps - 1) * labels * labels
    weights += b * (steps - 1) * labels * labels
    totals += b * (steps - 1) * labels

    log_alpha = tl.load(unary + c * su_c, mask=ok, other=NEG_INF).to(tl.float64)
    for t in range(0, length - 1):
        scores = log_alpha[:, None] + tl.load(transition + t * sw_t, mask=tile_ok,
                                              other=NEG_INF).to(tl.float64)
        shift = tl.max(scores, 0)
        shift = tl.where(shift == NEG_INF, 0.0, shift)  # an unreachable label j stays -inf
        weight = tl.exp(scores - shift[None, :])
        total = tl.sum(weight, 0)
        tl.store(weights + t * labels * labels + tile, weight, mask=tile_ok)
        tl.store(totals + t * labels + c, total, mask=ok)
        log_alpha = shift + tl.log(total) + tl.load(unary + (t + 1) * su_t + c * su_c, mask=ok,
                                                    other=NEG_INF).to(tl.float64)

    most = tl.max(log_alpha, 0)
    value = most + tl.log(tl.sum(tl.exp(log_alpha - most), 0))
    tl.store(log_z + b, value.to(log_z.dtype.element_ty))
    mu = tl.exp(log_alpha - value)
    tl.store(node + (length - 1) * labels + c, mu.to(node.dtype.element_ty), mask=ok)
    for back in range(0, length - 1):
        t = length - 2 - back
        total = tl.load(totals + t * labels + c, mask=ok, other=0.0)
        ratio = tl.where(total != 0.0, mu / tl.where(total != 0.0, total, 1.0), 0.0)
        pair = tl.load(weights + t * labels * labels + tile, mask=tile_ok, other=0.0) \
            * ratio[None, :]
        tl.store(edge + t * labels * labels + tile, pair.to(edge.dtype.element_ty),
                 mask=tile_ok)
        mu = tl.sum(pair, 1)
        tl.store(node + t * labels + c, mu.to(node.dtype.element_ty), mask=ok)


@triton.jit
def covariance_kernel(node, edge, g_node, g_edge, lengths, d_unary, d_transition, past,
                      sg_b, sg_t, sg_c, sh_b, sh_t, sh_i, sh_j, steps, labels,
                      BLOCK: tl.constexpr):  # pragma: no cover - compiled
    """``d_unary`` and ``d_transition`` of chain ``b`` for the cotangents ``g_node`` (strides
    ``sg_*``) and ``g_edge`` (``sh_*``); ``past [B, T, C]`` (float64) holds the expected past
    ``F`` between the two sweeps, the expected future ``B`` is carried in the second."""
    b, c, ok, tile_ok, tile, length = _chain_program(lengths, labels, BLOCK)
    node += b * steps * labels
    edge += b * (steps - 1) * labels * labels
    d_unary += b * steps * labels
    d_transition += b * (steps - 1) * labels * labels
    past += b * steps * labels
    g_node += b * sg_b + c * sg_c
    g_edge += b * sh_b + c[:, None] * sh_i + c[None, :] * sh_j

    # E[G] accumulated per label, and the expected past F_t, forwards
    mean = tl.zeros((BLOCK,), tl.float64)
    before = tl.zeros((BLOCK,), tl.float64)
    for t in range(0, length - 1):
        mu = tl.load(node + t * labels + c, mask=ok, other=0.0).to(tl.float64)
        g = tl.load(g_node + t * sg_t, mask=ok, other=0.0).to(tl.float64)
        pair = tl.load(edge + t * labels * labels + tile, mask=tile_ok, other=0.0).to(tl.float64)
        h = tl.load(g_edge + t * sh_t, mask=tile_ok, other=0.0).to(tl.float64)
        mean += mu * g + tl.sum(pair * h, 1)
        mu_next = tl.load(node + (t + 1) * labels + c, mask=ok, other=0.0).to(tl.float64)
        flow = tl.sum(pair * (before[:, None] + g[:, None] + h), 0)
        before = tl.where(mu_next > 0.0, flow / tl.where(mu_next > 0.0, mu_next, 1.0), 0.0)
        tl.store(past + (t + 1) * labels + c, before, mask=ok)
    last = length - 1
    mu = tl.load(node + last * labels + c, mask=ok, other=0.0).to(tl.float64)
    g_next = tl.load(g_node + last * sg_t, mask=ok, other=0.0).to(tl.float64)
    mean = tl.sum(mean + mu * g_next, 0)
    tl.store(d_unary + last * labels + c, (mu * (g_next + before - mean))
             .to(d_unary.dtype.element_ty), mask=ok)

    # the expected future B_t, backwards, and the gradients as it goes
    after = tl.zeros((BLOCK,), tl.float64)
    for back in range(0, length - 1):
        t = length - 2 - back
        mu = tl.load(node + t * labels + c, mask=ok, other=0.0).to(tl.float64)
        g = tl.load(g_node + t * sg_t, mask=ok, other=0.0).to(tl.float64)
        pair = tl.load(edge + t * labels * labels + tile, mask=tile_ok, other=0.0).to(tl.float64)
        h = tl.load(g_edge + t * sh_t, mask=tile_ok, other=0.0).to(tl.float64)
        before = tl.load(past + t * labels + c, mask=ok, other=0.0)
        d_pair = pair * (before[:, None] + g[:, None] + h + g_next[None, :] + after[None, :]
                         - mean)
        tl.store(d_transition + t * labels * labels + tile,
                 d_pair.to(d_transition.dtype.element_ty), mask=tile_ok)
        flow = tl.sum(pair * (after[None, :] + g_next[None, :] + h), 1)
        after = tl.where(mu > 0.0, flow / tl.where(mu > 0.0, mu, 1.0), 0.0)
        tl.store(d_unary + t * labels + c, (mu * (g + before + after - mean))
                 .to(d_unary.dtype.element_ty), mask=ok)
        g_next = g
