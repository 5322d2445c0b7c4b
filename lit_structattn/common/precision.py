"""The precision rules shared by the attention transforms and the CRFs: which dtype they
compute in, and autocast switched off around that computation."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """The dtype to compute in: float64 if any of ``tensors`` is float64, else float32 (half
    types are widened: sorting, cumulative sums and log-sum-exp lose too much in 16 bits)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def autocast_off(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast off on ``device``, so that the block runs in the dtype of its inputs (nothing to
    do, and cheaper, where autocast is not on)."""
    if not torch.is_autocast_enabled(device.type):
        return contextlib.nullcontext()
    return torch.autocast(device.type, enabled=False)
