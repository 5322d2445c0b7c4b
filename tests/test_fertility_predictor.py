"""The PREDICTED fertility tagger: targets from links, masking, the expected fertility, and a
loss that falls on a learnable toy mapping."""

from __future__ import annotations

import pytest
import torch

from lit_structattn.models.fertility import FertilityPredictor, fertility_targets


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


def test_learns_word_dependent_fertilities():
    """Token id t has fertility t % 3: the loss falls and the predictions become right."""
    torch.manual_seed(1)
    src = torch.randint(1, 12, (32, 6))
    lengths = torch.full((32,), 6)
    targets = src % 3
    model = FertilityPredictor(12, embed_dim=16, hidden_dim=16, num_layers=1, dropout=0.0,
                               classes=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    first = model.loss(src, lengths, targets).item()
    for _ in range(60):
        loss = model.loss(src, lengths, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.2 * first
    assert (model(src, lengths).argmax(-1) == targets).float().mean() > 0.95
