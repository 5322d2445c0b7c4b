"""The PREDICTED fertility strategy of Malaviya et al. (2018, §4): a BiLSTM tagger that predicts,
for every source token, how many target words the aligner linked it to (classes ``0..K-1``, the
last one meaning "K-1 or more"); at translation time the fertility is the expected class plus a
slack of 1. The authors' sizes: embeddings and states 256, 2 layers, dropout 0.2, K = 10.

The module only: its targets, its training and its predictions over a corpus are the
application's (:mod:`lit_structattn.prepare.fertility`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..common.masks import lengths_to_mask
from ..layers.encoders import BiLSTMEncoder

__all__ = ["FertilityPredictor"]


class FertilityPredictor(nn.Module):
    """BiLSTM classifier of source-token fertilities.

    Args:
        vocab_size: source vocabulary (id 0 = padding).
        embed_dim, hidden_dim, num_layers, dropout: the tagger (hidden size per direction).
        classes: ``K``, fertilities ``0..K-1``.
    """

    def __init__(
        self, vocab_size: int, embed_dim: int = 256, hidden_dim: int = 256, num_layers: int = 2,
        dropout: float = 0.2, classes: int = 10,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.rnn = BiLSTMEncoder(embed_dim, hidden_dim, num_layers, dropout)
        self.output = nn.Linear(2 * hidden_dim, classes)

    def forward(self, src: Tensor, lengths: Tensor) -> Tensor:
        """``src [B, S]``, ``lengths [B]`` -> class scores ``[B, S, K]``."""
        states = self.rnn(self.dropout(self.embed(src)), lengths)
        return self.output(self.dropout(states))

    def loss(self, src: Tensor, lengths: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy over the real tokens; ``targets [B, S]`` classes (any value at
        padding)."""
        mask = lengths_to_mask(lengths, src.shape[1])
        scores = self(src, lengths)
        return nn.functional.cross_entropy(scores[mask], targets[mask])

    @torch.no_grad()
    def expected(self, src: Tensor, lengths: Tensor, slack: float = 1.0) -> Tensor:
        """The fertility to bound the attention with: ``E[class] + slack`` ``[B, S]`` (0 at
        padding)."""
        probabilities = self(src, lengths).softmax(-1)
        classes = torch.arange(probabilities.shape[-1], dtype=probabilities.dtype,
                               device=probabilities.device)
        mean = probabilities @ classes + slack
        return mean * lengths_to_mask(lengths, src.shape[1])
