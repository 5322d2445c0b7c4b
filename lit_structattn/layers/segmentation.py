"""Segmentation attention (Kim et al. 2017, §4.2 and A.3).

For each query, a 2-state linear-chain CRF over the source positions selects a subset of them:
the unary potential of state 1 ("selected") is a bilinear score, that of state 0 is 0, and a
learned 2x2 matrix scores consecutive states. The context is the marginal-weighted sum of the
values, normalized as in the paper: ``c = sum_i p(z_i = 1) / gamma * h_i`` with
``gamma = sum_i p(z_i = 1) / lambda``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..structured import LinearChainCRF
from .contract import AttentionLayer
from .scorers import build_scorer


class SegmentationAttention(AttentionLayer):
    """Structured attention by the marginals of a 2-state linear-chain CRF.

    Args:
        query_dim: size ``Dq`` of the queries; key_dim: size ``Dk`` of the keys.
        score: the scorer of the state-1 unary potentials (``general`` = bilinear, as the paper).
        lam: the normalization lambda (the weights sum to ``lam``); the paper uses 2.
        pairwise_l2: weight of the L2 penalty on the pairwise potentials (see :meth:`penalty`).
    """

    distribution = False  # the normalized marginals sum to ``lam``, not 1

    def __init__(
        self,
        query_dim: int,
        key_dim: int | None = None,
        score: str = "general",
        lam: float = 2.0,
        pairwise_l2: float = 0.005,
    ) -> None:
        super().__init__()
        self.scorer = build_scorer(score, query_dim, key_dim or query_dim)
        self.pairwise = nn.Parameter(torch.zeros(2, 2))  # [state at i, state at i+1]
        self.lam = lam
        self.pairwise_l2 = pairwise_l2

    def penalty(self) -> Tensor:
        """The L2 penalty on the pairwise potentials, to be added to the training loss."""
        return self.pairwise_l2 * self.pairwise.pow(2).sum()

    def marginals(self, query: Tensor, keys: Tensor, mask: Tensor | None = None) -> Tensor:
        """``p(z_i = 1)`` ``[B, T, L]`` for ``query [B, T, Dq]`` and ``keys [B, L, Dk]``
        (0 at masked positions)."""
        batch, steps, length = query.shape[0], query.shape[1], keys.shape[1]
        selected = self.scorer(query, keys)  # [B, T, L]
        unary = torch.stack([torch.zeros_like(selected), selected], dim=-1)
        lengths = None
        if mask is not None:
            lengths = mask.sum(-1).repeat_interleave(steps)  # [B * T]
        crf = LinearChainCRF(unary.reshape(batch * steps, length, 2), self.pairwise, lengths)
        return crf.marginals[..., 1].reshape(batch, steps, length)

    def attention_weights(self, query: Tensor, keys: Tensor, mask: Tensor | None,
                          upper: Tensor | None, bonus: Tensor | None) -> Tensor:
        """The normalized marginals ``lam * p(z_i = 1) / sum_j p(z_j = 1)`` ``[B, T, L]``, summing
        to ``lam`` (see :class:`AttentionLayer`; every mask row needs a real position).
        ``ValueError`` for upper bounds (segmentation attention takes none)."""
        if upper is not None:
            raise ValueError("segmentation attention takes no upper bounds and no score bonus")
        selected = self.marginals(query, keys, mask)
        gamma = selected.sum(-1, keepdim=True).clamp_min(torch.finfo(selected.dtype).tiny)
        return self.lam * selected / gamma
