"""Padding masks from lengths."""

from __future__ import annotations

import torch
from torch import Tensor


def lengths_to_mask(lengths: Tensor, max_len: int) -> Tensor:
    """``lengths [B]`` -> bool ``mask [B, max_len]``, True at real positions."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]
