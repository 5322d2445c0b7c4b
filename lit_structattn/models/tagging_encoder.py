"""The word encoder of the neural easy-first taggers (Martins & Kreutzer 2017, §5.1, §5.3).

Input of one word (POS / NER): ``concat(E_word[w], sum_n E_prefix[prefix_n(w)],
sum_n E_suffix[suffix_n(w)])`` with ``n = 1..4``; with the paper's sizes 64 + 50 + 50 = 164.
Prefixes and suffixes use two embedding tables (the authors' code keeps them apart) indexed by
ids of one shared affix vocabulary; id 0 (pad / absent affix) embeds to 0. For word-level QE
the affixes are dropped and the mean embedding of the source words aligned to each target word
is concatenated instead (64 + 64 = 128 in the paper). Then dropout, a BiLSTM (50 units per
direction) and dropout again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..common.masks import lengths_to_mask
from ..layers.encoders import BiLSTMEncoder

# lower, Title, UPPER, mIxed (lit_structattn.datamodules.tagging.capitalization)
CAPITALIZATION_CLASSES = 4

__all__ = ["TaggingEncoder", "TaggingEncoderOptions"]


@torch.no_grad()
def _init_lookup_table(table: nn.Embedding) -> None:
    """Uniform in ``+-sqrt(3 / dim)``, padding row 0: the scale of DyNet's default (Glorot)
    initialization of lookup parameters, which the authors' tagger used. PyTorch's default
    N(0, 1) is about 8 times larger."""
    bound = math.sqrt(3.0 / table.embedding_dim)
    table.weight.uniform_(-bound, bound)
    if table.padding_idx is not None:
        table.weight[table.padding_idx].zero_()


@dataclass(frozen=True)
class TaggingEncoderOptions:
    """The sizes and inputs of a :class:`TaggingEncoder` (all but the vocabulary sizes, which
    come from the data, and the dropout, which is the whole tagger's). In a config they are the
    tagger's group ``encoder``: ``--model.init_args.model.init_args.encoder.hidden_dim 100``.

    Args:
        word_dim: word embedding size (paper: 64).
        affix_dim: prefix and suffix embedding size (paper: 50).
        source_dim: aligned source-word embedding size for QE (paper: 64).
        hidden_dim: BiLSTM units per direction (paper: 50); the states are ``2 * hidden_dim``.
        use_affixes: add the summed prefix and the summed suffix embeddings.
        use_capitalization: add the one-hot 4-way capitalization class of the word (the
            authors' ``cap_feature``; ``caps`` ids 1..4, 0 = padding).
    """

    word_dim: int = 64
    affix_dim: int = 50
    source_dim: int = 64
    hidden_dim: int = 50
    use_affixes: bool = True
    use_capitalization: bool = False


class TaggingEncoder(nn.Module):
    """Word (+ affix, + aligned source word) embeddings -> dropout -> BiLSTM -> dropout.

    Args:
        vocab_size: word vocabulary size (id 0 = padding, embeds to 0; 1 = unknown).
        affix_vocab_size: size of the affix n-gram vocabulary (0 when ``use_affixes=False``).
        source_vocab_size: size of the source-word vocabulary for QE; 0 (default) = no source.
        options: sizes and inputs (:class:`TaggingEncoderOptions`).
        dropout: applied to the input vectors and to the BiLSTM states.

    The embedding tables start uniform in ``+-sqrt(3 / dim)`` (see :func:`_init_lookup_table`).
    """

    def __init__(
        self,
        vocab_size: int,
        affix_vocab_size: int = 0,
        source_vocab_size: int = 0,
        options: TaggingEncoderOptions = TaggingEncoderOptions(),
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        if options.use_affixes and affix_vocab_size <= 0:
            raise ValueError("TaggingEncoder: use_affixes=True needs affix_vocab_size > 0")
        self.options = options
        self.word_embedding = nn.Embedding(vocab_size, options.word_dim, padding_idx=0)
        self.prefix_embedding = self.suffix_embedding = self.source_embedding = None
        input_dim = options.word_dim
        if options.use_affixes:
            self.prefix_embedding = nn.Embedding(affix_vocab_size, options.affix_dim,
                                                 padding_idx=0)
            self.suffix_embedding = nn.Embedding(affix_vocab_size, options.affix_dim,
                                                 padding_idx=0)
            input_dim += 2 * options.affix_dim
        if options.use_capitalization:
            input_dim += CAPITALIZATION_CLASSES
        if source_vocab_size > 0:
            self.source_embedding = nn.Embedding(source_vocab_size, options.source_dim,
                                                 padding_idx=0)
            input_dim += options.source_dim
        self.input_dim = input_dim
        for table in (self.word_embedding, self.prefix_embedding, self.suffix_embedding,
                      self.source_embedding):
            if table is not None:
                _init_lookup_table(table)
        self.dropout = nn.Dropout(dropout)
        self.rnn = BiLSTMEncoder(input_dim, options.hidden_dim)
        self.output_dim = 2 * options.hidden_dim

    @torch.no_grad()
    def init_word_embeddings(self, matrix: Tensor) -> None:
        """Copy ``matrix [vocab_size, word_dim]`` (e.g. the ``pretrained_matrix`` a tagging
        DataModule read) into the word embeddings; the padding row stays 0. The vectors are
        fine-tuned."""
        weight = self.word_embedding.weight
        if tuple(matrix.shape) != tuple(weight.shape):
            raise ValueError(f"TaggingEncoder: pretrained matrix of shape {list(matrix.shape)} "
                             f"does not match the word embeddings {list(weight.shape)}")
        weight.copy_(matrix)
        weight[0].zero_()

    def embed(
        self,
        words: Tensor,
        prefixes: Tensor | None = None,
        suffixes: Tensor | None = None,
        aligned: Tensor | None = None,
        caps: Tensor | None = None,
    ) -> Tensor:
        """The input vector of every word ``[B, T, input_dim]`` (before dropout).

        ``words [B, T]``; ``prefixes``/``suffixes [B, T, n]`` affix ids (0 = absent);
        ``aligned [B, T, A]`` source-word ids (0 = padding; a word with no alignment gets 0);
        ``caps [B, T]`` capitalization classes 1..4 (0 = padding).
        """
        parts = [self.word_embedding(words)]
        if self.options.use_affixes:
            if prefixes is None or suffixes is None:
                raise ValueError("TaggingEncoder: use_affixes=True needs prefixes and suffixes")
            parts.append(self.prefix_embedding(prefixes).sum(-2))
            parts.append(self.suffix_embedding(suffixes).sum(-2))
        if self.options.use_capitalization:
            if caps is None:
                raise ValueError("TaggingEncoder: use_capitalization=True needs caps [B, T]")
            onehot = nn.functional.one_hot(caps, CAPITALIZATION_CLASSES + 1)[..., 1:]
            parts.append(onehot.to(parts[0].dtype))
        if self.source_embedding is not None:
            if aligned is None:
                raise ValueError("TaggingEncoder: a source vocabulary is set, so the batch needs "
                                 "'aligned' [B, T, A] source-word ids")
            count = (aligned != 0).sum(-1, keepdim=True).clamp_min(1)
            parts.append(self.source_embedding(aligned).sum(-2) / count)
        return torch.cat(parts, dim=-1)

    def forward(
        self,
        words: Tensor,
        lengths: Tensor,
        prefixes: Tensor | None = None,
        suffixes: Tensor | None = None,
        aligned: Tensor | None = None,
        caps: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``words [B, T]``, ``lengths [B]`` (+ optional inputs, see :meth:`embed`) ->
        ``(states [B, T, 2H] (0 at padding), mask [B, T] bool)``."""
        mask = lengths_to_mask(lengths, words.shape[1])
        inputs = self.dropout(self.embed(words, prefixes, suffixes, aligned, caps))
        states = self.dropout(self.rnn(inputs, lengths))
        return states * mask[..., None], mask
