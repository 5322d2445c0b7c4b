"""Attention transforms over positions and the shared ``Attention`` layer.

Public contract: ``sparsemax(scores, dim=-1, mask=None)``,
``csoftmax(scores, upper, dim=-1, mask=None)``, ``csparsemax(scores, upper, dim=-1, mask=None)``.
Every transform is also available by name through :func:`get_transform`.
"""

from .csoftmax import csoftmax
from .csparsemax import csparsemax
from .layer import Attention
from .scorers import SCORERS, build_scorer
from .sparsemax import sparsemax
from .transforms import TRANSFORMS, Transform, get_transform, masked_sigmoid, masked_softmax

__all__ = [
    "sparsemax",
    "csoftmax",
    "csparsemax",
    "masked_softmax",
    "masked_sigmoid",
    "Attention",
    "Transform",
    "TRANSFORMS",
    "SCORERS",
    "get_transform",
    "build_scorer",
]
