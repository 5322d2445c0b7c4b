"""The one attention contract: what a model may ask of an attention layer.

Every attention layer of :mod:`lit_structattn.layers.registry` that a model calls position by
position is an :class:`AttentionLayer`. It declares, as class attributes or properties, what it
needs and gives, so that models ask instead of probing with ``getattr``/``isinstance``:

* ``constrained``: each call needs upper bounds ``upper`` (csoftmax, csparsemax);
* ``takes_bonus``: a call may add ``bonus`` to the scores before the transform (the exhaustion
  bonus and the coverage vector of Malaviya et al. 2018);
* ``distribution``: the weights of a row sum to 1, so they can be the ``P(a)`` of the joint
  outputs of Shankar et al. 2018 (not sigmoid, not the marginals of segmentation attention);
* :meth:`AttentionLayer.penalty`: a regulariser to add to the training loss, or None.
"""

from __future__ import annotations

from torch import Tensor, nn


class AttentionLayer(nn.Module):
    """Base of the attention layers: ``layer(query, keys, values=None, mask=None, upper=None,
    bonus=None) -> (context, weights)``. A subclass gives :meth:`attention_weights` for a
    block of queries; :meth:`forward` handles single queries and the context.

    Shapes: ``query [B, Dq]`` or ``[B, T, Dq]``, ``keys [B, L, Dk]``, ``values [B, L, Dv]``
    (default ``keys``), ``mask [B, L]`` bool (True = real position), ``upper`` and ``bonus``
    ``[B, L]`` or ``[B, T, L]``; returns ``context [B, Dv]`` / ``[B, T, Dv]`` and ``weights
    [B, L]`` / ``[B, T, L]``, with exactly 0 weight at masked positions.
    """

    constrained: bool = False
    takes_bonus: bool = False
    distribution: bool = True

    def penalty(self) -> Tensor | None:
        """A term to add to the training loss (e.g. an L2 penalty on CRF potentials), or None."""
        return None

    def attention_weights(self, query: Tensor, keys: Tensor, mask: Tensor | None,
                          upper: Tensor | None, bonus: Tensor | None) -> Tensor:
        """``weights [B, T, L]`` for ``query [B, T, Dq]``, ``keys [B, L, Dk]``, ``mask [B, L]``
        and ``upper``/``bonus`` ``[B, T, L]`` (or broadcastable; None when not given)."""
        raise NotImplementedError

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
            upper: upper bounds ``[B, L]`` or ``[B, T, L]`` (constrained layers only).
            bonus: added to the scores before normalization, shaped like ``upper`` (layers
                that take one only; e.g. the exhaustion bonus of Malaviya et al. 2018).
        Returns:
            ``(context, weights)``: ``[B, Dv]`` and ``[B, L]`` for a ``[B, Dq]`` query, or
            ``[B, T, Dv]`` and ``[B, T, L]`` for ``[B, T, Dq]`` queries.
        Raises:
            ValueError: a ``bonus`` for a layer that takes none (and the layer's own errors,
                e.g. missing or unwanted upper bounds).
        """
        if bonus is not None and not self.takes_bonus:
            raise ValueError(f"{type(self).__name__} takes no score bonus")
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)
            upper = None if upper is None else upper.unsqueeze(-2)
            bonus = None if bonus is None else bonus.unsqueeze(-2)
        weights = self.attention_weights(query, keys, mask, upper, bonus)  # [B, T, L]
        context = weights @ (keys if values is None else values)  # [B, T, Dv]
        if single:
            return context.squeeze(1), weights.squeeze(1)
        return context, weights
