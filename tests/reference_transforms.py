"""Independent float64 NumPy references for the attention transforms.

Each solves for the threshold tau of every row by bisection on the monotone mass function (not
by sorting or variable fixing, as the library does), starting from a bracket that holds at any
score scale; the tests also check the results against a generic QP/convex solver. All functions
take ``[..., L]`` arrays (rows along the last axis) and work in float64.
"""

from __future__ import annotations

import numpy as np

ITERATIONS = 200  # halves a bracket of width up to 1e5 far below float64 resolution


def _bisect(mass, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """tau ``[..., 1]`` with mass(tau) = 1 for a decreasing ``mass``;
    mass(low) >= 1 >= mass(high) row by row."""
    for _ in range(ITERATIONS):
        mid = 0.5 * (low + high)
        above = mass(mid) > 1
        low, high = np.where(above, mid, low), np.where(above, high, mid)
    return 0.5 * (low + high)


def _rows(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def sparsemax_ref(z: np.ndarray) -> np.ndarray:
    """Projection of every row of ``z [..., L]`` onto the simplex."""
    (z,) = _rows(z)
    top = z.max(-1, keepdims=True)
    tau = _bisect(lambda t: np.clip(z - t, 0, None).sum(-1, keepdims=True), top - 1, top)
    return np.clip(z - tau, 0, None)


def csparsemax_ref(z: np.ndarray, u: np.ndarray) -> np.ndarray:
    """argmin ||a - z||^2 over the simplex with a <= u (sum(u) >= 1), row by row."""
    z, u = _rows(z, u)
    low = (z - u).min(-1, keepdims=True) - 1  # every coordinate at its bound: mass sum(u)
    high = z.max(-1, keepdims=True)  # every coordinate at 0
    tau = _bisect(lambda t: np.clip(z - t, 0, u).sum(-1, keepdims=True), low, high)
    return np.clip(z - tau, 0, u)


def csoftmax_ref(z: np.ndarray, u: np.ndarray) -> np.ndarray:
    """argmin KL(a || softmax(z)) over the simplex with a <= u (sum(u) >= 1), row by row.

    In log space: ``a_i = min(u_i, exp(z_i - tau))``; at ``tau <= min_i (z_i - log u_i)`` every
    coordinate is at its bound, at ``tau = logsumexp(z)`` the mass is at most 1.
    """
    z, u = _rows(z, u)
    z = z - z.max(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        ratio = np.where(u > 0, z - np.log(u), np.inf)
    low = ratio.min(-1, keepdims=True) - 1
    high = np.log(np.exp(z).sum(-1, keepdims=True)) + 1

    @np.errstate(over="ignore")
    def mass(t: np.ndarray) -> np.ndarray:
        return np.minimum(u, np.exp(z - t)).sum(-1, keepdims=True)

    tau = _bisect(mass, low, high)
    with np.errstate(over="ignore"):
        return np.minimum(u, np.exp(z - tau))
