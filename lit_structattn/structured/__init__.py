"""Differentiable structured inference, pure math in the style of torch-struct: linear-chain and
dependency CRFs (log-partition, marginals, argmax, entropy) and their kernels. The attention
layers built on them live in :mod:`lit_structattn.layers`."""

from .dependency import DependencyCRF
from .linear_chain import LinearChainCRF

__all__ = ["DependencyCRF", "LinearChainCRF"]
