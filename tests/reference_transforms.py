"""Independent float64 NumPy references for the attention transforms.

Each solves for the threshold tau by bisection on the monotone mass function (not by sorting,
as the library does), then the result is checked against a generic QP/convex solver in the tests.
"""

from __future__ import annotations

import numpy as np


def _bisect(mass, low: float, high: float, iters: int = 200) -> float:
    """tau with mass(tau) = 1 for a decreasing ``mass``; mass(low) >= 1 >= mass(high)."""
    for _ in range(iters):
        mid = 0.5 * (low + high)
        if mass(mid) > 1:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def sparsemax_ref(z: np.ndarray) -> np.ndarray:
    """Projection of ``z [L]`` onto the simplex."""
    tau = _bisect(lambda t: np.clip(z - t, 0, None).sum(), z.max() - 1, z.max())
    return np.clip(z - tau, 0, None)


def csparsemax_ref(z: np.ndarray, u: np.ndarray) -> np.ndarray:
    """argmin ||a - z||^2 over the simplex with a <= u (sum(u) >= 1)."""
    tau = _bisect(lambda t: np.clip(z - t, 0, u).sum(), z.min() - 2, z.max())
    return np.clip(z - tau, 0, u)


def csoftmax_ref(z: np.ndarray, u: np.ndarray) -> np.ndarray:
    """argmin KL(a || softmax(z)) over the simplex with a <= u (sum(u) >= 1)."""
    z = z - z.max()

    def mass(t: float) -> float:
        return np.minimum(u, np.exp(z - t)).sum()

    low = -1.0
    while mass(low) < 1:
        low *= 2
    tau = _bisect(mass, low, np.log(len(z)) + 1)
    return np.minimum(u, np.exp(z - tau))
