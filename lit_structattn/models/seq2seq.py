"""Attentional encoder-decoder (Luong et al. 2015) with any attention layer of the project.

Encoder: symbol embeddings, optionally enriched by intra-source syntactic attention
(``[x_j; c_j]`` with ``c_j`` the soft parent, Kim et al. 2017 §4.1) and/or a (Bi)LSTM.
Decoder: an LSTM whose state ``h_t`` queries the source through the chosen attention layer;
``h~_t = tanh(U [c_t; h_t])`` and ``p(y_{t+1}) = softmax(V h~_t + b)``; with input feeding,
``h~_{t-1}`` is concatenated to the next input. Joint attention outputs (Shankar et al. 2018,
``full_joint`` / ``beam_joint``) replace that softmax by the attention-weighted mixture of the
softmaxes of ``tanh(U [m_a; h_t])`` over the source positions (input feeding keeps ``h~_t``);
``hard`` and ``sample_joint`` sample the positions in training (REINFORCE, :meth:`Seq2Seq.loss`).
Decoding: greedy or batched beam search, finished sentences leaving the batch, with length
normalization or the GNMT length and coverage penalties.

Constrained attention (``csoftmax``/``csparsemax``, Malaviya et al. 2018): the decoder keeps the
cumulative attention ``beta`` of every source word and bounds step ``t`` by
``u_t = fertility - beta_{t-1}`` (clamped at 0); with ``sink=True`` the last real source token is
the ``<SINK>``, whose bound never binds, and ``exhaustion_bonus = c`` adds ``c * u_t`` to the
scores of the other words. Fertilities are a constant or given per source token.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor, nn

from ..common.checks import check_choice
from ..common.masks import lengths_to_mask
from ..layers.encoders import BiLSTMEncoder, run_lstm
from ..layers.registry import (
    AttentionName,
    OutputName,
    SourceAttentionName,
    build_attention,
    check_attention,
    names,
)
from ..layers.syntactic import SyntacticAttention

SOURCE_ATTENTION = names("seq2seq", "source_attention")
SAMPLED_OUTPUTS = ("hard", "sample_joint")  # trained with REINFORCE
OUTPUTS = names("seq2seq", "output")
ENCODERS = ("embedding", "bilstm")
DECODER_INITS = ("zeros", "encoder")
# the same names as types of the constructor arguments (the tuples stay the source of truth)
EncoderName = Literal[ENCODERS]
DecoderInit = Literal[DECODER_INITS]


def _rows(t: Tensor | None, index: Tensor, dim: int = 0) -> Tensor | None:
    return None if t is None else t.index_select(dim, index)


@dataclass
class DecoderState:
    """Recurrent state of a batch of hypotheses: LSTM ``h``/``c`` ``[layers, N, H]``, the
    previous attentional output ``feed [N, H]`` (zeros when input feeding is off) and, for
    constrained attention, the cumulative attention ``coverage [N, S]``."""

    h: Tensor
    c: Tensor
    feed: Tensor
    coverage: Tensor | None = None

    def select(self, index: Tensor) -> DecoderState:
        """The states of hypotheses ``index [N']`` (beam reordering / expansion)."""
        return DecoderState(self.h[:, index], self.c[:, index], self.feed[index],
                            _rows(self.coverage, index))


@dataclass
class EncodedSource:
    """``memory [B, S, M]`` attended by the decoder, ``mask [B, S]``, the intra-source
    attention ``self_attention [B, S+1, S+1]`` (index 0 = root) when the encoder has one, and for
    constrained attention the ``fertility [B, S]`` of every source token and ``bonus_mask
    [B, S]`` (the real tokens other than the sink, which get the exhaustion bonus); ``final``:
    the BiLSTM encoder's final ``(h, c)``, each ``[B, M]`` (None without a BiLSTM);
    ``memory_share [B, S, H]``: for joint outputs, each position's share ``U_m m_j`` of the
    attentional layer (see :meth:`Seq2Seq.memory_share`)."""

    memory: Tensor
    mask: Tensor
    self_attention: Tensor | None = None
    fertility: Tensor | None = None
    bonus_mask: Tensor | None = None
    final: tuple[Tensor, Tensor] | None = None
    memory_share: Tensor | None = None

    def select(self, index: Tensor) -> EncodedSource:
        return replace(self, memory=self.memory[index], mask=self.mask[index],
                       memory_share=_rows(self.memory_share, index),
                       self_attention=_rows(self.self_attention, index),
                       fertility=_rows(self.fertility, index),
                       bonus_mask=_rows(self.bonus_mask, index),
                       final=None if self.final is None else
                       (self.final[0][index], self.final[1][index]))


class SourceEncoder(nn.Module):
    """Embeddings -> optional syntactic self-attention -> optional BiLSTM.

    Args:
        vocab_size, embed_dim: the symbol embeddings (id 0 = padding).
        source_attention: ``none`` (``x_j``), ``simple`` or ``structured`` (``[x_j; c_j]``, see
            :class:`~lit_structattn.layers.syntactic.SyntacticAttention`).
        parser_dim: hidden size per direction of the parsing BiLSTM.
        encoder: ``embedding`` (no recurrence, as Kim et al.'s tree transduction) or ``bilstm``.
        hidden_dim: BiLSTM size per direction (``bilstm`` only).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        source_attention: SourceAttentionName = "none",
        parser_dim: int = 50,
        encoder: EncoderName = "embedding",
        hidden_dim: int = 50,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_attention("seq2seq", "source_attention", source_attention)
        check_choice("encoder", encoder, ENCODERS)
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
        final = None
        if self.rnn is not None:
            x, final = self.rnn.run(x, lengths)
        return EncodedSource(x * mask[..., None], mask, self_attention, final=final)


class Seq2Seq(nn.Module):
    """Encoder-decoder with attention.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (id 0 = padding in both).
        embed_dim, hidden_dim: embedding and decoder sizes.
        attention: the decoder attention by name (``softmax``, ``sparsemax``, ``sigmoid``,
            ``segmentation``, ...; see :func:`~lit_structattn.layers.registry.build_attention`).
        score: the attention score (``general`` = bilinear by default).
        input_feed: concatenate ``h~_{t-1}`` to the decoder input (Luong et al.).
        fertility: the constant fertility of every source token under constrained attention
            (CONSTANT strategy), used when no per-token fertilities are passed.
        sink: the last real source token is the ``<SINK>`` (unbounded, no bonus); constrained
            attention requires it, as otherwise the bounds run out.
        exhaustion_bonus: ``c`` in ``z' = z + c * u_t`` (constrained attention only; paper 0.2).
        coverage_vector: COVVECTOR (Malaviya et al. 2018 §5, after Tu et al. 2016): the score
            becomes ``h_t^T (W m_j + v beta_{t-1, j})`` with a learned ``v``; needs a
            single-query attention layer (``dot``/``general`` score, any transform).
        encoder_dim: the BiLSTM encoder's size per direction (``encoder="bilstm"``).
        tie_embeddings: share the output layer's weights with the target embeddings (Press &
            Wolf 2017) and, when the vocabularies are one, with the source embeddings.
        joint_vocab: whether source and target ids index one vocabulary (default: when their
            sizes are equal); only then are the source embeddings tied too.
        output: ``soft`` (Luong et al.), ``full_joint``, ``beam_joint``, ``sample_joint`` or
            ``hard`` (Shankar et al. 2018; see :meth:`_predict` and :meth:`loss`). Full-joint
            materializes ``[B, T, S, V]``: for small vocabularies (characters, morphology).
        joint_k: the attention positions beam-joint keeps, or the attention samples
            ``sample_joint`` and ``hard`` draw in training (when decoding, ``sample_joint`` keeps
            the ``joint_k`` most attended positions as beam-joint does and ``hard`` the most
            attended one); may be set differently for decoding.
        decoder_init: the decoder's first LSTM state: ``zeros``, or ``encoder`` = the BiLSTM
            encoder's final ``(h, c)`` (both directions side by side, in every decoder layer;
            needs ``2 encoder_dim == hidden_dim``), as OpenNMT initializes its decoder.
        init_range: every parameter starts uniform in ``[-init_range, init_range]`` (the
            authors' OpenNMT / seq2seq-attn default 0.1); 0 keeps PyTorch's initializations
            (embeddings ``N(0, 1)``, which with tied embeddings makes large initial logits).
        encoder_kwargs: passed to :class:`SourceEncoder` (``encoder``, ``source_attention``,
            ``parser_dim``).
        bos_id, eos_id: the target start and end symbols.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        embed_dim: int = 50,
        hidden_dim: int = 50,
        attention: AttentionName = "softmax",
        score: str = "general",
        input_feed: bool = False,
        num_layers: int = 1,
        dropout: float = 0.0,
        bos_id: int = 1,
        eos_id: int = 2,
        fertility: float = 2.0,
        sink: bool = False,
        exhaustion_bonus: float = 0.0,
        coverage_vector: bool = False,
        encoder_dim: int = 50,
        tie_embeddings: bool = False,
        output: OutputName = "soft",
        joint_k: int = 6,
        joint_vocab: bool | None = None,
        decoder_init: DecoderInit = "zeros",
        init_range: float = 0.0,
        **encoder_kwargs,
    ) -> None:
        super().__init__()
        self.encoder = SourceEncoder(src_vocab, embed_dim, dropout=dropout,
                                     hidden_dim=encoder_dim, **encoder_kwargs)
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
        if tie_embeddings:  # one matrix for the output layer and the target (and source) words
            if embed_dim != hidden_dim:
                raise ValueError(f"tie_embeddings needs embed_dim == hidden_dim, got {embed_dim} "
                                 f"and {hidden_dim}")
            self.generator.weight = self.tgt_embed.weight
            if src_vocab == tgt_vocab if joint_vocab is None else joint_vocab:  # source too
                self.encoder.embed.weight = self.tgt_embed.weight
        self.bos_id, self.eos_id = bos_id, eos_id
        self.constrained = self.attention.constrained
        if self.constrained and not sink:
            raise ValueError(f"{attention} attention needs sink=True: without the <SINK> token "
                             "the fertility bounds run out before the translation ends")
        if fertility <= 0:
            raise ValueError(f"fertility must be > 0, got {fertility}")
        self.fertility, self.sink, self.exhaustion_bonus = fertility, sink, exhaustion_bonus
        if coverage_vector and not self.attention.takes_bonus:
            raise ValueError(f"coverage_vector needs an attention that takes a score bonus, "
                             f"not {attention!r}")
        self.coverage_weight = nn.Parameter(torch.zeros(hidden_dim)) if coverage_vector else None
        self.tracks_coverage = self.constrained or coverage_vector
        check_attention("seq2seq", "output", output)
        if output != "soft" and not self.attention.distribution:
            raise ValueError(f"{output} needs an attention whose weights are a distribution, "
                             f"not {attention!r}")
        if joint_k < 1:
            raise ValueError(f"joint_k must be >= 1, got {joint_k}")
        self.output, self.joint_k = output, joint_k  # joint_k may be changed for decoding
        self.decoder_init = check_choice("decoder_init", decoder_init, DECODER_INITS)
        if decoder_init == "encoder" and (self.encoder.rnn is None or memory_dim != hidden_dim):
            raise ValueError("decoder_init='encoder' needs a BiLSTM encoder with 2 encoder_dim == "
                             f"hidden_dim, got encoder output {memory_dim} and hidden_dim "
                             f"{hidden_dim}")
        if init_range > 0:
            for parameter in self.parameters():
                nn.init.uniform_(parameter, -init_range, init_range)

    @contextmanager
    def joint_positions(self, k: int | None) -> Iterator[None]:
        """Within the block, joint outputs keep (or sample) ``k`` positions instead of
        ``joint_k`` (``None``: unchanged), e.g. to decode with another K than in training."""
        trained = self.joint_k
        self.joint_k = trained if k is None else k
        try:
            yield
        finally:
            self.joint_k = trained

    def encode(
        self, src: Tensor, src_lengths: Tensor, fertility: Tensor | None = None
    ) -> EncodedSource:
        """The encoder's :class:`EncodedSource`, with fertilities and the bonus mask when the
        attention is constrained (``fertility [B, S]`` per token, or the constant) and the
        memory's share of the attentional layer for joint outputs."""
        source = self.encoder(src, src_lengths)
        if self.output != "soft":
            source = replace(source, memory_share=self.memory_share(source.memory))
        if not self.constrained:
            return source
        mask = source.mask
        if fertility is None:
            fertility = torch.full(mask.shape, self.fertility, device=mask.device)
        fertility = fertility.to(source.memory.dtype).masked_fill(~mask, 0)
        sink = torch.zeros_like(mask)
        if self.sink:
            sink = nn.functional.one_hot(src_lengths - 1, mask.shape[1]).bool()
            unbounded = 2.0 * src.shape[1] + 1e4  # more than any translation can give it
            fertility = fertility.masked_fill(sink, unbounded)
        return replace(source, fertility=fertility, bonus_mask=mask & ~sink)

    def initial_state(self, source: EncodedSource) -> DecoderState:
        """The decoder state before the first step for (possibly beam-expanded) ``source``:
        zero (or the encoder's final, see ``decoder_init``) LSTM states, zero input feed, no
        coverage yet."""
        memory = source.memory
        batch, length, _ = memory.shape
        if self.decoder_init == "encoder":
            h, c = (t.expand(self.num_layers, -1, -1).contiguous() for t in source.final)
        else:
            h = memory.new_zeros(self.num_layers, batch, self.hidden_dim)
            c = torch.zeros_like(h)
        coverage = memory.new_zeros(batch, length) if self.tracks_coverage else None
        return DecoderState(h, c, memory.new_zeros(batch, self.hidden_dim), coverage)

    def _attend(
        self, queries: Tensor, source: EncodedSource, coverage: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``queries [B, T, H]`` -> attentional outputs ``h~ [B, T, H]``, weights ``[B, T, S]``
        (with coverage: one step, ``T = 1``, given the cumulative attention ``coverage [B, S]``)."""
        upper = bonus = None
        if self.coverage_weight is not None:  # COVVECTOR: h^T v beta_j added to the scores
            bonus = (queries @ self.coverage_weight)[..., None] * coverage[:, None]
        if self.constrained:
            remaining = (source.fertility - coverage).clamp_min(0)[:, None]  # u_t [B, 1, S]
            if self.exhaustion_bonus:
                exhaustion = self.exhaustion_bonus * remaining * source.bonus_mask[:, None]
                bonus = exhaustion if bonus is None else bonus + exhaustion
            # One step gives no word more than 1, so bounds above 1 never bind: clamping them
            # changes nothing but keeps the huge sink bound out of float32 sums.
            upper = remaining.clamp_max(1)
        extra = {} if upper is None and bonus is None else {"upper": upper, "bonus": bonus}
        context, weights = self.attention(queries, source.memory, mask=source.mask, **extra)
        combined = torch.tanh(self.combine(torch.cat([context, queries], dim=-1)))
        return self.dropout(combined), weights

    def _step(
        self, inputs: Tensor, state: DecoderState, source: EncodedSource
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One recurrent step from embedded ``inputs [N, E]``: ``(h~ [N, H], new state,
        attention [N, S])``."""
        if self.input_feed:
            inputs = torch.cat([inputs, state.feed], dim=-1)
        output, h, c = self._lstm_step(inputs, state.h, state.c)
        combined, weights = self._attend(output[:, None], source, state.coverage)
        weights = weights[:, 0]
        coverage = None if state.coverage is None else state.coverage + weights
        return combined[:, 0], DecoderState(h, c, combined[:, 0], coverage), weights

    def _lstm_step(self, inputs: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One step of ``self.rnn`` on ``inputs [N, E]`` and states ``[layers, N, H]``:
        ``(top output [N, H], h, c)``. The gates are computed here from the LSTM's weights:
        one ``nn.LSTM`` call per step costs several times its arithmetic on CPU."""
        hs, cs = [], []
        x = inputs
        for layer in range(self.num_layers):
            if layer:
                x = nn.functional.dropout(x, self.rnn.dropout, self.training)
            gates = (nn.functional.linear(x, getattr(self.rnn, f"weight_ih_l{layer}"),
                                          getattr(self.rnn, f"bias_ih_l{layer}"))
                     + nn.functional.linear(h[layer], getattr(self.rnn, f"weight_hh_l{layer}"),
                                            getattr(self.rnn, f"bias_hh_l{layer}")))
            i, f, g, o = gates.chunk(4, dim=-1)  # PyTorch's gate order
            cell = torch.sigmoid(f) * c[layer] + torch.sigmoid(i) * torch.tanh(g)
            x = torch.sigmoid(o) * torch.tanh(cell)
            hs.append(x)
            cs.append(cell)
        return x, torch.stack(hs), torch.stack(cs)

    def memory_share(self, memory: Tensor) -> Tensor:
        """``U_m m_j [..., S, H]``: the part of the attentional layer ``tanh(U [c; h])`` that
        a position's memory ``memory [..., S, M]`` contributes when it stands in for the
        context. Computed once per source position, not once per (token, kept position)."""
        return nn.functional.linear(memory, self._combine_columns()[0])

    def _combine_columns(self) -> tuple[Tensor, Tensor]:
        """``(U_m [H, M], U_h [H, H])``: the columns of the attentional layer's ``U [c; h]``
        that read the context and the decoder state."""
        return self.combine.weight.split(
            [self.combine.in_features - self.hidden_dim, self.hidden_dim], dim=1)

    def _position_log_probs(self, queries: Tensor, shares: Tensor) -> Tensor:
        """``log P_t(y | x_a) [B, T, K, V]``: the output softmax of ``tanh(U [m_a; h_t])``, the
        soft layer with one position's memory in place of the context, for the decoder states
        ``queries [B, T, H]`` and the positions' shares ``U_m m_a`` (``shares [B, T or 1, K,
        H]``, :meth:`memory_share`)."""
        own = nn.functional.linear(queries, self._combine_columns()[1])  # U_h h_t [B, T, H]
        projected = shares + own[:, :, None]
        logits = self.generator(self.dropout(torch.tanh(projected)))
        return logits.float().log_softmax(-1)  # float32 under autocast: the loss sums these

    @staticmethod
    def _shares_at(shares: Tensor, positions: Tensor, rows: Tensor | None = None) -> Tensor:
        """``shares [B', S, H]`` at ``positions [B, T, K]`` of rows ``rows [B]`` (default: row
        ``b`` for ``b`` in ``0..B-1``): ``[B, T, K, H]``."""
        if rows is None:
            rows = torch.arange(len(positions), device=positions.device)
        return shares[rows[:, None, None], positions]

    def _predict(
        self, combined: Tensor, queries: Tensor, weights: Tensor, shares: Tensor | None,
        rows: Tensor | None = None,
    ) -> Tensor:
        """Output scores ``[B, T, V]`` (their log-softmax is ``log p(y_t)``) from the soft
        attentional outputs ``combined [B, T, H]``, the decoder states ``queries [B, T, H]``,
        the attention ``weights [B, T, S]`` and the positions' shares of the attentional layer
        ``shares [B', S, H]`` (:meth:`memory_share`; row ``b`` of the outputs reads row
        ``rows[b]``, given ``rows [B]``, else row ``b``; the soft output reads none).

        ``soft``: ``V h~_t``. Joint attention (Shankar et al. 2018): ``log sum_a P_t(a) P_t(y |
        x_a)`` (:meth:`_position_log_probs`) over every position (``full_joint``) or the
        ``joint_k`` most attended ones (``beam_joint`` and, when decoding, ``sample_joint``;
        ``hard``: the most attended one). The kept weights are renormalized over the kept
        mass, which is what the authors' cross-entropy on ``log q`` amounts to, so that every
        step gives a distribution and beam search compares like with like.
        """
        if self.output == "soft":
            return self.generator(combined)
        keep = 1 if self.output == "hard" else self.joint_k
        if self.output != "full_joint" and keep < weights.shape[-1]:
            kept, positions = weights.topk(keep, dim=-1)  # [B, T, K]
            shares = self._shares_at(shares, positions, rows)
        else:
            kept = weights
            shares = (shares if rows is None else shares[rows])[:, None]  # [B, 1, S, H]
        log_p = self._position_log_probs(queries, shares)
        log_prior = kept.clamp_min(1e-30).log() - kept.sum(-1, keepdim=True).log()
        return torch.logsumexp(log_prior[..., None] + log_p, dim=2)

    def decode_step(
        self, tokens: Tensor, state: DecoderState, source: EncodedSource
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One step: ``tokens [N]`` -> ``(scores [N, V], new state, attention [N, S])``;
        ``log_softmax(scores)`` is the step's ``log p(y)``."""
        combined, state, weights = self._step(self.tgt_embed(tokens), state, source)
        scores = self._predict(combined[:, None], state.h[-1][:, None], weights[:, None],
                               source.memory_share)
        return scores[:, 0], state, weights

    def _teacher_forced(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, fertility: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, EncodedSource]:
        """The decoder over ``tgt_in [B, T]``: ``(h~ [B, T, H], decoder states [B, T, H],
        attention [B, T, S], encoded source)``."""
        source = self.encode(src, src_lengths, fertility)
        inputs = self.tgt_embed(tgt_in)
        state = self.initial_state(source)
        if not (self.input_feed or self.tracks_coverage):  # all steps in one LSTM call
            queries, _ = run_lstm(self.rnn, inputs, (state.h, state.c))
            combined, weights = self._attend(queries, source)
            return combined, queries, weights, source
        steps, tops, attention = [], [], []
        for step_inputs in inputs.unbind(1):  # one backward op, not a [B, T, E] zero-fill per step
            combined, state, weights = self._step(step_inputs, state, source)
            steps.append(combined)
            tops.append(state.h[-1])
            attention.append(weights)
        return torch.stack(steps, 1), torch.stack(tops, 1), torch.stack(attention, 1), source

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, fertility: Tensor | None = None
    ) -> tuple[Tensor, Tensor, EncodedSource]:
        """Teacher forcing: ``(scores [B, T, V], attention [B, T, S], encoded source)`` with
        ``log_softmax(scores)`` the model's ``log p(y_t)`` (see :meth:`_predict`);
        ``fertility [B, S]``: per-token fertilities for constrained attention (optional)."""
        combined, queries, weights, source = self._teacher_forced(src, src_lengths, tgt_in,
                                                                  fertility)
        return self._predict(combined, queries, weights, source.memory_share), weights, source

    def loss(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor,
        fertility: Tensor | None = None, label_smoothing: float = 0.0,
    ) -> Tensor:
        """The training loss: the mean over the target tokens (``tgt_out [B, T]``, 0 =
        padding) of ``-log p(y_t)``, label-smoothed, plus the attention layer's penalty if it
        has one (segmentation attention's L2 on its pairwise potentials).

        ``hard`` and ``sample_joint`` (Shankar et al. 2018) replace ``log p(y_t)`` by a Monte
        Carlo estimate from ``joint_k`` positions ``a_1..a_M`` sampled from ``P_t(a)``: the mean
        of ``log P_t(y_t | x_a_l)`` (hard attention, Eq. 3) or the log of the mean of
        ``P_t(y_t | x_a_l)`` (sample-joint). Its value is the estimate; its gradient adds the
        REINFORCE term ``sum_l (R - R_-l) grad log P_t(a_l)``, with ``R`` the estimate and the
        baseline ``R_-l`` the same estimate without sample ``l`` (independent of ``a_l``, so the
        gradient stays unbiased). The reward of step ``t`` is its own estimate: input feeding
        uses the soft context, so a sample affects no later step. No label smoothing here.
        """
        mask = tgt_out != 0
        if self.output in SAMPLED_OUTPUTS:
            token_loss = -self._sampled_log_likelihood(src, src_lengths, tgt_in, tgt_out,
                                                       fertility)
            loss = token_loss.masked_select(mask).mean()
        else:  # the output layer only at the N real target tokens, each a one-step row
            combined, queries, weights, source = self._teacher_forced(src, src_lengths, tgt_in,
                                                                      fertility)
            sentence = mask.nonzero()[:, 0]  # [N] the sentence of each token
            scores = self._predict(combined[mask][:, None], queries[mask][:, None],
                                   weights[mask][:, None], source.memory_share,
                                   sentence).squeeze(1)
            loss = nn.functional.cross_entropy(scores, tgt_out[mask],
                                               label_smoothing=label_smoothing)
        penalty = self.attention.penalty()
        return loss if penalty is None else loss + penalty

    def _sampled_log_likelihood(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor,
        fertility: Tensor | None,
    ) -> Tensor:
        """``[B, T]`` the estimate of ``log p(y_t)`` of :meth:`loss`, with its REINFORCE
        gradient."""
        _, queries, weights, source = self._teacher_forced(src, src_lengths, tgt_in, fertility)
        batch, steps, length = weights.shape
        samples = self.joint_k
        if samples < 2:
            raise ValueError(f"{self.output} needs joint_k >= 2 samples for its baseline")
        positions = torch.multinomial(weights.detach().reshape(-1, length), samples,
                                      replacement=True).view(batch, steps, samples)
        log_p = self._position_log_probs(queries, self._shares_at(source.memory_share, positions))
        target = tgt_out[:, :, None, None].expand(-1, -1, samples, 1)
        rewards = log_p.gather(-1, target).squeeze(-1)  # [B, T, M]
        if self.output == "hard":
            estimate = rewards.mean(-1)
            baseline = (rewards.sum(-1, keepdim=True) - rewards) / (samples - 1)
        else:
            estimate = rewards.logsumexp(-1) - math.log(samples)
            itself = torch.eye(samples, dtype=torch.bool, device=rewards.device)  # [M, M]
            left_out = rewards[..., None, :].masked_fill(itself, -torch.inf)  # [B, T, M, M]
            baseline = left_out.logsumexp(-1) - math.log(samples - 1)
        signal = (estimate[..., None] - baseline).detach()
        log_prior = weights.gather(-1, positions).clamp_min(1e-30).log()
        score_function = log_prior - log_prior.detach()  # 0, with the gradient of log P_t(a)
        return estimate + (signal * score_function).sum(-1)

    @torch.no_grad()
    def greedy(
        self, src: Tensor, src_lengths: Tensor, max_len: int, fertility: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Greedy decoding: ``(tokens [B, <=max_len], attention [B, <=max_len, S])``; finished
        sequences are padded with 0 after their ``<eos>``. Finished sequences leave the batch,
        so the steps cost what the unfinished ones need."""
        source = self.encode(src, src_lengths, fertility)
        batch, length = src.shape
        state = self.initial_state(source)
        tokens = src.new_full((batch,), self.bos_id)
        outputs = src.new_zeros(batch, max_len)
        attention = source.memory.new_zeros(batch, max_len, length)
        active = torch.arange(batch, device=src.device)  # the rows still decoding
        steps = 0
        for step in range(max_len):
            logits, state, weights = self.decode_step(tokens, state, source)
            tokens = logits.argmax(-1)
            outputs[active, step] = tokens
            attention[active, step] = weights.to(attention.dtype)  # bf16 under autocast
            steps = step + 1
            going = tokens != self.eos_id
            if not bool(going.all()):
                if not bool(going.any()):
                    break
                keep = going.nonzero().squeeze(1)
                active, tokens = active[keep], tokens[keep]
                state, source = state.select(keep), source.select(keep)
        return outputs[:, :steps], attention[:, :steps]

    @torch.no_grad()
    def beam_search(
        self, src: Tensor, src_lengths: Tensor, max_len: int, beam: int = 5, alpha: float = 1.0,
        fertility: Tensor | None = None, length_penalty: str = "avg",
        coverage_penalty: float = 0.0, min_attention: float = 0.1,
    ) -> Tensor:
        """Batched beam search; returns the best ``tokens [B, <=max_len]`` per source (0 after
        ``<eos>``). The final beams are ranked by :func:`rescore` (``log p / length**alpha`` by
        default; ``length_penalty="wu"`` and ``coverage_penalty > 0`` give COVPENALTY)."""
        beams = self.beams(src, src_lengths, max_len, beam, fertility)
        return beams.best(alpha, length_penalty, coverage_penalty, min_attention)

    @torch.no_grad()
    def beams(
        self, src: Tensor, src_lengths: Tensor, max_len: int, beam: int = 5,
        fertility: Tensor | None = None,
    ) -> Beams:
        """The final hypotheses of a batched beam search (ranked by ``log p`` while searching),
        to be ranked by :meth:`Beams.best` under any length / coverage penalty. A sentence
        whose hypotheses have all ended leaves the batch."""
        source = self.encode(src, src_lengths, fertility)
        batch, length = src.shape
        device = src.device
        # float32 log-probabilities and lengths (as ``scores`` and ``lengths`` below), the
        # coverage in the dtype of the memory (as ``coverage``)
        final = Beams(src.new_zeros(batch, beam, max_len), torch.zeros(batch, beam, device=device),
                      torch.zeros(batch, beam, device=device),
                      source.memory.new_ones(batch, beam, length))
        active = torch.arange(batch, device=device)  # the sentences still searching
        source = source.select(active.repeat_interleave(beam))
        state = self.initial_state(source)
        tokens = src.new_full((batch * beam,), self.bos_id)
        # Only the first hypothesis of each beam is live at the start.
        scores = torch.full((batch, beam), -torch.inf, device=device)
        scores[:, 0] = 0
        scores = scores.view(-1)
        finished = torch.zeros(batch * beam, dtype=torch.bool, device=device)
        lengths = torch.zeros(batch * beam, device=device)
        coverage = source.memory.new_zeros(batch * beam, length)
        history = src.new_zeros(batch * beam, 0)
        for step in range(max_len):
            logits, state, weights = self.decode_step(tokens, state, source)
            logits = logits.float()  # bf16 under autocast: the beams sum float32 log-probs
            coverage = coverage + weights * (~finished)[:, None]
            # The best continuations of each hypothesis are among its own top-``beam``
            # tokens, so rank those [n, beam * beam] instead of all [n, beam * V]: a shift of
            # the logits by the row's log-sum-exp turns them into log-probabilities.
            normalizer = logits.logsumexp(-1, keepdim=True)
            logits[:, 0] = -torch.inf  # padding is no output
            row_top, row_tokens = logits.topk(beam, dim=-1)  # [n * beam, beam]
            row_scores = row_top - normalizer + scores[:, None]
            if bool(finished.any()):  # a finished hypothesis extends by padding, at no cost
                stay = torch.full_like(row_top[0], -torch.inf)
                stay[0] = 0
                row_scores = torch.where(finished[:, None], scores[:, None] + stay, row_scores)
                row_tokens = row_tokens.masked_fill(finished[:, None], 0)
            n = len(active)
            top_scores, top = row_scores.view(n, beam * beam).topk(beam, dim=-1)
            origin = (top // beam + torch.arange(n, device=device)[:, None] * beam).view(-1)
            tokens = row_tokens.view(n, beam * beam).gather(1, top).view(-1)
            scores = top_scores.view(-1)
            coverage = coverage[origin]
            history = torch.cat([history[origin], tokens[:, None]], dim=1)
            lengths = lengths[origin] + (~finished[origin]).float()
            finished = finished[origin] | (tokens == self.eos_id)
            done = finished.view(n, beam).all(-1)
            if step + 1 == max_len:
                done[:] = True
            if bool(done.any()):  # store the finished sentences, search on with the others
                rows = done.repeat_interleave(beam)
                ids = active[done]
                final.tokens[ids, :, : step + 1] = history[rows].view(-1, beam, step + 1)
                final.log_prob[ids] = scores[rows].view(-1, beam)
                final.length[ids] = lengths[rows].view(-1, beam)
                final.coverage[ids] = coverage[rows].view(-1, beam, length)
                if bool(done.all()):
                    break
                keep = (~rows).nonzero().squeeze(1)
                origin, active = origin[keep], active[~done]
                tokens, scores, finished = tokens[keep], scores[keep], finished[keep]
                lengths, coverage, history = lengths[keep], coverage[keep], history[keep]
                source = source.select(keep)
            state = state.select(origin)
        final.tokens = final.tokens[:, :, : step + 1]
        final.coverage = final.coverage.masked_fill(~lengths_to_mask(src_lengths, length)[:, None],
                                                    1.0)
        return final


@dataclass
class Beams:
    """The final hypotheses of a beam search: ``tokens [B, K, T]`` (0 after ``<eos>``), their
    ``log_prob [B, K]`` and ``length [B, K]`` (counting ``<eos>``), and the attention every
    source token received, ``coverage [B, K, S]`` (1 at padding)."""

    tokens: Tensor
    log_prob: Tensor
    length: Tensor
    coverage: Tensor

    def best(
        self, alpha: float = 1.0, length_penalty: str = "avg", coverage_penalty: float = 0.0,
        min_attention: float = 0.1,
    ) -> Tensor:
        """The best ``tokens [B, T]`` per source under :func:`rescore`."""
        ranked = rescore(self.log_prob, self.length, self.coverage, alpha, length_penalty,
                         coverage_penalty, min_attention)
        best = ranked.argmax(-1)
        return self.tokens[torch.arange(len(best), device=best.device), best]


def rescore(
    log_prob: Tensor, length: Tensor, coverage: Tensor, alpha: float = 1.0,
    length_penalty: str = "avg", beta: float = 0.0, min_attention: float = 0.1,
) -> Tensor:
    """The ranking score of finished hypotheses: ``log p / lp + cp`` with ``lp = length**alpha``
    (``avg``) or ``((5 + length) / 6)**alpha`` (``wu``, Wu et al. 2016), and the coverage
    penalty ``cp = beta * sum_j log max(min(coverage_j, 1), min_attention)`` (Wu et al.'s with
    Malaviya et al.'s floor, so that a sparse attention's zeros cost a finite amount).

    ``log_prob``/``length`` ``[...]``, ``coverage [..., S]`` (the attention each source token
    got; set padding to 1 so it costs nothing). Returns ``[...]``. ``ValueError`` for an unknown
    ``length_penalty``.
    """
    if length_penalty == "avg":
        penalty = length.clamp_min(1) ** alpha
    elif length_penalty == "wu":
        penalty = ((5 + length) / 6) ** alpha
    else:
        raise ValueError(f"unknown length_penalty {length_penalty!r}; valid: avg, wu")
    floor = coverage.clamp(max=1).clamp_min(min_attention)
    return log_prob / penalty + beta * floor.log().sum(-1)
