"""Attention-pooling sequence classifier: the smallest model that uses the shared Attention."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..attention.transforms import TransformName
from ..common.masks import lengths_to_mask
from ..layers.attention import Attention
from ..layers.encoders import BiLSTMEncoder
from ..layers.scorers import ScoreName


class AttentionPoolingClassifier(nn.Module):
    """Embeddings -> BiLSTM -> attention with a learned query -> linear classifier.

    Args:
        vocab_size: number of token ids (0 = padding).
        num_classes: number of labels.
        embed_dim, hidden_dim: sizes (the BiLSTM states have ``2 * hidden_dim``).
        score, transform: passed to :class:`~lit_structattn.layers.attention.Attention`; the
            constrained transforms get the uniform upper bound ``2 / length`` per position.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        embed_dim: int = 32,
        hidden_dim: int = 32,
        score: ScoreName = "general",
        transform: TransformName = "softmax",
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.encoder = BiLSTMEncoder(embed_dim, hidden_dim)
        self.query = nn.Parameter(torch.randn(2 * hidden_dim) / (2 * hidden_dim) ** 0.5)
        self.attention = Attention(2 * hidden_dim, score=score, transform=transform)
        self.output = nn.Linear(2 * hidden_dim, num_classes)

    def forward(self, tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``tokens [B, T]``, ``lengths [B]`` -> ``(logits [B, C], attention [B, T])``."""
        mask = lengths_to_mask(lengths, tokens.shape[1])
        states = self.encoder(self.embed(tokens), lengths)  # [B, T, 2H]
        upper = None
        if self.attention.constrained:
            upper = (2 / lengths.to(states.dtype))[:, None].expand(-1, tokens.shape[1])
        query = self.query.expand(tokens.shape[0], -1)
        context, weights = self.attention(query, states, mask=mask, upper=upper)
        return self.output(context), weights
