"""A small Transformer encoder-decoder (Vaswani et al. 2017) whose cross-attention is any
transform of :mod:`lit_structattn.attention` (``softmax``, ``sparsemax``, ``entmax15``, ...),
built from :class:`~lit_structattn.layers.multihead.MultiheadAttention`.

The problem: compare sparse cross-attention where today's NMT models use it, a Transformer,
with everything else equal. Self-attention stays softmax; only the decoder's attention over the
source takes the transform by name, as the LSTM decoder's does (:class:`~.model.Seq2Seq`).

The method: pre-norm layers (a LayerNorm before each sublayer, one after the last layer; stable
without a learning-rate warm-up), sinusoidal positions, embeddings scaled by ``sqrt(E)``. The
model is an :class:`~.base.EncoderDecoder`, what :class:`~lit_structattn.tasks.TranslationTask`
and the searches of :mod:`.search` take. Decoding caches, per layer, the normalized inputs of
the positions decoded so far (the keys and values of its self-attention), so each step costs one
position, and step-by-step decoding equals teacher forcing (tested).

The attention it reports (figures, beam coverage, the task's sparsity) is the last decoder
layer's cross-attention averaged over its heads, ``[B, T, S]``: a source token has exactly zero
weight there only when no head of that layer attends to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...attention import get_transform
from ...common.constants import BOS_ID, EOS_ID
from ...common.masks import lengths_to_mask
from ...layers.multihead import MultiheadAttention
from .base import EncoderDecoder
from .source import EncodedSource


def sinusoids(length: int, dim: int, start: int = 0, device=None) -> Tensor:
    """Positions ``start .. start + length - 1`` as Vaswani et al.'s sines and cosines
    ``[length, dim]`` (``dim`` even)."""
    position = torch.arange(start, start + length, device=device, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, dim, 2, device=device, dtype=torch.float32)
                          * (-math.log(10000.0) / dim))
    angles = position * frequency
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)


def causal_blocked(queries: int, past: int, device=None) -> Tensor:
    """``[queries, past + queries]`` bool, True where a query may not attend: query ``i`` (the
    position ``past + i``) sees the positions up to its own."""
    return torch.ones(queries, past + queries, dtype=torch.bool, device=device).triu(past + 1)


class FeedForward(nn.Sequential):
    """``Linear(E, F) -> ReLU -> Dropout -> Linear(F, E)`` on ``[..., E]``."""

    def __init__(self, embed_dim: int, ffn_dim: int, dropout: float) -> None:
        super().__init__(nn.Linear(embed_dim, ffn_dim), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(ffn_dim, embed_dim))


class EncoderLayer(nn.Module):
    """Pre-norm softmax self-attention and feed-forward over ``[B, S, E]``."""

    def __init__(self, embed_dim: int, num_heads: int, ffn_dim: int, dropout: float) -> None:
        super().__init__()
        self.norm_self, self.norm_ffn = nn.LayerNorm(embed_dim), nn.LayerNorm(embed_dim)
        self.self_attention = MultiheadAttention(embed_dim, num_heads, dropout=dropout)
        self.ffn = FeedForward(embed_dim, ffn_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, padding: Tensor) -> Tensor:
        """``x [B, S, E]``, ``padding [B, S]`` (True = padding) -> ``[B, S, E]``."""
        h = self.norm_self(x)
        x = x + self.dropout(self.self_attention(h, h, h, key_padding_mask=padding,
                                                 need_weights=False)[0])
        return x + self.dropout(self.ffn(self.norm_ffn(x)))


class DecoderLayer(nn.Module):
    """Pre-norm causal softmax self-attention, cross-attention with any unconstrained transform,
    and feed-forward."""

    def __init__(self, embed_dim: int, num_heads: int, ffn_dim: int, dropout: float,
                 cross_attention: str, cross_options: dict[str, float] | None) -> None:
        super().__init__()
        self.norm_self, self.norm_cross, self.norm_ffn = (nn.LayerNorm(embed_dim)
                                                          for _ in range(3))
        self.self_attention = MultiheadAttention(embed_dim, num_heads, dropout=dropout)
        self.cross_attention = MultiheadAttention(embed_dim, num_heads, cross_attention, dropout,
                                                  transform_options=cross_options)
        self.ffn = FeedForward(embed_dim, ffn_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, memory: Tensor, padding: Tensor, past: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
        """``x [B, T, E]`` (positions ``P .. P + T - 1``) over the encoder's ``memory [B, S, E]``
        (``padding [B, S]``, True = padding), with ``past [B, P, E]`` the normalized inputs of
        the positions before (none in teacher forcing). Returns ``(output [B, T, E], keys
        [B, P + T, E]`` to pass as the next step's ``past``, ``cross-attention [B, T, S]``
        averaged over the heads)."""
        h = self.norm_self(x)
        keys = torch.cat([past, h], dim=1)
        blocked = causal_blocked(x.shape[1], past.shape[1], x.device)
        x = x + self.dropout(self.self_attention(h, keys, keys, attn_mask=blocked,
                                                 need_weights=False)[0])
        attended, weights = self.cross_attention(self.norm_cross(x), memory, memory,
                                                 key_padding_mask=padding)
        x = x + self.dropout(attended)
        return x + self.dropout(self.ffn(self.norm_ffn(x))), keys, weights


@dataclass
class TransformerState:
    """The decoder's cache for a batch of hypotheses: per layer, the normalized inputs of the
    positions decoded so far, ``[N, P, E]``."""

    past: tuple[Tensor, ...]

    @property
    def position(self) -> int:
        """The position of the next step."""
        return self.past[0].shape[1]

    def select(self, index: Tensor) -> TransformerState:
        """The states of hypotheses ``index [N']`` (beam reordering / expansion)."""
        return TransformerState(tuple(p[index] for p in self.past))


class TransformerEncoder(nn.Module):
    """The encoder: scaled embeddings plus sinusoids, the layers and a final LayerNorm;
    ``embed`` is the source embedding table (``num_embeddings`` = the source vocabulary)."""

    def __init__(self, vocab: int, embed_dim: int, num_heads: int, ffn_dim: int, layers: int,
                 dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim, padding_idx=0)
        self.layers = nn.ModuleList(EncoderLayer(embed_dim, num_heads, ffn_dim, dropout)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: Tensor, src_lengths: Tensor) -> EncodedSource:
        """``src [B, S]``, ``src_lengths [B]`` -> the :class:`EncodedSource` (``memory [B, S,
        E]``, ``mask [B, S]``)."""
        mask = lengths_to_mask(src_lengths, src.shape[1])
        x = self.dropout(scaled(self.embed, src)
                         + sinusoids(src.shape[1], self.embed.embedding_dim, device=src.device))
        for layer in self.layers:
            x = layer(x, ~mask)
        return EncodedSource(self.norm(x), mask)


def scaled(embed: nn.Embedding, ids: Tensor) -> Tensor:
    """``embed(ids) * sqrt(E)`` (the embeddings start at ``N(0, 1 / E)``)."""
    return embed(ids) * math.sqrt(embed.embedding_dim)


class TransformerSeq2Seq(EncoderDecoder):
    """Transformer encoder-decoder with any unconstrained transform as cross-attention.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (id 0 = padding in both).
        embed_dim: the model size ``E`` (embeddings, attention, residual stream).
        num_heads: attention heads of every layer; divides ``E``.
        ffn_dim: the feed-forward layers' inner size.
        encoder_layers, decoder_layers: the depths.
        cross_attention: the decoder's attention over the source by transform name
            (``softmax``, ``sparsemax``, ``entmax15``, ``entmax`` with ``cross_options``, ...);
            the constrained ones are refused (their bounds span the decoding steps, which only
            the LSTM decoder's fertility tracks).
        cross_options: the transform's options, e.g. ``{"alpha": 1.3}`` for ``entmax``.
        dropout: on embeddings, attention weights, sublayer outputs and inside the feed-forward.
        tie_embeddings: one matrix for the output layer and the target words, and the source
            words when the vocabularies are one (``joint_vocab``, default: equal sizes).
        sink: whether every source ends with the ``<SINK>`` token (from the data); it is one
            more source token here.
        bos_id, eos_id: the target start and end symbols.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        embed_dim: int = 256,
        num_heads: int = 4,
        ffn_dim: int = 1024,
        encoder_layers: int = 3,
        decoder_layers: int = 3,
        cross_attention: str = "softmax",
        cross_options: dict[str, float] | None = None,
        dropout: float = 0.1,
        tie_embeddings: bool = True,
        joint_vocab: bool | None = None,
        sink: bool = False,
        bos_id: int = BOS_ID,
        eos_id: int = EOS_ID,
    ) -> None:
        super().__init__()
        if embed_dim % 2:
            raise ValueError(f"embed_dim must be even (sinusoidal positions), got {embed_dim}")
        if get_transform(cross_attention, **(cross_options or {})).constrained:
            raise ValueError(
                f"cross_attention {cross_attention!r} is constrained: its bounds span the "
                "decoding steps, which only the LSTM decoder's fertility tracks "
                "(lit_structattn.models.seq2seq.Seq2Seq); take an unconstrained transform")
        self.encoder = TransformerEncoder(src_vocab, embed_dim, num_heads, ffn_dim,
                                       encoder_layers, dropout)
        self.tgt_embed = nn.Embedding(tgt_vocab, embed_dim, padding_idx=0)
        self.layers = nn.ModuleList(
            DecoderLayer(embed_dim, num_heads, ffn_dim, dropout, cross_attention, cross_options)
            for _ in range(decoder_layers))
        self.norm = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.generator = nn.Linear(embed_dim, tgt_vocab)
        for embed in (self.encoder.embed, self.tgt_embed):
            nn.init.normal_(embed.weight, std=embed_dim ** -0.5)
            nn.init.zeros_(embed.weight[0])
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.weight
            if src_vocab == tgt_vocab if joint_vocab is None else joint_vocab:
                self.encoder.embed.weight = self.tgt_embed.weight
        self.attention_name, self.sink = cross_attention, sink
        self.bos_id, self.eos_id = bos_id, eos_id

    def encode(self, src: Tensor, src_lengths: Tensor, fertility: Tensor | None = None
               ) -> EncodedSource:
        """The encoder's :class:`EncodedSource` of ``src [B, S]``; ``fertility`` is refused (no
        constrained attention here)."""
        if fertility is not None:
            raise ValueError("the Transformer takes no fertilities (fertility_strategy: none): "
                             "its cross-attention is unconstrained")
        return self.encoder(src, src_lengths)

    def initial_state(self, source: EncodedSource) -> TransformerState:
        """An empty cache for every row of (possibly beam-expanded) ``source``."""
        empty = source.memory.new_zeros(len(source.memory), 0, source.memory.shape[-1])
        return TransformerState(tuple(empty for _ in self.layers))

    def _decode(self, tgt_in: Tensor, source: EncodedSource, state: TransformerState
                ) -> tuple[Tensor, TransformerState, Tensor]:
        """The decoder over ``tgt_in [N, T]`` at the positions after ``state``'s: ``(scores [N,
        T, V], the state after them, the last layer's cross-attention [N, T, S])``."""
        x = self.dropout(scaled(self.tgt_embed, tgt_in) + sinusoids(
            tgt_in.shape[1], self.tgt_embed.embedding_dim, state.position, tgt_in.device))
        padding, past, weights = ~source.mask, [], None
        for layer, before in zip(self.layers, state.past, strict=True):
            x, keys, weights = layer(x, source.memory, padding, before)
            past.append(keys)
        return self.generator(self.norm(x)), TransformerState(tuple(past)), weights

    def decode_step(self, tokens: Tensor, state: TransformerState, source: EncodedSource,
                    joint_k: int | None = None) -> tuple[Tensor, TransformerState, Tensor]:
        """One step: ``tokens [N]`` -> ``(scores [N, V], new state, attention [N, S])``
        (``joint_k``: refused, no joint output here)."""
        no_joint_output(joint_k)
        scores, state, weights = self._decode(tokens[:, None], source, state)
        return scores[:, 0], state, weights[:, 0]

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor,
                fertility: Tensor | None = None, joint_k: int | None = None
                ) -> tuple[Tensor, Tensor, EncodedSource]:
        """Teacher forcing: ``(scores [B, T, V], attention [B, T, S], encoded source)`` with
        ``log_softmax(scores)`` the model's ``log p(y_t)``."""
        no_joint_output(joint_k)
        source = self.encode(src, src_lengths, fertility)
        scores, _, weights = self._decode(tgt_in, source, self.initial_state(source))
        return scores, weights, source

    def loss(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor,
             fertility: Tensor | None = None, label_smoothing: float = 0.0) -> Tensor:
        """The mean over the target tokens (``tgt_out [B, T]``, 0 = padding) of ``-log
        p(y_t)``, label-smoothed."""
        scores, _, _ = self(src, src_lengths, tgt_in, fertility)
        mask = tgt_out != 0
        return nn.functional.cross_entropy(scores[mask], tgt_out[mask],
                                           label_smoothing=label_smoothing)


def no_joint_output(joint_k: int | None) -> None:
    """Refuse a ``joint_k`` (the K of Shankar et al.'s joint outputs, which this model has
    not)."""
    if joint_k is not None:
        raise ValueError(f"joint_k={joint_k}: the Transformer has a soft output layer only")
