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
        transform: ``softmax``, ``sparsemax``, ``csoftmax``, ``csparsemax`` or ``sigmoid``.

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

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor | None = None,
        mask: Tensor | None = None,
        upper: Tensor | None = None,
        bonus: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Attend from ``query`` over ``keys``.

        Args:
            query: ``[B, Dq]`` (one query per example) or ``[B, T, Dq]``.
            keys: ``[B, L, Dk]``.
            values: ``[B, L, Dv]``; defaults to ``keys``.
            mask: ``[B, L]`` bool, True = real position.
            upper: upper bounds ``[B, L]`` or ``[B, T, L]``; required by constrained transforms.
            bonus: added to the scores before the transform, shaped like ``upper`` (e.g. the
                exhaustion bonus ``c * upper`` of Malaviya et al. 2018).
        Returns:
            ``(context, weights)``: ``[B, Dv]`` and ``[B, L]`` for a ``[B, Dq]`` query, or
            ``[B, T, Dv]`` and ``[B, T, L]`` for ``[B, T, Dq]`` queries.
        """
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)
            upper = None if upper is None else upper.unsqueeze(-2)
            bonus = None if bonus is None else bonus.unsqueeze(-2)
        scores = self.scores(query, keys)  # [B, T, L]
        if bonus is not None:
            scores = scores + bonus
        weights = self.transform(
            scores, upper=upper, dim=-1, mask=None if mask is None else mask.unsqueeze(1)
        )
        context = weights @ (keys if values is None else values)  # [B, T, Dv]
        if single:
            return context.squeeze(1), weights.squeeze(1)
        return context, weights
