"""Tagging metrics against seqeval / scikit-style references and by hand."""

from __future__ import annotations

import random

import pytest
import torch
from seqeval.metrics import f1_score

from lit_structattn.metrics import EntityF1, F1Mult, FirstFocusShare, TokenAccuracy

TAGS = ["<pad>", "O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def pad(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.tensor([s + [0] * (width - len(s)) for s in sequences])
    return ids, torch.tensor([len(s) for s in sequences])


def test_token_accuracy_ignores_padding():
    pred, lengths = pad([[1, 2, 3], [1, 1]])
    gold, _ = pad([[1, 2, 1], [1, 4]])
    pred[1, 2] = 5  # padding: must not count
    metric = TokenAccuracy()
    metric.update(pred, gold, lengths)
    assert metric.compute().item() == pytest.approx(3 / 5)


@pytest.mark.parametrize("seed", range(5))
def test_entity_f1_matches_seqeval(seed):
    rng = random.Random(seed)
    gold_seqs = [[rng.randint(1, 5) for _ in range(rng.randint(1, 12))] for _ in range(30)]
    pred_seqs = [[t if rng.random() < 0.7 else rng.randint(1, 5) for t in g] for g in gold_seqs]
    metric = EntityF1(TAGS)
    for start in range(0, 30, 7):  # several batches, as during an epoch
        pred, lengths = pad(pred_seqs[start : start + 7])
        gold, _ = pad(gold_seqs[start : start + 7])
        metric.update(pred, gold, lengths)
    expected = f1_score([[TAGS[i] for i in g] for g in gold_seqs],
                        [[TAGS[i] for i in p] for p in pred_seqs])
    assert metric.compute().item() == pytest.approx(expected, abs=1e-6)


def test_entity_f1_by_hand():
    gold, lengths = pad([[2, 3, 1, 4]])  # PER(0-1), LOC(3)
    pred, _ = pad([[2, 1, 1, 4]])  # PER(0) wrong boundary, LOC(3) right
    metric = EntityF1(TAGS)
    metric.update(pred, gold, lengths)
    assert metric.compute().item() == pytest.approx(0.5)


def test_f1_mult_is_the_product_of_class_f1():
    ok, bad = 1, 2
    gold, lengths = pad([[ok, ok, bad, bad], [ok, bad]])
    pred, _ = pad([[ok, bad, bad, ok], [ok, bad]])
    metric = F1Mult(ok, bad)
    metric.update(pred, gold, lengths)
    f1_ok = 2 * 2 / (3 + 3)  # tp 2, predicted 3, gold 3
    f1_bad = 2 * 2 / (3 + 3)
    assert metric.compute().item() == pytest.approx(f1_ok * f1_bad)


def test_shape_errors():
    with pytest.raises(ValueError, match="need pred and gold"):
        TokenAccuracy().update(torch.zeros(2, 3, dtype=torch.long),
                               torch.zeros(2, 4, dtype=torch.long), torch.tensor([3, 3]))


def test_first_focus_share():
    attention = torch.zeros(3, 2, 4)
    attention[0, 0, 2] = attention[1, 0, 0] = 1.0  # sentence 2 takes no step
    gold = torch.tensor([[1, 1, 7, 1], [1, 7, 1, 0], [7, 1, 0, 0]])
    metric = FirstFocusShare(tag_id=7)
    metric.update(attention, gold, steps=torch.tensor([2, 2, 0]))
    assert metric.compute().item() == pytest.approx(0.5)


def test_first_focus_share_by_hand_as_the_paper_defines_it():
    """Martins & Kreutzer (2017), Section 5.1: "in 57% of the test sentences, the model focuses
    first on a verb". By hand, with UD tags: "I thought it was fine" (the first step's most
    attended word is "thought", VERB: counted), "It was fine" (the first step is spread, most on
    "was", which UD 2 tags AUX: not a VERB), "Go" (one word, VERB: counted); the share is of
    sentences, not words: 2 of 3. Later steps do not count."""
    tags = {"PRON": 1, "VERB": 2, "AUX": 3, "ADJ": 4}
    gold = torch.tensor([[1, 2, 1, 3, 4], [1, 3, 4, 0, 0], [2, 0, 0, 0, 0]])
    attention = torch.zeros(3, 2, 5)
    attention[0, 0] = torch.tensor([0.1, 0.5, 0.1, 0.2, 0.1])  # "thought"
    attention[0, 1] = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0])  # a later step: not counted
    attention[1, 0] = torch.tensor([0.3, 0.4, 0.3, 0.0, 0.0])  # "was"
    attention[1, 1] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    attention[2, 0, 0] = 1.0
    metric = FirstFocusShare(tag_id=tags["VERB"])
    metric.update(attention, gold, steps=torch.tensor([2, 2, 1]))
    assert metric.compute().item() == pytest.approx(2 / 3)
