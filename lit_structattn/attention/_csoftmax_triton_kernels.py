"""Triton kernels of csoftmax (see :mod:`._csoftmax_triton` for the method and how they are
called). Imported on first use: ``triton.jit`` then compiles them for the GPU, or hands them to
Triton's interpreter where ``TRITON_INTERPRET=1``.

Each program holds ``ROWS`` rows of ``BLOCK`` lanes (``ok``: lanes inside the batch and the row
length); per-row quantities are ``[ROWS]`` vectors. ``WIDE``: the scores are float64 and every
step is computed in float64; otherwise the search runs in float32 and the closed form's sums in
float64. The outputs are contiguous ``[rows, L]``; the inputs come with their strides.
"""

from __future__ import annotations

import triton
import triton.language as tl

# A kernel reads no globals but constexprs.
NEG_INF = tl.constexpr(float("-inf"))
POS_INF = tl.constexpr(float("inf"))
EPS64 = tl.constexpr(2.0**-52)
EPS32 = tl.constexpr(2.0**-23)
TINY64 = tl.constexpr(2.0**-1022)
# The smallest free mass a Newton step trusts (tiny / eps): below it the largest free weights
# are subnormal and have lost their digits, and the row is bisected instead.
TRUSTED64 = tl.constexpr(2.0**-970)
TRUSTED32 = tl.constexpr(2.0**-103)
FREE = tl.constexpr(1)  # state codes of a position: 0 masked, 1 free, 2 at its bound
AT_BOUND = tl.constexpr(2)
POLISH = tl.constexpr(3)  # float64 Newton steps after the search, at most


@triton.jit
def _tile(n_rows, length, ROWS: tl.constexpr, BLOCK: tl.constexpr):  # pragma: no cover
    """This program's rows ``r [ROWS]`` (int64), lanes ``c [BLOCK]`` and mask ``ok``."""
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, BLOCK)
    return r, c, (r < n_rows)[:, None] & (c < length)[None, :]


@triton.jit
def _compute(x, WIDE: tl.constexpr):  # pragma: no cover - compiled
    """``x`` in the search's dtype: float64 if ``WIDE``, else float32."""
    if WIDE:
        return x.to(tl.float64)
    else:
        return x.to(tl.float32)


@triton.jit
def _mass(zc, u, pinned, t):  # pragma: no cover - compiled
    """At thresholds ``t [ROWS]``: the clamped set ``{exp(z_i - t) > u_i}`` (with the positions
    pinned at a zero bound), its bound mass ``s`` (float64) and size, and the free mass
    ``w = sum_free exp(z_i - t)``."""
    e = tl.exp(zc - t[:, None])  # +inf far above t: such a position is clamped
    clamped = pinned | (e > u)
    s = tl.sum(tl.where(clamped, u, 0.0).to(tl.float64), 1)
    w = tl.sum(tl.where(clamped, 0.0, e), 1)
    return clamped, s, w, tl.sum(clamped.to(tl.int32), 1)


@triton.jit
def _closed_form(z64, u, valid, clamped, WIDE: tl.constexpr):  # pragma: no cover - compiled
    """For the clamped set ``clamped``: the free positions, their exponents ``z_i - tau``
    (float64) with ``tau = m + log sum_free exp(z_i - m) - log(1 - sum_clamped u_i)`` from the
    largest free score ``m``, and the weights ``exp(z_i - tau)`` (``+inf`` everywhere in a row
    with no free position: all at their bound)."""
    free = valid & ~clamped
    peak = tl.max(tl.where(free, z64, NEG_INF), 1)
    has_free = peak > NEG_INF
    gap = z64 - tl.where(has_free, peak, 0.0)[:, None]
    free_mass = tl.sum(tl.where(free, tl.exp(_compute(gap, WIDE)), 0.0).to(tl.float64), 1)
    leftover = tl.maximum(1.0 - tl.sum(tl.where(clamped, u, 0.0).to(tl.float64), 1), TINY64)
    exponent = gap - (tl.log(tl.where(has_free, free_mass, 1.0)) - tl.log(leftover))[:, None]
    weight = tl.where(has_free[:, None], tl.exp(_compute(exponent, WIDE)), POS_INF)
    return free, exponent, weight


@triton.jit
def forward_kernel(z_ptr, u_ptr, valid_ptr, a_ptr, state_ptr, certified_ptr,
                   sz_r, sz_c, su_r, su_c, sv_r, sv_c, n_rows, length,
                   HAS_MASK: tl.constexpr, WIDE: tl.constexpr, MAX_ITER: tl.constexpr,
                   ROWS: tl.constexpr, BLOCK: tl.constexpr):  # pragma: no cover - compiled
    """``a``, the state of every position and the certification flag of every row."""
    r, c, ok = _tile(n_rows, length, ROWS, BLOCK)
    raw = tl.load(z_ptr + r[:, None] * sz_r + c[None, :] * sz_c, mask=ok, other=0.0)
    bound = tl.load(u_ptr + r[:, None] * su_r + c[None, :] * su_c, mask=ok, other=0.0)
    valid = ok
    if HAS_MASK:
        valid = valid & (tl.load(valid_ptr + r[:, None] * sv_r + c[None, :] * sv_c, mask=ok,
                                 other=0) != 0)
    bound = _compute(bound, WIDE)
    broken = tl.sum((valid & (bound != bound)).to(tl.int32), 1) > 0  # a NaN bound
    u = tl.where(valid & (bound > 0), bound, 0.0)
    z = _compute(raw, WIDE)
    top = tl.max(tl.where(valid, z, NEG_INF), 1)
    nonempty = top > NEG_INF
    top = tl.where(nonempty, top, 0.0)
    zc = tl.where(valid, z - top[:, None], NEG_INF)
    pinned = valid & (u <= 0)
    open_ = valid & (u > 0)

    # the bracket: at lo (the smallest ratio z_i - log u_i) every position is at its bound, a
    # mass sum(u) >= 1; hi, the threshold with only the pinned positions clamped, is the first
    # Newton point (its mass is at most 1). A Newton step from any point t, on the piece of the
    # mass function through t (s + w exp(t - tau) = 1), never falls below the solution.
    lo = tl.min(tl.where(open_, zc - tl.log(tl.where(open_, u, 1.0)), POS_INF), 1)
    peak = tl.max(tl.where(open_, zc, NEG_INF), 1)
    peak = tl.where(peak > NEG_INF, peak, 0.0)
    hi = peak + tl.log(tl.sum(tl.where(open_, tl.exp(zc - peak[:, None]), 0.0), 1)
                       + tl.where(nonempty, 0.0, 1.0))  # a row with no valid position: log 1
    lo = tl.where(nonempty, tl.minimum(lo, hi), 0.0)
    hi = tl.where(nonempty, hi, 0.0)
    eps = EPS64 if WIDE else EPS32
    t = hi
    source = tl.sum(pinned.to(tl.int32), 1)  # the set size at the point t was Newton's step from
    active = nonempty
    steps = 0
    while (steps < MAX_ITER) & (tl.max(active.to(tl.int32), 0) > 0):
        clamped, s, w, size = _mass(zc, u, pinned, t)
        done = active & (size == source)  # t solves the piece it was computed on: the solution
        lower = s + w.to(tl.float64) > 1
        new_lo = tl.where(lower, t, lo)
        new_hi = tl.where(lower, hi, tl.minimum(hi, t))
        leftover = 1.0 - s
        usable = (leftover > 0) & (w >= (TRUSTED64 if WIDE else TRUSTED32))
        newton = (t.to(tl.float64) + tl.log(tl.where(usable, w, 1.0).to(tl.float64))
                  - tl.log(tl.where(usable, leftover, 1.0)))
        # rounded up past the rounding of w, of the log and of the cast: still an upper bound
        newton = (newton + eps * (tl.abs(newton) + 32)).to(t.dtype)
        take = usable & (newton < new_hi) & (newton > new_lo)
        new_hi = tl.where(take, newton, new_hi)
        by_newton = take & (new_hi - new_lo <= 0.5 * (hi - lo))
        middle = 0.5 * (new_lo + new_hi)
        collapsed = ~by_newton & ((middle <= new_lo) | (middle >= new_hi))
        hi = tl.where(active, tl.where(done, t, new_hi), hi)
        lo = tl.where(active, new_lo, lo)
        t = tl.where(active, tl.where(by_newton, new_hi, middle), t)
        source = tl.where(by_newton, size, -1)
        active = active & ~done & ~collapsed
        steps += 1

    # the closed form on the set found at hi, in float64; then exact Newton steps from above
    # (each clamps the free positions it finds above their bound) for the near-ties that the
    # search's float32 resolution could not separate
    clamped = _mass(zc, u, pinned, hi)[0]
    z64 = tl.where(valid, raw.to(tl.float64) - top.to(tl.float64)[:, None], NEG_INF)
    free, exponent, weight = _closed_form(z64, u, valid, clamped, WIDE)
    polish = 0
    while (polish < POLISH) & (tl.max(tl.sum((free & (weight > u)).to(tl.int32), 1), 0) > 0):
        clamped = clamped | (free & (weight > u))
        free, exponent, weight = _closed_form(z64, u, valid, clamped, WIDE)
        polish += 1
    a = tl.where(clamped, u, tl.where(valid, tl.minimum(u, weight), 0.0))

    # certification. The clamped set lies inside the solution's, since hi is an upper bound of
    # tau (Newton steps are rounded up) and the polishing steps start above tau too; if it misses
    # a position that matters, the free positions above their bound are cut to it and the mass
    # falls short of 1 by more than the rounding of the exponents and of the sums of bounds.
    mass = tl.sum(a.to(tl.float64), 1)
    spread = tl.sum(a.to(tl.float64) * tl.abs(tl.where(free, exponent, 0.0)), 1)
    total = tl.sum(u.to(tl.float64), 1)
    tolerance = 4 * eps * (1 + spread) + 64 * EPS64 * total
    certified = ~nonempty | ((tl.abs(mass - 1) <= tolerance) & ~broken)

    out = r[:, None] * length + c[None, :]
    tl.store(a_ptr + out, a.to(a_ptr.dtype.element_ty), mask=ok)
    state = tl.where(valid, tl.where(clamped, AT_BOUND, FREE), 0)
    tl.store(state_ptr + out, state.to(tl.int8), mask=ok)
    tl.store(certified_ptr + r, certified, mask=r < n_rows)


@triton.jit
def backward_kernel(a_ptr, state_ptr, g_ptr, dz_ptr, du_ptr, sg_r, sg_c, n_rows, length,
                    WIDE: tl.constexpr, ROWS: tl.constexpr,
                    BLOCK: tl.constexpr):  # pragma: no cover - compiled
    """``dz = 1[free] a (g - m)`` and ``du = 1[at bound] (g - m)`` with
    ``m = sum_free a g / sum_free a``, for the cotangent ``g`` (strides ``sg_*``)."""
    r, c, ok = _tile(n_rows, length, ROWS, BLOCK)
    out = r[:, None] * length + c[None, :]
    a = _compute(tl.load(a_ptr + out, mask=ok, other=0.0), WIDE)
    state = tl.load(state_ptr + out, mask=ok, other=0)
    g = _compute(tl.load(g_ptr + r[:, None] * sg_r + c[None, :] * sg_c, mask=ok, other=0.0),
                 WIDE)
    free = state == FREE
    free_a = tl.where(free, a, 0.0)
    free_mass = tl.maximum(tl.sum(free_a, 1), TINY64 if WIDE else 2.0**-126)
    mean = tl.sum(tl.where(free, a * g, 0.0), 1) / free_mass
    centered = g - mean[:, None]
    tl.store(dz_ptr + out, tl.where(free, a * centered, 0.0).to(dz_ptr.dtype.element_ty),
             mask=ok)
    tl.store(du_ptr + out, tl.where(state == AT_BOUND, centered, 0.0)
             .to(du_ptr.dtype.element_ty), mask=ok)
