"""Attentional encoder-decoder (Luong et al. 2015) with any attention layer of the project.

Encoder (:mod:`.source`): symbol embeddings, optionally enriched by intra-source syntactic
attention (``[x_j; c_j]`` with ``c_j`` the soft parent, Kim et al. 2017 §4.1) and/or a (Bi)LSTM.
Decoder (:mod:`.model`): an LSTM whose state ``h_t`` queries the source through the chosen
attention layer; ``h~_t = tanh(U [c_t; h_t])`` and ``p(y_{t+1}) = softmax(V h~_t + b)``; with
input feeding, ``h~_{t-1}`` is concatenated to the next input. Joint attention outputs
(:mod:`.joint`, Shankar et al. 2018, ``full_joint`` / ``beam_joint``) replace that softmax by the
attention-weighted mixture of the softmaxes of ``tanh(U [m_a; h_t])`` over the source positions
(input feeding keeps ``h~_t``); ``hard`` and ``sample_joint`` sample the positions in training
(REINFORCE, :meth:`Seq2Seq.loss`). Decoding (:mod:`.search`): greedy or batched beam search over
the decoder's step, finished sentences leaving the batch, with length normalization or the GNMT
length and coverage penalties.

Constrained attention (``csoftmax``/``csparsemax``, Malaviya et al. 2018; :mod:`.bounds`): the
decoder keeps the cumulative attention ``beta`` of every source word and bounds step ``t`` by
``u_t = fertility - beta_{t-1}`` (clamped at 0); with ``sink=True`` the last real source token is
the ``<SINK>``, whose bound never binds, and ``exhaustion_bonus = c`` adds ``c * u_t`` to the
scores of the other words. Fertilities are a constant or given per source token.

A small Transformer encoder-decoder (:mod:`.transformer`) takes any unconstrained transform as
its cross-attention and decodes through the same searches.
"""

from ...layers.registry import OutputName, SourceAttentionName, names
from .base import EncoderDecoder
from .joint import OUTPUTS, SAMPLED_OUTPUTS
from .model import DECODER_INITS, DecoderInit, DecoderState, Seq2Seq
from .search import Beams, rescore
from .source import ENCODERS, EncodedSource, EncoderName, SourceEncoder, SourceEncoderOptions
from .transformer import TransformerSeq2Seq, TransformerState

SOURCE_ATTENTION = names("seq2seq", "source_attention")

__all__ = [
    "DECODER_INITS",
    "ENCODERS",
    "OUTPUTS",
    "SAMPLED_OUTPUTS",
    "SOURCE_ATTENTION",
    "Beams",
    "DecoderInit",
    "DecoderState",
    "EncodedSource",
    "EncoderDecoder",
    "EncoderName",
    "OutputName",
    "Seq2Seq",
    "SourceAttentionName",
    "SourceEncoder",
    "SourceEncoderOptions",
    "TransformerSeq2Seq",
    "TransformerState",
    "rescore",
]
