"""REP, DROP, BLEU and chrF on hand-computed examples; the DROP score's word alignments on a
generated corpus; the scores as metric objects, updated batch by batch in any order, equal to
the functions of the ordered corpus."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch

from lit_structattn.datamodules.translation import read_parallel
from lit_structattn.metrics.translation import (
    BleuChrf,
    BleuPerSetting,
    DropScore,
    RepScore,
    TokenPerplexity,
    bleu_chrf,
    drop_alignments,
    drop_score,
    rep_score,
)

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
    """Malaviya et al. (2018), Section 5: "the percentage of source words that aligned with some
    word from the reference translation, but not with any word from the predicted translation"
    (their drop_score.py divides by the source words aligned to the reference). By hand:
    sentence 1 has source words 0, 1, 2 aligned to the reference and drops word 1; sentence 2
    has words 0 and 1 aligned (word 0 twice: it counts once) and drops nothing (its word 3 is
    aligned to the hypothesis only, and word 4 to nothing: neither counts). 1 dropped of 5."""
    reference = [{(0, 0), (1, 1), (2, 2)}, {(0, 1), (0, 2), (1, 0)}]
    hypothesis = [{(0, 0), (2, 1)}, {(0, 0), (1, 1), (3, 2)}]
    assert drop_score(reference, hypothesis) == pytest.approx(100 * 1 / 5)
    # a hypothesis aligned to nothing drops every aligned source word
    assert drop_score(reference, [set(), set()]) == pytest.approx(100.0)


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


REFERENCES = ["A man rides a horse.", "Two dogs run in the park.", "A woman reads.",
              "The children play football on the beach."]
HYPOTHESES = ["A man rides a horse.", "Two dogs run in a park park .", "A woman is reading.",
              "The children play on the beach beach ."]


def batches(*columns: list) -> list[tuple]:
    """The examples in two batches, out of order, the last shard padded with a repeat (as a
    DistributedSampler pads): ``(indices, *columns)`` each."""
    order = [[2, 0], [3, 1, 3]]
    return [(torch.tensor(part), *([column[i] for i in part] for column in columns))
            for part in order]


def test_corpus_metrics_score_the_ordered_corpus_once_per_example():
    bleu, rep = BleuChrf(), RepScore()
    words = [[w.lower() for w in h.split()] for h in HYPOTHESES]
    reference_words = [[w.lower() for w in r.split()] for r in REFERENCES]
    for batch in batches(HYPOTHESES, REFERENCES):
        bleu.update(*batch)
    for batch in batches(words, reference_words):
        rep.update(*batch)
    expected = bleu_chrf(HYPOTHESES, REFERENCES)
    assert bleu.compute() == {"bleu": expected["bleu"], "chrf": expected["chrf"]}
    assert bleu.signatures == {"BLEU": expected["bleu_signature"],
                               "chrF": expected["chrf_signature"]}
    assert rep.compute() == rep_score(words, reference_words) > 0
    bleu.reset()
    with pytest.raises(ValueError, match="no example to score"):
        bleu.compute()


def test_bleu_per_setting_scores_each_setting():
    search = BleuPerSetting()
    candidates = list(zip(HYPOTHESES, REFERENCES, strict=True))  # setting 1: the references
    for batch in batches(REFERENCES, candidates):
        search.update(*batch)
    worse, perfect = search.compute()
    assert worse == bleu_chrf(HYPOTHESES, REFERENCES)["bleu"] < perfect == pytest.approx(100)


def test_drop_score_aligns_with_its_context_once():
    """The aligner reads the context and the test pairs in one run (here a deterministic
    stand-in for eflomal), called when the score is computed."""
    from tests.golden import monotone_links

    sources = [["ein", "mann", "reitet"], ["zwei", "hunde"]]
    references = [["a", "man", "rides"], ["two", "dogs"]]
    hypotheses = [["a", "man", "rides"], []]
    context = [(["der", "park"], ["the", "park"])]
    drop = DropScore(iterations=3, context=lambda: context)
    for batch in batches(sources * 2, references * 2, hypotheses * 2):
        drop.update(*batch)
    aligner = "lit_structattn.metrics.translation.align"
    with mock.patch(aligner, side_effect=monotone_links) as align:
        value = drop.compute()
    assert align.call_count == 1 and align.call_args.args[1] == 3
    assert align.call_args.args[0][:1] == context
    assert value == pytest.approx(100 * 4 / 10)  # the empty hypotheses of 2 + 2 words


def test_token_perplexity_is_the_exponential_of_the_token_weighted_mean():
    perplexity = TokenPerplexity()
    perplexity.update(torch.tensor(2.0), weight=torch.tensor(3))
    perplexity.update(torch.tensor(1.0), weight=1)
    assert float(perplexity.compute()) == pytest.approx(math.exp(7 / 4))
    perplexity.update(torch.tensor(80.0), weight=100)
    assert float(perplexity.compute()) == pytest.approx(math.exp(50))
