"""Decoder attention layers by name: the transforms of ``lit_structattn.attention`` behind a
scorer, and the structured layers of this package. All share the interface
``layer(query, keys, values=None, mask=None, upper=None) -> (context, weights)``."""

from __future__ import annotations

from typing import Literal

from torch import nn

from ..attention import TRANSFORMS, Attention
from ..choices import check_choice
from .segmentation import SegmentationAttention

STRUCTURED = {"segmentation": SegmentationAttention}


def attention_names() -> list[str]:
    """Every name :func:`build_attention` accepts."""
    return sorted([*TRANSFORMS, *STRUCTURED])


#: The names :func:`build_attention` accepts, as a type for constructor arguments.
AttentionName = Literal[tuple(attention_names())]


def build_attention(name: str, query_dim: int, key_dim: int, score: str = "general") -> nn.Module:
    """The attention layer called ``name``; ``ValueError`` listing the valid names otherwise."""
    check_choice("attention", name, attention_names())
    if name in STRUCTURED:
        return STRUCTURED[name](query_dim, key_dim, score=score)
    return Attention(query_dim, key_dim, score=score, transform=name)
