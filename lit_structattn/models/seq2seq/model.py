"""The attentional encoder-decoder (Luong et al. 2015) with any decoder attention of the
registry: the decoder LSTM, its step, teacher forcing and the loss. The source side is in
:mod:`.source`, the fertility bounds of constrained attention in :mod:`.bounds`, the output
layers (soft and joint, a :class:`~.joint.JointOutput` submodule) in :mod:`.joint`, decoding
in :mod:`.search`: the decoding options (the joint output's K, the beam, the length) are
arguments of ``greedy``, ``beam_search`` and ``beams`` (:class:`~.base.EncoderDecoder`), never
changes to the model."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor, nn

from ...common.checks import check_choice
from ...common.constants import BOS_ID, EOS_ID
from ...layers.encoders import run_lstm
from ...layers.registry import (
    AttentionName,
    OutputName,
    build_attention,
)
from ...layers.scorers import ScoreName
from .base import EncoderDecoder
from .bounds import step_bounds, with_fertility
from .joint import JointOutput
from .source import EncodedSource, SourceEncoder, SourceEncoderOptions, select_rows

DECODER_INITS = ("zeros", "encoder")
DecoderInit = Literal[DECODER_INITS]  # the names as the type of the constructor argument


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
                            select_rows(self.coverage, index))


class Seq2Seq(EncoderDecoder):
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
        encoder: the source side (:class:`~.source.SourceEncoderOptions`: ``embedding`` or
            ``bilstm`` and its size, ``none``, ``simple`` or ``structured`` syntactic attention
            with its parser's size); its embeddings have ``embed_dim`` and ``dropout``.
        tie_embeddings: share the output layer's weights with the target embeddings (Press &
            Wolf 2017) and, when the vocabularies are one, with the source embeddings.
        joint_vocab: whether source and target ids index one vocabulary (default: when their
            sizes are equal); only then are the source embeddings tied too.
        output: ``soft`` (Luong et al.), ``full_joint``, ``beam_joint``, ``sample_joint`` or
            ``hard`` (Shankar et al. 2018; see :meth:`loss` and :class:`~.joint.JointOutput`,
            the submodule ``output_layer``). Full-joint materializes ``[B, T, S, V]``: for
            small vocabularies (characters, morphology).
        joint_k: the attention positions beam-joint keeps, or the attention samples
            ``sample_joint`` and ``hard`` draw in training (when decoding, ``sample_joint`` keeps
            the ``joint_k`` most attended positions as beam-joint does and ``hard`` the most
            attended one); decoding may keep another K (the ``joint_k`` argument of
            :meth:`greedy`, :meth:`beams`, ...).
        decoder_init: the decoder's first LSTM state: ``zeros``, or ``encoder`` = the BiLSTM
            encoder's final ``(h, c)`` (both directions side by side, in every decoder layer;
            needs ``2 encoder.hidden_dim == hidden_dim``), as OpenNMT initializes its decoder.
        init_range: every parameter starts uniform in ``[-init_range, init_range]`` (the
            authors' OpenNMT / seq2seq-attn default 0.1); 0 keeps PyTorch's initializations
            (embeddings ``N(0, 1)``, which with tied embeddings makes large initial logits).
        bos_id, eos_id: the target start and end symbols.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        embed_dim: int = 50,
        hidden_dim: int = 50,
        attention: AttentionName = "softmax",
        score: ScoreName = "general",
        input_feed: bool = False,
        num_layers: int = 1,
        dropout: float = 0.0,
        bos_id: int = BOS_ID,
        eos_id: int = EOS_ID,
        fertility: float = 2.0,
        sink: bool = False,
        exhaustion_bonus: float = 0.0,
        coverage_vector: bool = False,
        encoder: SourceEncoderOptions = SourceEncoderOptions(),
        tie_embeddings: bool = False,
        output: OutputName = "soft",
        joint_k: int = 6,
        joint_vocab: bool | None = None,
        decoder_init: DecoderInit = "zeros",
        init_range: float = 0.0,
    ) -> None:
        super().__init__()
        self.encoder = SourceEncoder(src_vocab, embed_dim, encoder, dropout)
        memory_dim = self.encoder.output_dim
        self.tgt_embed = nn.Embedding(tgt_vocab, embed_dim, padding_idx=0)
        self.input_feed = input_feed
        self.hidden_dim, self.num_layers = hidden_dim, num_layers
        self.rnn = nn.LSTM(
            embed_dim + (hidden_dim if input_feed else 0), hidden_dim, num_layers,
            batch_first=True, dropout=dropout if num_layers > 1 else 0.0,
        )
        self.attention = build_attention(attention, hidden_dim, memory_dim, score=score)
        self.attention_name = attention
        self.output_layer = JointOutput(output, memory_dim, hidden_dim, tgt_vocab, joint_k, dropout)
        self.register_load_state_dict_pre_hook(_moved_output_layer)
        if tie_embeddings:  # one matrix for the output layer and the target (and source) words
            if embed_dim != hidden_dim:
                raise ValueError(f"tie_embeddings needs embed_dim == hidden_dim, got {embed_dim} "
                                 f"and {hidden_dim}")
            self.output_layer.generator.weight = self.tgt_embed.weight
            if src_vocab == tgt_vocab if joint_vocab is None else joint_vocab:  # source too
                self.encoder.embed.weight = self.tgt_embed.weight
        self.bos_id, self.eos_id = bos_id, eos_id
        self.constrained = self.attention.constrained
        if self.constrained and not sink:
            raise ValueError(f"{attention} attention needs sink=True: without the <SINK> token "
                             "the fertility bounds run out before the translation ends")
        if fertility <= 0:
            raise ValueError(f"fertility must be > 0, got {fertility}")
        if self.constrained and fertility < 1:
            raise ValueError(
                f"fertility={fertility} with {attention} attention and the <SINK> token: every "
                "source word may receive at most that much attention over the whole "
                "translation, so nearly all of it goes to the sink and the model learns to "
                "ignore the source (BLEU 0). Use a CONSTANT fertility >= 1 (the paper's f = 2 "
                "or 3, configs/translation/rows/csparsemax_constant_f2.yaml), or "
                "fertility_strategy: guided / predicted in the data config")
        self.fertility, self.sink, self.exhaustion_bonus = fertility, sink, exhaustion_bonus
        if coverage_vector and not self.attention.takes_bonus:
            raise ValueError(f"coverage_vector needs an attention that takes a score bonus, "
                             f"not {attention!r}")
        self.coverage_weight = nn.Parameter(torch.zeros(hidden_dim)) if coverage_vector else None
        self.tracks_coverage = self.constrained or coverage_vector
        if self.output_layer.joint and not self.attention.distribution:
            raise ValueError(f"{output} needs an attention whose weights are a distribution, "
                             f"not {attention!r}")
        self.decoder_init = check_choice("decoder_init", decoder_init, DECODER_INITS)
        if decoder_init == "encoder" and (self.encoder.rnn is None or memory_dim != hidden_dim):
            raise ValueError("decoder_init='encoder' needs a BiLSTM encoder with 2 "
                             "encoder.hidden_dim == hidden_dim, got encoder output "
                             f"{memory_dim} and hidden_dim {hidden_dim}")
        if init_range > 0:
            for parameter in self.parameters():
                nn.init.uniform_(parameter, -init_range, init_range)

    @property
    def joint_k(self) -> int:
        """The K the joint output was trained with (the default K of decoding)."""
        return self.output_layer.k

    def encode(
        self, src: Tensor, src_lengths: Tensor, fertility: Tensor | None = None
    ) -> EncodedSource:
        """The encoder's :class:`EncodedSource`, with fertilities and the bonus mask when the
        attention is constrained (``fertility [B, S]`` per token, or the constant; see
        :func:`~.bounds.with_fertility`) and the memory's share of the attentional layer for
        joint outputs."""
        source = self.encoder(src, src_lengths)
        if self.output_layer.joint:
            source = replace(source, memory_share=self.output_layer.memory_share(source.memory))
        if not self.constrained:
            return source
        return with_fertility(source, src_lengths, fertility, self.fertility, self.sink)

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
        if self.constrained:  # u_t and the exhaustion bonus (Malaviya et al. 2018)
            upper, exhaustion = step_bounds(source, coverage, self.exhaustion_bonus)
            if exhaustion is not None:
                bonus = exhaustion if bonus is None else bonus + exhaustion
        extra = {} if upper is None and bonus is None else {"upper": upper, "bonus": bonus}
        context, weights = self.attention(queries, source.memory, mask=source.mask, **extra)
        return self.output_layer.attentional(context, queries), weights

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

    def decode_step(
        self, tokens: Tensor, state: DecoderState, source: EncodedSource,
        joint_k: int | None = None,
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One step: ``tokens [N]`` -> ``(scores [N, V], new state, attention [N, S])``;
        ``log_softmax(scores)`` is the step's ``log p(y)``, a joint output keeping ``joint_k``
        positions (default: the trained K)."""
        combined, state, weights = self._step(self.tgt_embed(tokens), state, source)
        scores = self.output_layer(combined[:, None], state.h[-1][:, None], weights[:, None],
                                   source.memory_share, k=joint_k)
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
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, fertility: Tensor | None = None,
        joint_k: int | None = None,
    ) -> tuple[Tensor, Tensor, EncodedSource]:
        """Teacher forcing: ``(scores [B, T, V], attention [B, T, S], encoded source)`` with
        ``log_softmax(scores)`` the model's ``log p(y_t)`` (see :class:`~.joint.JointOutput`; a
        joint output keeps ``joint_k`` positions, default the trained K); ``fertility [B, S]``:
        per-token fertilities for constrained attention (optional)."""
        combined, queries, weights, source = self._teacher_forced(src, src_lengths, tgt_in,
                                                                  fertility)
        scores = self.output_layer(combined, queries, weights, source.memory_share, k=joint_k)
        return scores, weights, source

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
        combined, queries, weights, source = self._teacher_forced(src, src_lengths, tgt_in,
                                                                  fertility)
        if self.output_layer.sampled:
            token_loss = -self.output_layer.sampled_log_likelihood(
                queries, weights, source.memory_share, tgt_out)
            loss = token_loss.masked_select(mask).mean()
        else:  # the output layer only at the N real target tokens, each a one-step row
            sentence = mask.nonzero()[:, 0]  # [N] the sentence of each token
            scores = self.output_layer(combined[mask][:, None], queries[mask][:, None],
                                       weights[mask][:, None], source.memory_share,
                                       sentence).squeeze(1)
            loss = nn.functional.cross_entropy(scores, tgt_out[mask],
                                               label_smoothing=label_smoothing)
        penalty = self.attention.penalty()
        return loss if penalty is None else loss + penalty


def _moved_output_layer(
    model: nn.Module, state_dict: dict[str, Any], prefix: str, *_: Any
) -> None:
    """Load-state-dict pre-hook of :class:`Seq2Seq`: the output layer's parameters of
    checkpoints saved before it was a submodule (``combine.weight``, ``generator.weight``,
    ``generator.bias``) move to their place in ``output_layer``."""
    for name in ("combine.weight", "generator.weight", "generator.bias"):
        if prefix + name in state_dict:
            state_dict[f"{prefix}output_layer.{name}"] = state_dict.pop(prefix + name)
