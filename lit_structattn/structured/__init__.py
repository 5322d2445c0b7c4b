"""Differentiable structured inference (linear-chain and dependency CRFs) and the attention
layers built on it."""
