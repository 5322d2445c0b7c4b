"""The shared attention layer: a scorer followed by a transform chosen by name."""

from __future__ import annotations

from torch import Tensor

from ..attention import get_transform
from .contract import AttentionLayer
from .scorers import build_scorer


class Attention(AttentionLayer):
    """``weights = transform(score(query, keys) + bonus)``, ``context = weights @ values``.

    Args:
        query_dim: size ``Dq`` of the queries.
        key_dim: size ``Dk`` of the keys (default ``query_dim``).
        score: ``dot``, ``general`` (bilinear) or ``mlp``.
        transform: ``softmax``, ``sparsemax``, ``entmax15``, ``entmax`` (alpha 1.5),
            ``csoftmax``, ``csparsemax``, ``centmax15`` or ``sigmoid``.

    Unknown names raise ``ValueError`` listing the valid ones.
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int | None = None,
        score: str = "general",
        transform: str = "softmax",
    ) -> None:
        super().__init__()
        self.scorer = build_scorer(score, query_dim, key_dim or query_dim)
        self.transform = get_transform(transform)

    takes_bonus = True

    @property
    def constrained(self) -> bool:
        """True when the transform needs upper bounds per call."""
        return self.transform.constrained

    @property
    def distribution(self) -> bool:
        """True unless the transform is ``sigmoid`` (whose weights do not sum to 1)."""
        return self.transform.name != "sigmoid"

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """Raw scores ``[B, T, L]`` for ``query [B, T, Dq]`` and ``keys [B, L, Dk]``."""
        return self.scorer(query, keys)

    def attention_weights(self, query: Tensor, keys: Tensor, mask: Tensor | None,
                          upper: Tensor | None, bonus: Tensor | None) -> Tensor:
        """``transform(scores + bonus)`` ``[B, T, L]`` (see :class:`AttentionLayer`); the
        constrained transforms need ``upper``, the others refuse it (``ValueError``)."""
        scores = self.scores(query, keys)  # [B, T, L]
        if bonus is not None:
            scores = scores + bonus
        return self.transform(
            scores, upper=upper, dim=-1, mask=None if mask is None else mask.unsqueeze(1)
        )
