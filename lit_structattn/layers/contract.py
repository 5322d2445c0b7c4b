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
    bonus=None) -> (context, weights)``.

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
