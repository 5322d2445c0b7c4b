"""A first-order dependency parser: word embeddings and the arc scorer of syntactic attention.

The parsing layer of Kim et al. (2017, A.1/A.5) with its own word embeddings: a BiLSTM over
``[root; words]`` and ``theta_ij = tanh(s^T tanh(W1 h_i + W2 h_j + b))``
(:class:`~lit_structattn.layers.syntactic.SyntacticAttention`). Trained on gold trees by the
log-likelihood of a projective :class:`~lit_structattn.structured.DependencyCRF`, it is the
supervised parser behind the ``hard_parent`` and ``pretrained_structured`` NLI variants; inside
the NLI model the same module gives the ``simple`` and ``structured`` soft parents.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..layers.syntactic import SyntacticAttention
from ..structured import DependencyCRF


@dataclass(frozen=True)
class ParserOptions:
    """The sizes of a :class:`DependencyParser`. In a config they are the group ``parser`` of
    the model that holds one: ``--model.init_args.model.init_args.parser.hidden_dim 100``.

    Args:
        embed_dim: word embedding size.
        hidden_dim: size of each direction of the parsing BiLSTM (and of the arc MLP).
    """

    embed_dim: int = 100
    hidden_dim: int = 100


class DependencyParser(nn.Module):
    """Arc scores, tree log-likelihood and Eisner parses of word-id sentences.

    Args:
        vocab_size: number of word ids (0 = padding).
        options: its sizes (:class:`ParserOptions`).
        mode: ``structured`` (dependency-CRF marginals) or ``simple`` (softmax over heads) for
            :meth:`marginals`.
        bounded: the paper's outer ``tanh``, which keeps the scores in ``[-1, 1]``; without it
            ``theta_ij = s^T tanh(W1 h_i + W2 h_j + b)`` (Kiperwasser & Goldberg's scorer), which
            lets a parser trained on gold trees be confident.
        dropout: on the word embeddings, in training mode.
    """

    def __init__(self, vocab_size: int, options: ParserOptions = ParserOptions(),
                 mode: str = "structured", bounded: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        self.options = options
        self.embedding = nn.Embedding(vocab_size, options.embed_dim, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.attention = SyntacticAttention(options.embed_dim, options.hidden_dim, mode=mode,
                                            bounded=bounded)

    def arc_scores(self, words: Tensor, lengths: Tensor) -> Tensor:
        """``theta [B, N+1, N+1]`` (``[b, h, m]``: head h -> modifier m, 0 = root) for
        ``words [B, N]`` (ids) with ``lengths [B]``."""
        return self.attention.arc_scores(self.dropout(self.embedding(words)), lengths)

    def marginals(self, words: Tensor, lengths: Tensor) -> Tensor:
        """``p(h -> m) [B, N+1, N+1]`` in the layer's mode; columns of real words sum to 1,
        everything else is 0."""
        return self.attention(self.dropout(self.embedding(words)), lengths).marginals

    def loss(self, words: Tensor, lengths: Tensor, heads: Tensor) -> Tensor:
        """Mean negative log-likelihood per word of the gold trees ``heads [B, N+1]`` (head of
        each position, entries at the root slot and padding ignored)."""
        crf = DependencyCRF(self.arc_scores(words, lengths), lengths)
        return -crf.log_prob(heads).sum() / lengths.sum()

    @torch.no_grad()
    def parse(self, words: Tensor, lengths: Tensor) -> Tensor:
        """Eisner argmax heads ``[B, N+1]`` (0 at the root slot and padding)."""
        return DependencyCRF(self.arc_scores(words, lengths), lengths).argmax


def attachment_counts(predicted: Tensor, gold: Tensor, lengths: Tensor) -> tuple[int, int]:
    """``(correct heads, words)`` of a batch: ``predicted``/``gold`` heads ``[B, N+1]`` (index 0
    the root slot), ``lengths [B]``; the unlabeled attachment score is their ratio."""
    positions = torch.arange(gold.shape[1], device=gold.device)
    words = (positions > 0) & (positions <= lengths[:, None])
    return int(((predicted == gold) & words).sum()), int(words.sum())
