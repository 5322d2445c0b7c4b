"""What every encoder-decoder of the project is to its task and its searches: the abstract
:class:`EncoderDecoder`, which :class:`~.model.Seq2Seq` (LSTM) and
:class:`~.transformer.TransformerSeq2Seq` implement, and the decoding both share."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from . import search
from .search import Beams


class EncoderDecoder(nn.Module):
    """An attentional encoder-decoder: the interface of
    :class:`~lit_structattn.tasks.TranslationTask` and of :mod:`.search`.

    A subclass has ``encoder.embed`` (the source embeddings), ``tgt_embed``, ``bos_id``,
    ``eos_id``, ``sink`` (whether sources end with ``<SINK>``) and ``attention_name``, and
    implements ``encode(src [B, S], src_lengths [B], fertility)`` -> a source with ``memory [B,
    S, M]`` and ``select(index)``; ``initial_state(source)``; ``decode_step(tokens [N], state,
    source, joint_k)`` -> ``(scores [N, V], state, attention [N, S])``; ``forward(src,
    src_lengths, tgt_in [B, T], fertility, joint_k)`` -> ``(scores [B, T, V], attention [B, T,
    S], source)``; and ``loss(src, src_lengths, tgt_in, tgt_out, fertility, label_smoothing)``.
    ``joint_k``: the K of a joint output layer (Shankar et al. 2018), where the model has one.
    """

    bos_id: int
    eos_id: int
    sink: bool
    attention_name: str

    def encode(self, src: Tensor, src_lengths: Tensor, fertility: Tensor | None = None) -> Any:
        raise NotImplementedError

    def initial_state(self, source: Any) -> Any:
        raise NotImplementedError

    def decode_step(self, tokens: Tensor, state: Any, source: Any, joint_k: int | None = None
                    ) -> tuple[Tensor, Any, Tensor]:
        raise NotImplementedError

    def loss(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor,
             fertility: Tensor | None = None, label_smoothing: float = 0.0) -> Tensor:
        raise NotImplementedError

    def greedy(
        self, src: Tensor, src_lengths: Tensor, max_len: int, fertility: Tensor | None = None,
        joint_k: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """:func:`~.search.greedy` decoding: ``(tokens [B, <=max_len], attention [B, <=max_len,
        S])``; a joint output keeps ``joint_k`` positions (default: the trained K)."""
        return search.greedy(self, src, src_lengths, max_len, fertility, joint_k=joint_k)

    def beam_search(
        self, src: Tensor, src_lengths: Tensor, max_len: int, beam: int = 5, alpha: float = 1.0,
        fertility: Tensor | None = None, length_penalty: str = "avg",
        coverage_penalty: float = 0.0, min_attention: float = 0.1, joint_k: int | None = None,
    ) -> Tensor:
        """The best ``tokens [B, <=max_len]`` of :func:`~.search.beam_search`; a joint output
        keeps ``joint_k`` positions (default: the trained K)."""
        return search.beam_search(self, src, src_lengths, max_len, beam, alpha, fertility,
                                  length_penalty, coverage_penalty, min_attention,
                                  joint_k=joint_k)

    def beams(
        self, src: Tensor, src_lengths: Tensor, max_len: int, beam: int = 5,
        fertility: Tensor | None = None, joint_k: int | None = None,
    ) -> Beams:
        """The final hypotheses of :func:`~.search.beams`, to be ranked by
        :meth:`Beams.best`; a joint output keeps ``joint_k`` positions (default: the trained
        K)."""
        return search.beams(self, src, src_lengths, max_len, beam, fertility, joint_k=joint_k)
