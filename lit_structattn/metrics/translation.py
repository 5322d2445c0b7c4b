"""Corpus-level translation metrics of Malaviya et al. (2018), §5: sacreBLEU and chrF (with their
signatures), the REP score (repetitions) and the DROP score (dropped source words), with the
word alignments the DROP score needs (:func:`drop_alignments`, eflomal through
:func:`lit_structattn.datamodules.alignment.align`).

These score whole corpora of finished translations (lists of strings or token lists), so they
are plain functions, run once on rank 0 after decoding, not torchmetrics states.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ..datamodules.alignment import Links, align

__all__ = ["bleu_chrf", "drop_alignments", "drop_score", "rep_score"]

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
