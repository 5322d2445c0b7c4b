"""Compiled CPU solvers (numba) for the constrained transforms, exact in float64.

On small rows the torch solvers spend their time in per-op overhead: csparsemax's variable
fixing takes some 8 passes of 17 tensor ops each on a ``[512, 64]`` batch with tight bounds.
Here one compiled loop per row (rows in parallel) runs the same algorithms in float64 and writes
the output and its active sets, so the result is exact at any score scale whatever the input
dtype:

* csparsemax: variable fixing (Kiwiel 2008) over an index list that shrinks in place; each
  pass either certifies tau (the mass added at the lower bounds equals, to rounding, the mass
  removed at the upper ones) or fixes at least one coordinate, so it ends in at most L passes.
* csoftmax: the clamp-the-violators loop of Martins & Kreutzer on the weights ``exp(z)`` (z
  centered; computed by torch, vectorized); if the free mass falls below 1e-30 (the free scores
  lie some 70 nats under the largest one, where float32 weights lose digits or underflow) the
  weights are recomputed in float64 from the largest free score.

Used on CPU for float32/float64 inputs when numba is installed, unless the environment sets
``STRUCTATTN_COMPILED=0`` (:mod:`lit_structattn.common.compiled`); elsewhere the torch solvers
run.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from ..common.compiled import available, kernel_threads, threads_for


def usable(z: Tensor) -> bool:
    """Whether the compiled solvers take ``z``: a float32/float64 CPU tensor, numba available."""
    return z.device.type == "cpu" and z.dtype in (torch.float32, torch.float64) and available()


@functools.cache
def _kernels():
    """Compile (or load from numba's cache) the kernels on first use."""
    import numba

    @numba.njit(cache=True)
    def _row64(x, r):  # pragma: no cover - compiled
        """Row ``r`` of ``x`` in float64 (float32 arithmetic would round large scores)."""
        row = np.empty(x.shape[1])
        for j in range(x.shape[1]):
            row[j] = x[r, j]
        return row

    @numba.njit(cache=True, parallel=True)
    def csparsemax_rows(z_in, u_in, valid, a, free, at_bound):  # pragma: no cover - compiled
        rows, length = z_in.shape
        eps = np.finfo(np.float64).eps
        for r in numba.prange(rows):
            z, u = _row64(z_in, r), _row64(u_in, r)
            index = np.empty(length, np.int64)  # the unfixed coordinates: index[:n]
            state = np.zeros(length, np.int8)  # 0 unfixed, 1 fixed at 0, 2 fixed at u
            n = 0
            for j in range(length):
                if valid[r, j] and u[j] > 0:
                    index[n] = j
                    n += 1
            remaining, tau = 1.0, 0.0
            while n > 0:
                total = 0.0
                for k in range(n):
                    total += z[index[k]]
                tau = (total - remaining) / n
                deficit, excess = 0.0, 0.0
                for k in range(n):
                    j = index[k]
                    if z[j] < tau:
                        deficit += tau - z[j]
                    elif z[j] - u[j] > tau:
                        excess += z[j] - u[j] - tau
                tolerance = 4 * eps * (deficit + excess + n * (abs(tau) + 1) + abs(remaining))
                if abs(deficit - excess) <= tolerance:
                    break
                kept = 0
                for k in range(n):
                    j = index[k]
                    if deficit > excess and z[j] < tau:
                        state[j] = 1
                    elif deficit <= excess and z[j] - u[j] > tau:
                        state[j] = 2
                        remaining -= u[j]
                    else:
                        index[kept] = j
                        kept += 1
                n = kept
            for j in range(length):
                if not valid[r, j]:
                    continue
                if state[j] == 2:
                    a[r, j], at_bound[r, j] = u[j], 1.0
                elif state[j] == 0:
                    shifted = z[j] - tau
                    a[r, j] = min(max(shifted, 0.0), u[j])
                    if shifted > u[j]:
                        at_bound[r, j] = 1.0
                    elif shifted > 0:
                        free[r, j] = 1.0

    @numba.njit(cache=True, parallel=True)
    def csoftmax_rows(z_in, u_in, e_in, a, clamped):  # pragma: no cover - compiled
        rows, length = z_in.shape
        for r in numba.prange(rows):
            z, u, weight = _row64(z_in, r), _row64(u_in, r), _row64(e_in, r)
            is_clamped = np.zeros(length, np.bool_)
            n_free = 0
            for j in range(length):
                is_clamped[j] = not u[j] > 0
                n_free += not is_clamped[j]
            clamped_mass, free_mass, leftover = 0.0, 0.0, 1.0
            while n_free > 0:
                free_mass = 0.0
                for j in range(length):
                    if not is_clamped[j]:
                        free_mass += weight[j]
                if free_mass < 1e-30:  # the free scores lie far below the largest score:
                    top = -np.inf  # weights relative to the largest free one instead
                    for j in range(length):
                        if not is_clamped[j]:
                            top = max(top, z[j])
                    for j in range(length):
                        weight[j] = math.exp(z[j] - top) if not is_clamped[j] else 0.0
                    continue
                leftover = 1.0 - clamped_mass
                if leftover <= 0:
                    break
                violators = 0
                for j in range(length):
                    if not is_clamped[j] and weight[j] * leftover > u[j] * free_mass:
                        is_clamped[j] = True
                        clamped_mass += u[j]
                        violators += 1
                if violators == 0:
                    break
                n_free -= violators
            for j in range(length):
                if is_clamped[j]:
                    a[r, j], clamped[r, j] = u[j], 1.0
                elif leftover > 0:
                    a[r, j] = min(u[j], weight[j] * (leftover / free_mass))

    return csparsemax_rows, csoftmax_rows


def _rows(t: Tensor) -> np.ndarray:
    """A contiguous ``[rows, L]`` numpy view (or copy) of ``t [..., L]``."""
    return t.detach().reshape(-1, t.shape[-1]).contiguous().numpy()


@torch.compiler.disable
def solve_csparsemax(z: Tensor, u: Tensor, valid: Tensor | None
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """``(a, free, at_bound)`` of csparsemax, each ``[..., L]`` in the dtype of ``z`` (the sets
    as float 0/1), for centered ``z``, bounds ``u >= 0`` (0 where invalid) and ``valid``."""
    kernel, _ = _kernels()
    mask = np.ones((1, 1), np.bool_) if valid is None else _rows(valid)
    zr, ur = _rows(z), _rows(u)
    a, free, at_bound = (np.zeros_like(zr) for _ in range(3))
    with kernel_threads(threads_for(zr.size)):
        kernel(zr, ur, np.broadcast_to(mask, zr.shape), a, free, at_bound)
    return tuple(torch.from_numpy(x).reshape(z.shape) for x in (a, free, at_bound))


@torch.compiler.disable
def solve_csoftmax(z: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """``(a, clamped)`` of csoftmax, each ``[..., L]`` in the dtype of ``z`` (``clamped`` float
    0/1), for centered ``z`` and bounds ``u >= 0`` (0 where invalid)."""
    _, kernel = _kernels()
    zr, ur = _rows(z), _rows(u)
    a, clamped = np.zeros_like(zr), np.zeros_like(zr)
    with kernel_threads(threads_for(zr.size)):
        kernel(zr, ur, _rows(z.exp()), a, clamped)
    return torch.from_numpy(a).reshape(z.shape), torch.from_numpy(clamped).reshape(z.shape)
