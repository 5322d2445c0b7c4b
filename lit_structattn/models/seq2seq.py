"""Attentional encoder-decoder (Luong et al. 2015) with any attention layer of the project.

Encoder: symbol embeddings, optionally enriched by intra-source syntactic attention
(``[x_j; c_j]`` with ``c_j`` the soft parent, Kim et al. 2017 §4.1) and/or a (Bi)LSTM.
Decoder: an LSTM whose state ``h_t`` queries the source through the chosen attention layer;
``h~_t = tanh(U [c_t; h_t])`` and ``p(y_{t+1}) = softmax(V h~_t + b)``; with input feeding,
``h~_{t-1}`` is concatenated to the next input. Decoding: greedy or batched beam search with
length normalization.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from ..encoders import BiLSTMEncoder, lengths_to_mask
from ..structured.registry import build_attention
from ..structured.syntactic import SyntacticAttention

SOURCE_ATTENTION = ("none", "simple", "structured")
ENCODERS = ("embedding", "bilstm")


@dataclass
class DecoderState:
    """Recurrent state of a batch of hypotheses: LSTM ``h``/``c`` ``[layers, N, H]`` and the
    previous attentional output ``feed [N, H]`` (zeros when input feeding is off)."""

    h: Tensor
    c: Tensor
    feed: Tensor

    def select(self, index: Tensor) -> DecoderState:
        """The states of hypotheses ``index [N']`` (beam reordering / expansion)."""
        return DecoderState(self.h[:, index], self.c[:, index], self.feed[index])


@dataclass
class EncodedSource:
    """``memory [B, S, M]`` attended by the decoder, ``mask [B, S]``, and the intra-source
    attention ``self_attention [B, S+1, S+1]`` (index 0 = root) when the encoder has one."""

    memory: Tensor
    mask: Tensor
    self_attention: Tensor | None = None

    def select(self, index: Tensor) -> EncodedSource:
        attn = None if self.self_attention is None else self.self_attention[index]
        return replace(self, memory=self.memory[index], mask=self.mask[index], self_attention=attn)


class SourceEncoder(nn.Module):
    """Embeddings -> optional syntactic self-attention -> optional BiLSTM.

    Args:
        vocab_size, embed_dim: the symbol embeddings (id 0 = padding).
        source_attention: ``none`` (``x_j``), ``simple`` or ``structured`` (``[x_j; c_j]``, see
            :class:`~lit_structattn.structured.syntactic.SyntacticAttention`).
        parser_dim: hidden size per direction of the parsing BiLSTM.
        encoder: ``embedding`` (no recurrence, as Kim et al.'s tree transduction) or ``bilstm``.
        hidden_dim: BiLSTM size per direction (``bilstm`` only).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        source_attention: str = "none",
        parser_dim: int = 50,
        encoder: str = "embedding",
        hidden_dim: int = 50,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        for name, value, valid in (
            ("source_attention", source_attention, SOURCE_ATTENTION),
            ("encoder", encoder, ENCODERS),
        ):
            if value not in valid:
                raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.syntactic = None
        width = embed_dim
        if source_attention != "none":
            self.syntactic = SyntacticAttention(embed_dim, parser_dim, mode=source_attention)
            width = 2 * embed_dim
        self.rnn = BiLSTMEncoder(width, hidden_dim) if encoder == "bilstm" else None
        self.output_dim = 2 * hidden_dim if self.rnn is not None else width

    def forward(self, src: Tensor, lengths: Tensor) -> EncodedSource:
        """``src [B, S]``, ``lengths [B]`` -> :class:`EncodedSource` with ``memory [B, S, M]``."""
        mask = lengths_to_mask(lengths, src.shape[1])
        x = self.dropout(self.embed(src))
        self_attention = None
        if self.syntactic is not None:
            parsed = self.syntactic(x, lengths)
            x = torch.cat([x, parsed.parents], dim=-1)
            self_attention = parsed.marginals
        if self.rnn is not None:
            x = self.rnn(x, lengths)
        return EncodedSource(x * mask[..., None], mask, self_attention)


class Seq2Seq(nn.Module):
    """Encoder-decoder with attention.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (id 0 = padding in both).
        embed_dim, hidden_dim: embedding and decoder sizes.
        attention: the decoder attention by name (``softmax``, ``sparsemax``, ``sigmoid``,
            ``segmentation``, ...; see :func:`~lit_structattn.structured.registry.build_attention`).
        score: the attention score (``general`` = bilinear by default).
        input_feed: concatenate ``h~_{t-1}`` to the decoder input (Luong et al.).
        encoder_kwargs: passed to :class:`SourceEncoder`.
        bos_id, eos_id: the target start and end symbols.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        embed_dim: int = 50,
        hidden_dim: int = 50,
        attention: str = "softmax",
        score: str = "general",
        input_feed: bool = False,
        num_layers: int = 1,
        dropout: float = 0.0,
        bos_id: int = 1,
        eos_id: int = 2,
        **encoder_kwargs,
    ) -> None:
        super().__init__()
        self.encoder = SourceEncoder(src_vocab, embed_dim, dropout=dropout, **encoder_kwargs)
        memory_dim = self.encoder.output_dim
        self.tgt_embed = nn.Embedding(tgt_vocab, embed_dim, padding_idx=0)
        self.input_feed = input_feed
        self.hidden_dim, self.num_layers = hidden_dim, num_layers
        self.rnn = nn.LSTM(
            embed_dim + (hidden_dim if input_feed else 0), hidden_dim, num_layers,
            batch_first=True, dropout=dropout if num_layers > 1 else 0.0,
        )
        self.attention = build_attention(attention, hidden_dim, memory_dim, score=score)
        self.combine = nn.Linear(memory_dim + hidden_dim, hidden_dim, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.generator = nn.Linear(hidden_dim, tgt_vocab)
        self.bos_id, self.eos_id = bos_id, eos_id

    def initial_state(self, batch: int, like: Tensor) -> DecoderState:
        zeros = like.new_zeros(self.num_layers, batch, self.hidden_dim)
        return DecoderState(zeros, zeros.clone(), like.new_zeros(batch, self.hidden_dim))

    def _attend(self, queries: Tensor, source: EncodedSource) -> tuple[Tensor, Tensor]:
        """``queries [B, T, H]`` -> attentional outputs ``h~ [B, T, H]``, weights ``[B, T, S]``."""
        context, weights = self.attention(queries, source.memory, mask=source.mask)
        combined = torch.tanh(self.combine(torch.cat([context, queries], dim=-1)))
        return self.dropout(combined), weights

    def decode_step(
        self, tokens: Tensor, state: DecoderState, source: EncodedSource
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One step: ``tokens [N]`` -> ``(log-probs [N, V], new state, attention [N, S])``."""
        inputs = self.tgt_embed(tokens)
        if self.input_feed:
            inputs = torch.cat([inputs, state.feed], dim=-1)
        output, (h, c) = self.rnn(inputs[:, None], (state.h, state.c))
        combined, weights = self._attend(output, source)
        log_probs = torch.log_softmax(self.generator(combined[:, 0]), dim=-1)
        return log_probs, DecoderState(h, c, combined[:, 0]), weights[:, 0]

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor
    ) -> tuple[Tensor, Tensor, EncodedSource]:
        """Teacher forcing: ``(logits [B, T, V], attention [B, T, S], encoded source)``."""
        source = self.encoder(src, src_lengths)
        inputs = self.tgt_embed(tgt_in)
        if not self.input_feed:  # the whole target in one LSTM call, attention for all steps
            outputs, _ = self.rnn(inputs)
            combined, weights = self._attend(outputs, source)
            return self.generator(combined), weights, source
        state = self.initial_state(src.shape[0], inputs)
        steps, attention = [], []
        for t in range(tgt_in.shape[1]):
            step_input = torch.cat([inputs[:, t], state.feed], dim=-1)
            output, (h, c) = self.rnn(step_input[:, None], (state.h, state.c))
            combined, weights = self._attend(output, source)
            state = DecoderState(h, c, combined[:, 0])
            steps.append(combined[:, 0])
            attention.append(weights[:, 0])
        return self.generator(torch.stack(steps, 1)), torch.stack(attention, 1), source

    @torch.no_grad()
    def greedy(self, src: Tensor, src_lengths: Tensor, max_len: int) -> tuple[Tensor, Tensor]:
        """Greedy decoding: ``(tokens [B, <=max_len], attention [B, <=max_len, S])``; finished
        sequences are padded with 0 after their ``<eos>``."""
        source = self.encoder(src, src_lengths)
        batch = src.shape[0]
        state = self.initial_state(batch, source.memory)
        tokens = src.new_full((batch,), self.bos_id)
        done = torch.zeros(batch, dtype=torch.bool, device=src.device)
        outputs, attention = [], []
        for _ in range(max_len):
            log_probs, state, weights = self.decode_step(tokens, state, source)
            tokens = log_probs.argmax(-1).masked_fill(done, 0)
            outputs.append(tokens)
            attention.append(weights)
            done |= tokens == self.eos_id
            if bool(done.all()):
                break
        return torch.stack(outputs, 1), torch.stack(attention, 1)

    @torch.no_grad()
    def beam_search(
        self, src: Tensor, src_lengths: Tensor, max_len: int, beam: int = 5, alpha: float = 1.0
    ) -> Tensor:
        """Batched beam search; returns the best ``tokens [B, <=max_len]`` per source (0 after
        ``<eos>``), ranked by ``log p / length**alpha``."""
        source = self.encoder(src, src_lengths)
        batch = src.shape[0]
        expand = torch.arange(batch, device=src.device).repeat_interleave(beam)
        source = source.select(expand)
        state = self.initial_state(batch * beam, source.memory)
        tokens = src.new_full((batch * beam,), self.bos_id)
        # Only the first hypothesis of each beam is live at the start.
        scores = torch.full((batch, beam), -torch.inf, device=src.device)
        scores[:, 0] = 0
        scores = scores.view(-1)
        finished = torch.zeros(batch * beam, dtype=torch.bool, device=src.device)
        lengths = torch.zeros(batch * beam, device=src.device)
        history = src.new_zeros(batch * beam, 0)
        for _ in range(max_len):
            log_probs, state, _ = self.decode_step(tokens, state, source)
            vocab = log_probs.shape[-1]
            # A finished hypothesis only extends with padding at no cost.
            log_probs = torch.where(
                finished[:, None], torch.full_like(log_probs, -torch.inf), log_probs
            )
            log_probs[:, 0] = torch.where(finished, 0.0, -torch.inf)
            candidates = (scores[:, None] + log_probs).view(batch, beam * vocab)
            top_scores, top = candidates.topk(beam, dim=-1)  # [B, beam]
            offsets = torch.arange(batch, device=src.device)[:, None] * beam
            origin = (top // vocab + offsets).view(-1)
            tokens = (top % vocab).view(-1)
            scores = top_scores.view(-1)
            state = state.select(origin)
            history = torch.cat([history[origin], tokens[:, None]], dim=1)
            lengths = lengths[origin] + (~finished[origin]).float()
            finished = finished[origin] | (tokens == self.eos_id)
            if bool(finished.all()):
                break
        normalized = (scores / lengths.clamp_min(1) ** alpha).view(batch, beam)
        best = normalized.argmax(-1) + torch.arange(batch, device=src.device) * beam
        return history[best]
