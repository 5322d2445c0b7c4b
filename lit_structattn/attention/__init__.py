"""Attention transforms over positions, pure math in the style of entmax: functions and
autograd Functions, no ``nn`` layers (the ``Attention`` layer lives in
:mod:`lit_structattn.layers`).

Public contract: ``sparsemax(scores, dim=-1, mask=None)``,
``csoftmax(scores, upper, dim=-1, mask=None)``, ``csparsemax(scores, upper, dim=-1, mask=None)``,
``entmax(scores, alpha=1.5, dim=-1, mask=None)`` (alpha a number or a learnable tensor),
``entmax15(scores, dim=-1, mask=None)`` and
``centmax(scores, upper, alpha=1.5, dim=-1, mask=None)``.
Every transform is also available by name through :func:`get_transform`.
"""

from .centmax import centmax, centmax15
from .csoftmax import csoftmax
from .csparsemax import csparsemax
from .entmax import entmax, entmax15
from .sparsemax import sparsemax
from .transforms import TRANSFORMS, Transform, get_transform, masked_sigmoid, masked_softmax

__all__ = [
    "sparsemax",
    "csoftmax",
    "csparsemax",
    "entmax",
    "entmax15",
    "centmax",
    "centmax15",
    "masked_softmax",
    "masked_sigmoid",
    "Transform",
    "TRANSFORMS",
    "get_transform",
]
