"""Attention transforms over positions, pure math in the style of entmax: functions and
autograd Functions, no ``nn`` layers (the ``Attention`` layer lives in
:mod:`lit_structattn.layers`).

Public contract: ``sparsemax(scores, dim=-1, mask=None)``,
``csoftmax(scores, upper, dim=-1, mask=None)``, ``csparsemax(scores, upper, dim=-1, mask=None)``.
Every transform is also available by name through :func:`get_transform`.
"""

from .csoftmax import csoftmax
from .csparsemax import csparsemax
from .sparsemax import sparsemax
from .transforms import TRANSFORMS, Transform, get_transform, masked_sigmoid, masked_softmax

__all__ = [
    "sparsemax",
    "csoftmax",
    "csparsemax",
    "masked_softmax",
    "masked_sigmoid",
    "Transform",
    "TRANSFORMS",
    "get_transform",
]
