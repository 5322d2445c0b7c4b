"""Decoding over a step interface: greedy and batched beam search for any
:class:`StepDecoder` (every decoder option of the encoder-decoder goes through one search),
finished sentences leaving the batch, and :func:`rescore` with length normalization or the GNMT
length and coverage penalties (COVPENALTY of Malaviya et al. 2018). The decoding options are
arguments: those of the search (beam, length, penalties) and the decoder's own ones
(``step_options``, e.g. the K of a joint output layer), which every step receives; a search
changes nothing in the decoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from ...common.masks import lengths_to_mask


class StepDecoder(Protocol):
    """What the searches need of a decoder: ``encode(src [B, S], lengths [B], fertility)`` ->
    a source with ``memory [B, S, M]`` and ``select(index)``; ``initial_state(source)`` -> a
    state with ``select(index)``; ``decode_step(tokens [N], state, source, **step_options)`` ->
    ``(scores [N, V], state, attention [N, S])`` with the decoding options the search was given
    (:class:`~.model.Seq2Seq`: ``joint_k``); the target symbols ``bos_id`` and ``eos_id``."""

    bos_id: int
    eos_id: int

    def encode(self, src: Tensor, src_lengths: Tensor, fertility: Tensor | None = None) -> Any: ...

    def initial_state(self, source: Any) -> Any: ...

    def decode_step(
        self, tokens: Tensor, state: Any, source: Any, **step_options: Any
    ) -> tuple[Tensor, Any, Tensor]: ...


@torch.no_grad()
def greedy(
    model: StepDecoder, src: Tensor, src_lengths: Tensor, max_len: int,
    fertility: Tensor | None = None, **step_options: Any,
) -> tuple[Tensor, Tensor]:
    """Greedy decoding: ``(tokens [B, <=max_len], attention [B, <=max_len, S])``; finished
    sequences are padded with 0 after their ``<eos>``. Finished sequences leave the batch,
    so the steps cost what the unfinished ones need. Every step receives ``step_options``."""
    source = model.encode(src, src_lengths, fertility)
    batch, length = src.shape
    state = model.initial_state(source)
    tokens = src.new_full((batch,), model.bos_id)
    outputs = src.new_zeros(batch, max_len)
    attention = source.memory.new_zeros(batch, max_len, length)
    active = torch.arange(batch, device=src.device)  # the rows still decoding
    steps = 0
    for step in range(max_len):
        logits, state, weights = model.decode_step(tokens, state, source, **step_options)
        tokens = logits.argmax(-1)
        outputs[active, step] = tokens
        attention[active, step] = weights.to(attention.dtype)  # bf16 under autocast
        steps = step + 1
        going = tokens != model.eos_id
        if not bool(going.all()):
            if not bool(going.any()):
                break
            keep = going.nonzero().squeeze(1)
            active, tokens = active[keep], tokens[keep]
            state, source = state.select(keep), source.select(keep)
    return outputs[:, :steps], attention[:, :steps]


@torch.no_grad()
def beam_search(
    model: StepDecoder, src: Tensor, src_lengths: Tensor, max_len: int, beam: int = 5,
    alpha: float = 1.0, fertility: Tensor | None = None, length_penalty: str = "avg",
    coverage_penalty: float = 0.0, min_attention: float = 0.1, **step_options: Any,
) -> Tensor:
    """Batched beam search; returns the best ``tokens [B, <=max_len]`` per source (0 after
    ``<eos>``). The final beams are ranked by :func:`rescore` (``log p / length**alpha`` by
    default; ``length_penalty="wu"`` and ``coverage_penalty > 0`` give COVPENALTY). Every
    step receives ``step_options``."""
    final = beams(model, src, src_lengths, max_len, beam, fertility, **step_options)
    return final.best(alpha, length_penalty, coverage_penalty, min_attention)


@torch.no_grad()
def beams(
    model: StepDecoder, src: Tensor, src_lengths: Tensor, max_len: int, beam: int = 5,
    fertility: Tensor | None = None, **step_options: Any,
) -> Beams:
    """The final hypotheses of a batched beam search (ranked by ``log p`` while searching),
    to be ranked by :meth:`Beams.best` under any length / coverage penalty. A sentence
    whose hypotheses have all ended leaves the batch. Every step receives
    ``step_options``."""
    source = model.encode(src, src_lengths, fertility)
    batch, length = src.shape
    device = src.device
    # float32 log-probabilities and lengths (as ``scores`` and ``lengths`` below), the
    # coverage in the dtype of the memory (as ``coverage``)
    final = Beams(src.new_zeros(batch, beam, max_len), torch.zeros(batch, beam, device=device),
                  torch.zeros(batch, beam, device=device),
                  source.memory.new_ones(batch, beam, length))
    active = torch.arange(batch, device=device)  # the sentences still searching
    source = source.select(active.repeat_interleave(beam))
    state = model.initial_state(source)
    tokens = src.new_full((batch * beam,), model.bos_id)
    # Only the first hypothesis of each beam is live at the start.
    scores = torch.full((batch, beam), -torch.inf, device=device)
    scores[:, 0] = 0
    scores = scores.view(-1)
    finished = torch.zeros(batch * beam, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch * beam, device=device)
    coverage = source.memory.new_zeros(batch * beam, length)
    history = src.new_zeros(batch * beam, 0)
    for step in range(max_len):
        logits, state, weights = model.decode_step(tokens, state, source, **step_options)
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
        finished = finished[origin] | (tokens == model.eos_id)
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
