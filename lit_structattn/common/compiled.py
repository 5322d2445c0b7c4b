"""Switch and thread control for the compiled kernels of the attention transforms and the CRFs
(numba on the CPU; Triton on CUDA for the chain CRF, sparsemax, csparsemax, csoftmax, entmax15
and centmax15).

The kernels run on CPU when numba is installed (on CUDA when Triton is), unless the environment
sets ``STRUCTATTN_COMPILED=0``; elsewhere (other devices, dtypes, or switched off) the torch
implementations run, with the same results.

The functions that call a numba kernel are marked ``torch.compiler.disable``: Dynamo cannot
trace numba's dispatcher, so under ``torch.compile`` they run eagerly, behind a graph break.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from collections.abc import Iterator

import torch


def enabled() -> bool:
    """Whether the compiled kernels (numba on the CPU, Triton on CUDA) are on: unless the
    environment sets ``STRUCTATTN_COMPILED=0``."""
    return os.environ.get("STRUCTATTN_COMPILED", "1") != "0"


def available() -> bool:
    """Whether numba is installed and the compiled kernels are not switched off
    (``STRUCTATTN_COMPILED=0``)."""
    return enabled() and importlib.util.find_spec("numba") is not None


@functools.cache
def triton_installed() -> bool:
    """Whether Triton can be imported (torch's CUDA builds for Linux bring it)."""
    return importlib.util.find_spec("triton") is not None


def triton_serves(t: torch.Tensor, max_length: int | None = None) -> bool:
    """Whether the Triton kernels take ``t [..., L]``: on CUDA, Triton installed, the compiled
    kernels not switched off, and ``L <= max_length`` (when given: longer rows would not fit in
    a program's registers)."""
    return (t.device.type == "cuda" and (max_length is None or t.shape[-1] <= max_length)
            and enabled() and triton_installed())


PARALLEL_MIN_WORK = 2**15  # scalar steps; torch's own grain size for elementwise work


def threads_for(work: int) -> int:
    """Threads for a kernel call of about ``work`` scalar steps: torch's thread count, or 1 below
    :data:`PARALLEL_MIN_WORK`, where waking threads costs more than it saves (on a busy machine,
    e.g. two DDP processes on two cores, some 50 times more: 3 ms instead of 0.06 ms for a
    batch of short chains)."""
    return torch.get_num_threads() if work >= PARALLEL_MIN_WORK else 1


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

    torch_threads = torch.get_num_threads()
    wanted = torch_threads if threads is None else threads
    chosen = max(1, min(wanted, numba.config.NUMBA_NUM_THREADS))
    try:
        numba.set_num_threads(chosen)
        yield chosen
    finally:
        if torch.get_num_threads() != torch_threads:
            torch.set_num_threads(torch_threads)
