"""The input checks shared by the whole project: :func:`check_choice` behind every "unknown X;
valid: ..." error (models, tasks and DataModules), so that a wrong name in a config always lists
the valid choices the same way, and the tensor checks of the transforms and CRFs."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from .suggest import did_you_mean


def check_choice(name: str, value: object, valid: Iterable[object]) -> object:
    """``value`` if it is one of ``valid``.

    Raises:
        ValueError: ``"unknown {name} {value!r}; valid: a, b, c"`` otherwise, with "did you
        mean" the closest valid names where one is close (:mod:`.suggest`).
    """
    valid = tuple(valid)
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(map(str, valid))}"
                         f"{did_you_mean(value, valid)}")
    return value


def describe(value: object) -> str:
    """A short description of a value for error messages."""
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    return f"an object of type {type(value).__name__}"


def check_float_tensor(value: object, name: str, owner: str, rank: int | None = None) -> Tensor:
    """``value`` if it is a floating-point tensor with ``rank`` dimensions and no empty one
    (``rank=None``: at least one dimension, empty ones allowed).

    Raises:
        ValueError: ``"{owner}: {name} must be ..."`` naming what is wrong otherwise.
    """
    if not isinstance(value, Tensor) or not value.is_floating_point():
        raise ValueError(f"{owner}: {name} must be a floating-point tensor, got {describe(value)}")
    if rank is None:
        if value.dim() == 0:
            raise ValueError(f"{owner}: {name} must have at least one dimension, got a scalar")
        return value
    if value.dim() != rank:
        raise ValueError(f"{owner}: {name} must have {rank} dimensions, got shape "
                         f"{list(value.shape)}")
    if value.numel() == 0:
        raise ValueError(f"{owner}: {name} must not be empty, got shape {list(value.shape)}")
    return value


def check_int_tensor(value: object, name: str, owner: str) -> Tensor:
    """``value`` if it is an integer (not bool) tensor; ``ValueError`` otherwise."""
    if not isinstance(value, Tensor) or value.is_floating_point() or value.is_complex() \
            or value.dtype == torch.bool:
        raise ValueError(f"{owner}: {name} must be an integer tensor, got {describe(value)}")
    return value
