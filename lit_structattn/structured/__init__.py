"""Differentiable structured inference (linear-chain and dependency CRFs) and the attention
layers built on it."""

from .chain import ChainAttention
from .dependency import DependencyCRF
from .linear_chain import LinearChainCRF
from .registry import attention_names, build_attention
from .segmentation import SegmentationAttention
from .syntactic import SyntacticAttention

__all__ = [
    "ChainAttention",
    "DependencyCRF",
    "LinearChainCRF",
    "SegmentationAttention",
    "SyntacticAttention",
    "attention_names",
    "build_attention",
]
