"""Tensors as the JSON-ready nested lists that predictions are written as."""

from __future__ import annotations

import torch

DIGITS = 5


def rounded(values: torch.Tensor, digits: int = DIGITS) -> list:
    """``values`` (any shape) as nested Python lists of floats rounded to ``digits`` places."""
    return torch.round(values.detach().double().cpu(), decimals=digits).tolist()
