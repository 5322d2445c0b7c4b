"""Keep glibc malloc from handing freed memory back to the OS between training steps (CPU
runs; ``STRUCTATTN_STEADY_ALLOCATOR=0`` leaves the allocator alone)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

#: the environment variable that turns the setting off (``0``)
SWITCH = "STRUCTATTN_STEADY_ALLOCATOR"


def steady_allocator_wanted(on_cpu: bool) -> bool:
    """Whether a run gets :func:`steady_allocator`: when it trains on the CPU (``on_cpu``; on a
    GPU the host only feeds batches) and ``STRUCTATTN_STEADY_ALLOCATOR`` is not ``0``."""
    return on_cpu and os.environ.get(SWITCH, "1").strip() != "0"


def steady_allocator() -> str:
    """Make glibc malloc serve every block from its heap and never trim it, as
    ``MALLOC_MMAP_MAX_=0`` and ``MALLOC_TRIM_THRESHOLD_`` would.

    By default glibc serves large blocks with fresh ``mmap`` pages and trims the heap when its
    top is free, so every step of a CPU training loop page-faults its large tensors in again:
    the ``[tokens, vocabulary]`` scores of a translation step, say (what that cost in a
    development run: ``reports/development_notes.md``). Raising the mmap threshold alone still
    left blocks of 64 MiB mapped afresh, so mmap is switched off. Freed memory is then reused
    and a process keeps its peak heap; a benchmark's times no longer depend on the allocator's
    history. The CLI calls this once it has built a trainer on the CPU
    (:func:`steady_allocator_wanted`; DataLoader workers forked later inherit it), as do the
    benchmarks that time training steps or transforms. Returns a sentence saying what was done.
    """
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):
        return "The allocator was left as it is (no glibc mallopt here)."
    m_trim_threshold, m_mmap_threshold, m_mmap_max = -1, -3, -4  # from <malloc.h>
    settings = ((m_mmap_max, 0), (m_mmap_threshold, 1 << 30), (m_trim_threshold, 1 << 30))
    if not all(libc.mallopt(option, value) for option, value in settings):
        return "The allocator was left partly as it is (glibc refused a mallopt setting)."
    return ("glibc malloc serves every block from its heap and keeps freed memory (mallopt: no "
            "mmap, mmap and trim thresholds 1 GiB), so no step pays page faults for memory "
            "the allocator returned to the OS.")
