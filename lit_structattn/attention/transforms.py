"""The attention transforms by name, behind one signature.

Every entry is called as ``transform(scores, upper=None, dim=-1, mask=None)`` and returns
weights of the shape of ``scores``; masked positions get exactly 0. ``softmax``, ``sparsemax``,
``entmax15``/``entmax`` and the constrained ``csoftmax``/``csparsemax``/``centmax15`` return
distributions; ``sigmoid`` returns independent selection probabilities in (0, 1) (Kim et al.'s
sigmoid baseline). ``entmax`` takes an option, ``get_transform("entmax", alpha=1.3)``
(default 1.5).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor

from ..common.checks import check_choice
from .centmax import centmax15
from .csoftmax import csoftmax
from .csparsemax import csparsemax
from .entmax import entmax, entmax15
from .sparsemax import sparsemax


def masked_softmax(scores: Tensor, dim: int = -1, mask: Tensor | None = None) -> Tensor:
    """Softmax along ``dim`` with masked positions (bool ``mask``, True = valid) set to exactly 0;
    a slice with no valid position is all zeros (never NaN)."""
    if mask is None:
        return torch.softmax(scores, dim=dim)
    low = torch.finfo(scores.dtype).min
    return torch.softmax(scores.masked_fill(~mask, low), dim=dim) * mask


def masked_sigmoid(scores: Tensor, dim: int = -1, mask: Tensor | None = None) -> Tensor:
    """Elementwise sigmoid with masked positions set to exactly 0 (``dim`` is unused)."""
    weights = torch.sigmoid(scores)
    return weights if mask is None else weights * mask


@dataclass(frozen=True)
class Transform:
    """A named transform; ``constrained`` ones need upper bounds; ``options`` are the keyword
    arguments it takes besides the common ones (given to :func:`get_transform`)."""

    name: str
    function: Callable[..., Tensor]
    constrained: bool
    options: tuple[str, ...] = ()

    def __call__(
        self, scores: Tensor, upper: Tensor | None = None, dim: int = -1, mask: Tensor | None = None
    ) -> Tensor:
        if self.constrained:
            if upper is None:
                raise ValueError(f"the {self.name} transform needs upper bounds (upper=...)")
            return self.function(scores, upper, dim=dim, mask=mask)
        if upper is not None:
            raise ValueError(f"the {self.name} transform takes no upper bounds; use csoftmax, "
                             "csparsemax or centmax15 for constrained attention")
        return self.function(scores, dim=dim, mask=mask)


TRANSFORMS: dict[str, Transform] = {
    t.name: t
    for t in (
        Transform("softmax", masked_softmax, constrained=False),
        Transform("sparsemax", sparsemax, constrained=False),
        Transform("csoftmax", csoftmax, constrained=True),
        Transform("csparsemax", csparsemax, constrained=True),
        Transform("entmax15", entmax15, constrained=False),
        Transform("entmax", entmax, constrained=False, options=("alpha",)),
        Transform("centmax15", centmax15, constrained=True),
        Transform("sigmoid", masked_sigmoid, constrained=False),
    )
}
#: The names of :data:`TRANSFORMS` as a type, for constructor arguments: a config parser then
#: lists them in ``--help`` and refuses any other name before building anything.
TransformName = Literal[tuple(sorted(TRANSFORMS))]


def get_transform(name: str, **options: object) -> Transform:
    """The transform called ``name`` with its ``options`` fixed (e.g. ``alpha=1.3`` for
    ``entmax``); ``ValueError`` listing the valid names, or the options it takes, otherwise."""
    transform = TRANSFORMS[check_choice("attention transform", name, sorted(TRANSFORMS))]
    unknown = sorted(set(options) - set(transform.options))
    if unknown:
        takes = ", ".join(transform.options) or "none"
        raise ValueError(f"the {name} transform takes no option {', '.join(unknown)} "
                         f"(its options: {takes})")
    if not options:
        return transform
    return replace(transform, function=functools.partial(transform.function, **options))
