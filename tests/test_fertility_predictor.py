"""The PREDICTED fertility tagger: targets from links, masking, the expected fertility, and a
loss that falls on a learnable toy mapping."""

from __future__ import annotations

import pytest
import torch

from lit_structattn.models.fertility import (
    FertilityPredictor,
    fertility_targets,
    fit_fertility_predictor,
    predict_fertilities,
)


def test_targets_count_links_per_source_token_and_cap():
    links = [{(0, 0), (0, 1), (2, 2)}, {(1, j) for j in range(12)}]
    assert fertility_targets(links, [3, 2], classes=10) == [[2, 0, 1], [0, 9]]
    with pytest.raises(ValueError, match="2 link sets but 1 source lengths"):
        fertility_targets(links, [3])


def test_expected_fertility_is_the_mean_class_plus_slack_and_zero_at_padding():
    torch.manual_seed(0)
    model = FertilityPredictor(20, embed_dim=8, hidden_dim=8, classes=4).eval()
    src = torch.tensor([[3, 4, 5], [6, 7, 0]])
    lengths = torch.tensor([3, 2])
    expected = model.expected(src, lengths)
    probabilities = model(src, lengths).softmax(-1)
    manual = (probabilities * torch.arange(4.0)).sum(-1) + 1
    torch.testing.assert_close(expected[0], manual[0])
    assert expected[1, 2] == 0 and (expected[1, :2] >= 1).all()


def test_fit_learns_word_dependent_fertilities_and_predicts_in_input_order():
    """Token id t has fertility t % 3 in sentences of 2..7 tokens: after training, the
    expected fertility (+ slack 1) of every token is close to t % 3 + 1."""
    rng = torch.Generator().manual_seed(1)
    sources = [torch.randint(1, 12, (int(n),), generator=rng).tolist()
               for n in torch.randint(2, 8, (96,), generator=rng)]
    targets = [[t % 3 for t in source] for source in sources]
    model = fit_fertility_predictor(sources, targets, 12, epochs=40, batch_size=16, lr=0.02,
                                    embed_dim=16, hidden_dim=16, num_layers=1, dropout=0.0,
                                    classes=3)
    assert not model.training
    predicted = predict_fertilities(model, sources, slack=1.0, batch_size=7)
    assert [len(p) for p in predicted] == [len(s) for s in sources]
    errors = [abs(p - (t % 3 + 1)) for source, row in zip(sources, predicted, strict=True)
              for t, p in zip(source, row, strict=True)]
    assert max(errors) < 0.3


def test_fit_refuses_targets_that_do_not_match_the_sources():
    with pytest.raises(ValueError, match="one fertility target per token"):
        fit_fertility_predictor([[3, 4]], [[1]], 10, epochs=1)
    with pytest.raises(ValueError, match="one fertility target per token"):
        fit_fertility_predictor([[3, 4]], [], 10, epochs=1)
