"""REP, DROP, BLEU and chrF on hand-computed examples; the DROP score's word alignments on a
generated corpus."""

from __future__ import annotations

import pytest

from lit_structattn.datamodules.translation import read_parallel
from lit_structattn.metrics.translation import bleu_chrf, drop_alignments, drop_score, rep_score

from .translation_corpus import write_corpus


def test_rep_score_counts_repeats_beyond_the_reference():
    hyp = "the cat sat on the the mat the mat".split()
    ref = "the cat sat on the mat".split()
    # bigrams with count >= 2 in hyp: (the, mat) 2 vs 1 in ref -> 1; the repeated word
    # (the, the): 1 vs 0 in ref -> lambda2 * 1 = 2. Total 3 over 6 reference words.
    assert rep_score([hyp], [ref]) == pytest.approx(100 * 3 / 6)


def test_rep_score_ignores_repeats_the_reference_has_and_sums_over_sentences():
    hyp = ["very very good".split(), "a b a b".split()]
    ref = ["very very good".split(), "a b c".split()]
    # sentence 1: (very, very) appears once in both -> 0. Sentence 2: (a, b) 2 vs 1 -> 1.
    assert rep_score(hyp, ref) == pytest.approx(100 * 1 / 6)
    assert rep_score(hyp, ref, lambda1=0.0) == 0.0
    assert rep_score([["x", "x", "x"]], [["y"]], lambda1=0, lambda2=1) == pytest.approx(200)


def test_drop_score():
    reference = [{(0, 0), (1, 1), (2, 2)}, {(0, 1), (1, 0)}]
    hypothesis = [{(0, 0), (2, 1)}, {(0, 0), (1, 1), (3, 2)}]
    # sentence 1 drops source word 1; sentence 2 drops nothing (word 3 is not in the reference)
    assert drop_score(reference, hypothesis) == pytest.approx(100 * 1 / 5)


def test_bleu_chrf_and_signatures():
    refs = ["A man is riding a bike.", "Two dogs play in the snow."]
    scores = bleu_chrf(refs, refs)
    assert scores["bleu"] == pytest.approx(100) and scores["chrf"] == pytest.approx(100)
    assert "nrefs:1" in scores["bleu_signature"] and "case:mixed" in scores["bleu_signature"]
    assert bleu_chrf(["A man rides.", "Dogs."], refs)["bleu"] < 50


def test_bad_inputs():
    with pytest.raises(ValueError, match="1 hypotheses/alignments but 2 references"):
        rep_score([["a"]], [["a"], ["b"]])
    with pytest.raises(ValueError, match="no words"):
        rep_score([["a"]], [[]])
    with pytest.raises(ValueError, match="no source word"):
        drop_score([set()], [{(0, 0)}])


def test_drop_alignments_link_sources_to_references_and_hypotheses(tmp_path):
    """One eflomal run over train + test: a hypothesis identical to its reference drops
    (almost) nothing; an empty one all."""
    write_corpus(tmp_path, gz=False)
    words = [(s.lower().split(), t.lower().split()) for s, t in
             read_parallel(tmp_path / "train.de", tmp_path / "train.en")]
    test = [(s.lower().split(), t.lower().split()) for s, t in
            read_parallel(tmp_path / "test.de", tmp_path / "test.en")]
    sources, references = [s for s, _ in test], [t for _, t in test]
    hypotheses = [*references[:20], *[[]] * 20]
    to_reference, to_hypothesis = drop_alignments(words, sources, references, hypotheses)
    assert len(to_reference) == len(to_hypothesis) == 40
    assert all(to_reference) and not any(to_hypothesis[20:])
    # eflomal samples without a settable seed: identical pairs drop 0-4% of their words
    # (8 runs), rarely more on this tiny corpus
    assert drop_score(to_reference[:20], to_hypothesis[:20]) < 10
    assert drop_score(to_reference[20:], to_hypothesis[20:]) == 100
    with pytest.raises(ValueError, match="39 hypotheses/alignments but 40 references"):
        drop_alignments(words, sources, references, hypotheses[1:])
