"""The source side of the encoder-decoder: symbol embeddings, optional syntactic
self-attention (``[x_j; c_j]`` with ``c_j`` the soft parent, Kim et al. 2017 §4.1), optional
BiLSTM, and the :class:`EncodedSource` the decoder attends."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor, nn

from ...common.checks import check_choice
from ...common.masks import lengths_to_mask
from ...layers.encoders import BiLSTMEncoder
from ...layers.registry import SourceAttentionName, check_attention
from ...layers.syntactic import SyntacticAttention

ENCODERS = ("embedding", "bilstm")
EncoderName = Literal[ENCODERS]  # the names as the type of SourceEncoderOptions.kind


def select_rows(t: Tensor | None, index: Tensor, dim: int = 0) -> Tensor | None:
    """Rows ``index`` of ``t`` along ``dim`` (None stays None)."""
    return None if t is None else t.index_select(dim, index)


@dataclass
class EncodedSource:
    """``memory [B, S, M]`` attended by the decoder, ``mask [B, S]``, the intra-source
    attention ``self_attention [B, S+1, S+1]`` (index 0 = root) when the encoder has one, and for
    constrained attention the ``fertility [B, S]`` of every source token and ``bonus_mask
    [B, S]`` (the real tokens other than the sink, which get the exhaustion bonus); ``final``:
    the BiLSTM encoder's final ``(h, c)``, each ``[B, M]`` (None without a BiLSTM);
    ``memory_share [B, S, H]``: for joint outputs, each position's share ``U_m m_j`` of the
    attentional layer (see :meth:`JointOutput.memory_share`)."""

    memory: Tensor
    mask: Tensor
    self_attention: Tensor | None = None
    fertility: Tensor | None = None
    bonus_mask: Tensor | None = None
    final: tuple[Tensor, Tensor] | None = None
    memory_share: Tensor | None = None

    def select(self, index: Tensor) -> EncodedSource:
        return replace(self, memory=self.memory[index], mask=self.mask[index],
                       memory_share=select_rows(self.memory_share, index),
                       self_attention=select_rows(self.self_attention, index),
                       fertility=select_rows(self.fertility, index),
                       bonus_mask=select_rows(self.bonus_mask, index),
                       final=None if self.final is None else
                       (self.final[0][index], self.final[1][index]))


@dataclass(frozen=True)
class SourceEncoderOptions:
    """What a :class:`SourceEncoder` is, besides the vocabulary size (from the data) and the
    embedding size and dropout (its encoder-decoder's, shared with the target side). In a config
    they are the encoder-decoder's group ``encoder``:
    ``--model.init_args.model.init_args.encoder.kind bilstm``.

    Args:
        kind: ``embedding`` (no recurrence, as Kim et al.'s tree transduction) or ``bilstm``.
        hidden_dim: BiLSTM size per direction (``bilstm`` only); the memory is twice as wide.
        source_attention: ``none`` (``x_j``), ``simple`` or ``structured`` (``[x_j; c_j]``, see
            :class:`~lit_structattn.layers.syntactic.SyntacticAttention`).
        parser_dim: hidden size per direction of the parsing BiLSTM of ``simple`` and
            ``structured``.
    """

    kind: EncoderName = "embedding"
    hidden_dim: int = 50
    source_attention: SourceAttentionName = "none"
    parser_dim: int = 50


class SourceEncoder(nn.Module):
    """Embeddings -> optional syntactic self-attention -> optional BiLSTM.

    Args:
        vocab_size, embed_dim: the symbol embeddings (id 0 = padding).
        options: :class:`SourceEncoderOptions`.
        dropout: on the embeddings.
    """

    def __init__(self, vocab_size: int, embed_dim: int,
                 options: SourceEncoderOptions = SourceEncoderOptions(),
                 dropout: float = 0.0) -> None:
        super().__init__()
        check_attention("seq2seq", "source_attention", options.source_attention)
        check_choice("kind", options.kind, ENCODERS)
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.syntactic = None
        width = embed_dim
        if options.source_attention != "none":
            self.syntactic = SyntacticAttention(embed_dim, options.parser_dim,
                                                mode=options.source_attention)
            width = 2 * embed_dim
        self.rnn = BiLSTMEncoder(width, options.hidden_dim) if options.kind == "bilstm" else None
        self.output_dim = 2 * options.hidden_dim if self.rnn is not None else width

    def forward(self, src: Tensor, lengths: Tensor) -> EncodedSource:
        """``src [B, S]``, ``lengths [B]`` -> :class:`EncodedSource` with ``memory [B, S, M]``."""
        mask = lengths_to_mask(lengths, src.shape[1])
        x = self.dropout(self.embed(src))
        self_attention = None
        if self.syntactic is not None:
            parsed = self.syntactic(x, lengths)
            x = torch.cat([x, parsed.parents], dim=-1)
            self_attention = parsed.marginals
        final = None
        if self.rnn is not None:
            x, final = self.rnn.run(x, lengths)
        return EncodedSource(x * mask[..., None], mask, self_attention, final=final)
