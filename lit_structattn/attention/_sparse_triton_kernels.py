"""Triton kernels of sparsemax and csparsemax, and with ``SQUARE`` of 1.5-entmax and its
constrained form (see :mod:`._sparse_triton` for the method and how they are called). Imported
on first use: ``triton.jit`` then compiles them for the GPU, or hands them to Triton's
interpreter where ``TRITON_INTERPRET=1``.

One program per ``ROWS`` rows: a ``[ROWS, BLOCK]`` tile (``BLOCK`` the power of two that holds a
row), per-row quantities ``[ROWS]`` vectors. Inputs come with their strides (bounds broadcast
over rows have stride 0); outputs are contiguous ``[rows, length]``. ``WIDE``: compute in
float64 (float64 inputs), else in float32 (float32, float16 and bfloat16 inputs).
"""

from __future__ import annotations

import triton
import triton.language as tl

# A Triton constexpr: a kernel reads no other kind of global.
NEG_INF = tl.constexpr(float("-inf"))
POS_INF = tl.constexpr(float("inf"))
NAN = tl.constexpr(float("nan"))


@triton.jit
def _tile(rows, length, ROWS: tl.constexpr, BLOCK: tl.constexpr):  # pragma: no cover - compiled
    """This program's rows ``r [ROWS]`` (int64), the lanes ``j [BLOCK]``, the mask ``inside
    [ROWS, BLOCK]`` of the tile's entries that exist and their contiguous offsets ``at``."""
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    j = tl.arange(0, BLOCK)
    inside = (r < rows)[:, None] & (j < length)[None, :]
    return r, j, inside, r[:, None] * length + j[None, :]


@triton.jit
def _widen(x, WIDE: tl.constexpr):  # pragma: no cover - compiled
    """``x`` in the compute dtype: float64 if ``WIDE``, else float32."""
    if WIDE:
        wide = x.to(tl.float64)
    else:
        wide = x.to(tl.float32)
    return wide


@triton.jit
def _sqrt(x, WIDE: tl.constexpr):  # pragma: no cover - compiled
    """``sqrt(x)`` correctly rounded, as torch's (``tl.sqrt`` is approximate in float32)."""
    if WIDE:
        root = tl.sqrt(x)
    else:
        root = tl.sqrt_rn(x)
    return root


@triton.jit
def _two_sum(a, b):  # pragma: no cover - compiled
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth's TwoSum)."""
    s = a + b
    b_part = s - a
    return s, (a - (s - b_part)) + (b - b_part)


@triton.jit
def _sets(c, b, t, d, BOUNDED: tl.constexpr, SQUARE: tl.constexpr):  # pragma: no cover - compiled
    """At thresholds ``t + d`` (``[ROWS]`` each; ``d`` a small correction of ``t``): ``x = (c -
    t) - d`` (``c - t`` is exact where ``c`` is within a factor 2 of ``t``, as the free scores
    are), halved if ``SQUARE``; the coordinate ``x`` (``x^2`` if ``SQUARE``) where ``x > 0``;
    whether ``x > 0``; and whether the coordinate is above its bound (never without
    ``BOUNDED``), each ``[ROWS, BLOCK]``."""
    x = (c - t[:, None]) - d[:, None]
    if SQUARE:
        x = 0.5 * x
        value = x * x
    else:
        value = x
    above = x > 0
    if BOUNDED:
        return x, value, above, above & (value > b)
    return x, value, above, x != x  # false: masked lanes hold -inf, not NaN


@triton.jit
def forward_kernel(z, u, valid, out, state, flagged, sz_r, sz_j, su_r, su_j, sv_r, sv_j,
                   rows, length, BOUNDED: tl.constexpr, MASKED: tl.constexpr,
                   SQUARE: tl.constexpr, WIDE: tl.constexpr, TOLERANCE: tl.constexpr,
                   FEASIBLE: tl.constexpr, MAX_STEPS: tl.constexpr, ROWS: tl.constexpr,
                   BLOCK: tl.constexpr):  # pragma: no cover - compiled
    """``out = clip(z - tau, 0, u)`` (``max(z - tau, 0)`` without ``BOUNDED``; with ``SQUARE``
    ``clip(((z - tau) / 2)_+^2, 0, u)``) of each row, ``state`` (int8: 0 zero, 1 free, 2 at its
    bound) and ``flagged`` (int8 ``[rows]``, for the host: the mass written misses 1 by more
    than ``TOLERANCE``, or the bounds sum to less than ``FEASIBLE``). ``valid`` is read only if
    ``MASKED``. A ``-inf`` score is a masked position; a NaN or ``+inf`` one at a valid
    position makes the row NaN (state 0, not flagged)."""
    r, j, inside, at = _tile(rows, length, ROWS, BLOCK)
    ok = inside
    if MASKED:
        ok = inside & (tl.load(valid + r[:, None] * sv_r + j[None, :] * sv_j, mask=inside,
                               other=0) != 0)
    c = _widen(tl.load(z + r[:, None] * sz_r + j[None, :] * sz_j, mask=ok, other=0.0), WIDE)
    bad = ok & ((c != c) | (c == POS_INF))
    broken = tl.max(bad.to(tl.int32), 1) > 0
    ok = ok & (c > NEG_INF) & ~bad
    c = tl.where(ok, c, NEG_INF)
    top = tl.max(c, 1)
    nonempty = top > NEG_INF
    top = tl.where(nonempty, top, 0.0)  # mass 0 at the largest score
    hi = top
    # The largest coordinate alone has mass 1 at ``top - reach``.
    if SQUARE:
        reach = 2.0
    else:
        reach = 1.0
    if BOUNDED:
        b = tl.maximum(_widen(tl.load(u + r[:, None] * su_r + j[None, :] * su_j, mask=ok,
                                      other=0.0), WIDE), 0.0)
        b = tl.where(ok, b, 0.0)
        infeasible = nonempty & (tl.sum(b, 1) < FEASIBLE)
        # Below the lowest ``z_j - reach_j`` every coordinate is at its bound or alone has
        # mass 1 (``reach_j``: where the coordinate reaches min(b_j, 1)): mass >= 1. One under
        # it, so that a Newton root on that breakpoint (bounds summing to 1) is inside.
        if SQUARE:
            reach_j = 2.0 * _sqrt(tl.minimum(b, 1.0), WIDE)
        else:
            reach_j = b
        lo = tl.min(tl.where(ok, c - reach_j, POS_INF), 1) - 1
        lo = tl.where(nonempty, lo, top - reach)
        t = tl.maximum(lo, top - reach)
    else:
        b = c  # unused
        infeasible = tl.zeros((ROWS,), tl.int1)
        lo = top - reach
        t = lo
    # Points are pairs (t, d), d a correction within t's float spacing or so, so that Newton's
    # roots keep their digits; the bracket's ends are such points.
    d = tl.zeros((ROWS,), c.dtype)
    lo_d, hi_d = d, d
    tau, tau_d = t, d  # the threshold found
    newton = tl.zeros((ROWS,), tl.int1)
    move = hi - lo  # the moves of the point two steps ago and one
    last_move = move
    previous = tl.full((ROWS,), -1, tl.int32)
    previous_bound = previous
    done = ~nonempty
    pending = tl.sum((~done).to(tl.int32), 0)
    steps = 0
    while (pending > 0) & (steps < MAX_STEPS):
        x, value, above, at_bound = _sets(c, b, t, d, BOUNDED, SQUARE)
        # Both counts in one reduction: rows are shorter than 2**16 (MAX_LENGTH).
        counts = tl.sum(above.to(tl.int32) + (at_bound.to(tl.int32) << 16), 1)
        n_above, n_bound = counts & 0xFFFF, counts >> 16
        n_free = n_above - n_bound
        if BOUNDED:
            mass = tl.sum(tl.where(at_bound, b, tl.where(above, value, 0.0)), 1)
        else:
            mass = tl.sum(tl.where(above, value, 0.0), 1)
        # The root of the mass's piece through the point: exact once a Newton point leaves
        # the sets as they were (their sizes then tell, the sets being nested). Linear
        # (``SQUARE`` off): a step of ``(mass - 1) / |free|``. Quadratic: with ``y`` the free
        # halved gaps and ``Y`` their sum, a step of ``2 s`` for the smaller root of ``sum (y -
        # s)^2 = sum y^2 - (mass - 1)`` (the capped mass fixed), in the form ``s = (mass - 1) /
        # (Y + sqrt(Y^2 - |free| (mass - 1)))``, which keeps the step's digits near the root;
        # no root where the square root's argument is negative (the piece stays above 1:
        # bisect).
        excess = mass - 1
        size = tl.maximum(n_free, 1).to(c.dtype)
        if SQUARE:
            free_sum = tl.sum(tl.where(above & ~at_bound, x, 0.0), 1)
            discriminant = free_sum * free_sum - size * excess
            has_root = (n_free > 0) & (discriminant >= 0)
            step = 2.0 * excess / tl.maximum(
                free_sum + _sqrt(tl.maximum(discriminant, 0.0), WIDE), 1e-30)
        else:
            has_root = n_free > 0
            step = excess / size
        root, root_d = _two_sum(t, d + step)
        settled = (newton & (n_above == previous) & (n_bound == previous_bound)) | (mass == 1)
        tau = tl.where(done, tau, root)
        tau_d = tl.where(done, tau_d, root_d)
        done = done | settled
        enough = mass >= 1
        lo, lo_d = tl.where(enough, t, lo), tl.where(enough, d, lo_d)
        hi, hi_d = tl.where(enough, hi, t), tl.where(enough, hi_d, d)
        width = (hi - lo) + (hi_d - lo_d)
        # Newton's root where it is inside and moves less than half the move before last
        # (rtsafe's rule: then the bisections bound the number of points); else the
        # bracket's midpoint, as a pair once the bracket is about one float wide (a piece of
        # the mass can be narrower than the float spacing of the scores).
        jump = (root - t) + (root_d - d)
        newton = (has_root & ((root - lo) + (root_d - lo_d) > 0)
                  & ((hi - root) + (hi_d - root_d) > 0) & (2 * tl.abs(jump) < move))
        move, last_move = last_move, tl.where(newton, tl.abs(jump), 0.5 * width)
        middle = 0.5 * (lo + hi)
        narrow = (middle == lo) | (middle == hi)
        t = tl.where(newton, root, tl.where(narrow, lo, middle))
        d = tl.where(newton, root_d, tl.where(narrow, lo_d + 0.5 * width, 0.0))
        previous, previous_bound = n_above, n_bound
        pending = tl.sum((~done).to(tl.int32), 0)
        steps += 1

    x, value, above, at_bound = _sets(c, b, tau, tau_d, BOUNDED, SQUARE)
    a = tl.where(above, value, 0.0)
    if BOUNDED:
        a = tl.minimum(a, b)
    a = a.to(out.dtype.element_ty)
    tl.store(out + at, tl.where(broken[:, None], NAN, a), mask=inside)
    sets = tl.where(above & ~at_bound, 1, tl.where(at_bound, 2, 0))
    tl.store(state + at, tl.where(broken[:, None], 0, sets).to(tl.int8), mask=inside)
    # The mass of what was written, summed in float64 (exactly enough whatever the dtype).
    missed = tl.abs(tl.sum(a.to(tl.float64), 1) - 1)
    uncertified = nonempty & ~(missed <= TOLERANCE)
    tl.store(flagged + r, ((uncertified | infeasible) & ~broken).to(tl.int8), mask=r < rows)


@triton.jit
def backward_kernel(grad, value, state, d_scores, d_upper, sg_r, sg_j, rows, length,
                    BOUNDED: tl.constexpr, SQUARE: tl.constexpr, WIDE: tl.constexpr,
                    ROWS: tl.constexpr, BLOCK: tl.constexpr):  # pragma: no cover - compiled
    """``d_scores = s (g - m)`` and, if ``BOUNDED``, ``d_upper = 1[at bound] (g - m)``, with
    ``s`` the indicator of the free set (``sqrt(value)`` on it if ``SQUARE``, ``value`` the
    forward's output; read only then) and ``m = sum s g / sum s`` (a row with no free
    coordinate: zero gradients)."""
    r, j, inside, at = _tile(rows, length, ROWS, BLOCK)
    g = _widen(tl.load(grad + r[:, None] * sg_r + j[None, :] * sg_j, mask=inside, other=0.0),
               WIDE)
    s = tl.load(state + at, mask=inside, other=0)
    free = s == 1
    if SQUARE:
        weight = tl.where(free, _sqrt(_widen(tl.load(value + at, mask=inside, other=0.0),
                                             WIDE), WIDE), 0.0)
    else:
        weight = tl.where(free, 1.0, 0.0).to(g.dtype)
    total = tl.sum(weight, 1)
    mean = tl.sum(weight * g, 1) / tl.where(total > 0, total, 1.0)
    centered = tl.where((total > 0)[:, None], g - mean[:, None], 0.0)
    d_z = tl.where(free, weight * centered, 0.0)
    tl.store(d_scores + at, d_z.to(d_scores.dtype.element_ty), mask=inside)
    if BOUNDED:
        tl.store(d_upper + at, tl.where(s == 2, centered, 0.0).to(d_upper.dtype.element_ty),
                 mask=inside)
