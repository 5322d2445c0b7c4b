"""Corpus-level translation metrics of Malaviya et al. (2018), §5: sacreBLEU and chrF (with their
signatures), the REP score (repetitions) and the DROP score (dropped source words), with the
word alignments the DROP score needs (:func:`drop_alignments`, eflomal through
:func:`lit_structattn.datamodules.alignment.align`), and the perplexity of a token-level NLL.

The scores read whole corpora of finished translations (strings or word lists): as functions
(:func:`bleu_chrf`, :func:`rep_score`, :func:`drop_score`) and as torchmetrics ``Metric``
objects that a task updates batch by batch like its other metrics (:class:`BleuChrf`,
:class:`RepScore`, :class:`DropScore`, :class:`BleuPerSetting`). Their state is the corpus
itself, Python objects rather than tensors: a :class:`CorpusScore` keeps one row per example
(its position in the split and what the score reads of it), gathers the rows of every DDP
process when it computes (one row per position: a padded shard's repeats fold together), and
scores them in the split's order on the first process, which sends the result to the others
(the DROP aligner, whose sampler cannot be seeded, runs once and every process logs its value).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torchmetrics import MeanMetric, Metric

from ..datamodules.alignment import Links, align

__all__ = ["BleuChrf", "BleuPerSetting", "CorpusScore", "DropScore", "RepScore", "TokenPerplexity",
           "bleu_chrf", "drop_alignments", "drop_score", "rep_score"]

Words = Sequence[str]

Alignment = Iterable[tuple[int, int]]  # (source index, target index) links


def bleu_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float | str]:
    """Detokenized, cased corpus BLEU and chrF by sacreBLEU: ``{"bleu", "chrf", "bleu_signature",
    "chrf_signature"}`` (report the signatures with the scores); one string per sentence.
    ``ValueError`` if the two lists differ in length."""
    from sacrebleu.metrics import BLEU, CHRF

    _check_same_length(hypotheses, references)
    bleu, chrf = BLEU(), CHRF()
    refs = [list(references)]
    return {
        "bleu": bleu.corpus_score(list(hypotheses), refs).score,
        "chrf": chrf.corpus_score(list(hypotheses), refs).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def rep_score(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]], n: int = 2,
    lambda1: float = 1.0, lambda2: float = 2.0,
) -> float:
    """The REP score: repetitions in the output beyond those of the reference, per 100
    reference words.

    Per sentence, with ``t(s)``/``r(s)`` the counts of n-gram ``s`` in the hypothesis and the
    reference: ``lambda1 * sum_{s: t(s) >= 2} max(0, t(s) - r(s))`` plus
    ``lambda2 * sum_w max(0, t(w w) - r(w w))`` over immediately repeated words; summed over
    sentences, divided by the number of reference words, times 100. Inputs are token lists
    (subwords merged back into words), one per sentence.

    Raises:
        ValueError: different numbers of hypotheses and references, or no reference words.
    """
    _check_same_length(hypotheses, references)
    total, reference_words = 0.0, 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        reference_words += len(ref)
        hyp_grams, ref_grams = _ngrams(hyp, n), _ngrams(ref, n)
        total += lambda1 * sum(max(0, c - ref_grams[s]) for s, c in hyp_grams.items() if c >= 2)
        hyp_pairs, ref_pairs = _ngrams(hyp, 2), _ngrams(ref, 2)
        total += lambda2 * sum(max(0, c - ref_pairs[p]) for p, c in hyp_pairs.items()
                               if p[0] == p[1])
    if reference_words == 0:
        raise ValueError("rep_score: the references have no words")
    return 100.0 * total / reference_words


def drop_score(
    reference_alignments: Sequence[Alignment], hypothesis_alignments: Sequence[Alignment]
) -> float:
    """The DROP score: the percentage of source words aligned to some reference word that are
    aligned to no word of the hypothesis (alignments of source to reference and of source to
    hypothesis, e.g. from the same word aligner): one set of ``(source index, target index)``
    links per sentence.

    Raises:
        ValueError: different numbers of link sets, or no source word aligned to a reference.
    """
    _check_same_length(reference_alignments, hypothesis_alignments)
    aligned, dropped = 0, 0
    for ref_links, hyp_links in zip(reference_alignments, hypothesis_alignments, strict=True):
        in_reference = {i for i, _ in ref_links}
        in_hypothesis = {i for i, _ in hyp_links}
        aligned += len(in_reference)
        dropped += len(in_reference - in_hypothesis)
    if aligned == 0:
        raise ValueError("drop_score: no source word is aligned to its reference")
    return 100.0 * dropped / aligned


def drop_alignments(
    train_pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
    sources: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
    hypotheses: Sequence[Sequence[str]], iterations: int | None = None,
) -> tuple[list[Links], list[Links]]:
    """The word links :func:`drop_score` compares: source-to-reference and source-to-hypothesis
    links of every test sentence, from one eflomal run over the training pairs, the
    ``(source, reference)`` and the ``(source, hypothesis)`` pairs together (Malaviya et al.
    aligned train + test). Every sentence is a list of words (e.g. lowercased Moses tokens).

    Args:
        train_pairs: ``(source words, target words)`` of the training corpus (context for the
            aligner only).
        sources, references, hypotheses: the test sentences, one list per sentence each.
        iterations: eflomal's iterations (None: its default).
    Returns:
        ``(to_reference, to_hypothesis)``: one set of ``(source index, target index)`` links per
        test sentence each.
    Raises:
        ValueError: ``sources``, ``references`` and ``hypotheses`` differ in length.
    """
    _check_same_length(hypotheses, references)
    _check_same_length(sources, references)
    n = len(sources)
    links = align([*train_pairs, *zip(sources, references, strict=True),
                   *zip(sources, hypotheses, strict=True)], iterations)
    return links[len(train_pairs) : len(train_pairs) + n], links[len(train_pairs) + n :]


def _check_same_length(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} hypotheses/alignments but {len(b)} references")


# ---- the scores as metric objects ----------------------------------------------------------

def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _everyones(rows: list) -> list:
    """The ``rows`` of every process, concatenated (``rows`` itself without torch.distributed)."""
    if not _distributed():
        return rows
    everyone: list[list] = [[] for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather_object(everyone, rows)
    return [row for part in everyone for row in part]


def _on_first_process(compute: Callable[[], Any]) -> Any:
    """What ``compute()`` returns, computed by the first process and sent to the others."""
    if not _distributed():
        return compute()
    result = [compute() if torch.distributed.get_rank() == 0 else None]
    torch.distributed.broadcast_object_list(result, src=0)
    return result[0]


class CorpusScore(Metric):
    """A score of a whole corpus of outputs, batch by batch: ``update(indices [B], *columns)``
    keeps, for every example of the batch, its position in the split and its item of each
    column (strings, word lists: whatever :meth:`score` reads); ``compute()`` is :meth:`score`
    of the columns of every process, one row per position, in the split's order (see the
    module's docstring). The rows are not torchmetrics states (which must be tensors):
    :meth:`corpus` gathers them itself, and :meth:`reset` empties them."""

    is_differentiable, higher_is_better, full_state_update = False, True, False

    def __init__(self, **kwargs) -> None:
        super().__init__(sync_on_compute=False, **kwargs)  # corpus() gathers the rows
        self.rows: list[tuple] = []

    def update(self, indices: torch.Tensor, *columns: Sequence) -> None:
        """``indices [B]``: the examples' positions in the split; ``columns``: one sequence of
        ``B`` items each."""
        self.rows.extend(zip(indices.tolist(), *columns, strict=True))

    def corpus(self) -> list[tuple]:
        """The columns of every process's rows, one row per position, in position order (a
        collective call under DDP: every process makes it)."""
        ordered = dict(sorted(((row[0], row[1:]) for row in _everyones(self.rows)),
                              key=lambda item: item[0]))
        if not ordered:
            raise ValueError(f"{type(self).__name__}: no example to score (no update)")
        return [list(column) for column in zip(*ordered.values(), strict=True)]

    def compute(self) -> Any:
        columns = self.corpus()
        return _on_first_process(lambda: self.score(*columns))

    def score(self, *columns: list) -> Any:
        """The score of the whole corpus's ``columns`` (each in position order)."""
        raise NotImplementedError

    def reset(self) -> None:
        super().reset()
        self.rows = []


class BleuChrf(CorpusScore):
    """Corpus BLEU and chrF of detokenized translations (:func:`bleu_chrf`):
    ``update(indices [B], hypotheses, references)`` (strings); ``compute()`` ->
    ``{"bleu", "chrf"}``. :attr:`signatures`: sacreBLEU's, to report with the scores."""

    def score(self, hypotheses: list[str], references: list[str]) -> dict[str, float]:
        scores = bleu_chrf(hypotheses, references)
        return {"bleu": scores["bleu"], "chrf": scores["chrf"]}

    @property
    def signatures(self) -> dict[str, str]:
        """``{"BLEU": ..., "chrF": ...}``: sacreBLEU's signatures of the two scores."""
        scores = bleu_chrf(["."], ["."])  # a signature names the options and one reference
        return {"BLEU": scores["bleu_signature"], "chrF": scores["chrf_signature"]}


class BleuPerSetting(CorpusScore):
    """The BLEU of several settings' translations of the same sentences (say, the final beams
    ranked under each point of a grid of penalties): ``update(indices [B], references,
    candidates)``, ``candidates[b]`` the translations of sentence ``b``, one per setting;
    ``compute()`` -> the BLEU of every setting, in their order."""

    def score(self, references: list[str], candidates: list[Sequence[str]]) -> list[float]:
        return [bleu_chrf(list(translations), references)["bleu"]
                for translations in zip(*candidates, strict=True)]


class RepScore(CorpusScore):
    """The REP score (:func:`rep_score`): ``update(indices [B], hypotheses, references)``, each
    a word list per sentence."""

    def score(self, hypotheses: list[Words], references: list[Words]) -> float:
        return rep_score(hypotheses, references)


class DropScore(CorpusScore):
    """The DROP score (:func:`drop_score` of :func:`drop_alignments`):
    ``update(indices [B], sources, references, hypotheses)``, each a word list per sentence.

    Args:
        iterations: the aligner's (None: eflomal's default).
        context: gives the further sentence pairs the aligner reads with the test pairs (the
            training corpus, as word lists), called when the score is computed, on the first
            process only.

    Both are attributes of the same names, which a task whose data comes later (at its
    set-up) gives then.
    """

    def __init__(self, iterations: int | None = None,
                 context: Callable[[], Sequence[tuple[Words, Words]]] = tuple, **kwargs) -> None:
        super().__init__(**kwargs)
        self.iterations, self.context = iterations, context

    def score(self, sources: list[Words], references: list[Words],
              hypotheses: list[Words]) -> float:
        return drop_score(*drop_alignments(self.context(), sources, references, hypotheses,
                                           self.iterations))


class TokenPerplexity(MeanMetric):
    """The perplexity of a token-level NLL: ``update(nll, weight=tokens)`` with a batch's mean
    NLL per target token and its number of tokens; ``compute()`` -> ``exp(mean NLL)`` over all
    the tokens (the mean capped at 50, where the exponential is astronomical anyway)."""

    def compute(self) -> torch.Tensor:
        return super().compute().clamp(max=50.0).exp()



class AttentionSparsity(MeanMetric):
    """The share (%) of exactly zero attention weights among the real (target token, source
    token) pairs: ``update(weights [B, T, S], allowed)`` with bool ``allowed`` broadcastable to
    ``weights`` (True = a real target token and a real source token)."""

    def update(self, weights: torch.Tensor, allowed: torch.Tensor) -> None:  # type: ignore[override]
        allowed = allowed.expand(weights.shape)
        total = allowed.sum()
        if int(total):
            zeros = ((weights == 0) & allowed).sum()
            super().update(100.0 * zeros / total, weight=total)
