"""The PREDICTED fertility tagger: targets from links, masking, the expected fertility, a
loss that falls on a learnable toy mapping, and its training by the application (trained once
per corpus, cached, its predictions given to the data)."""

from __future__ import annotations

import pytest
import torch

from lit_structattn.datamodules.translation import TranslationDataModule
from lit_structattn.models.fertility import FertilityPredictor
from lit_structattn.prepare.fertility import (
    fertility_targets,
    fit_fertility_predictor,
    give_predicted_fertilities,
    predict_fertilities,
    predictor_file,
    train_fertility_predictor,
)

from .translation_corpus import write_corpus


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


def test_fit_follows_its_own_seed_and_leaves_the_global_random_state_alone():
    """Dropout included: the predictor does not depend on the global random state and does not
    advance it, so a run that trains it continues as one that finds it cached."""
    sources = [[1, 2, 3], [4, 5], [6, 7, 8, 9]] * 4
    targets = [[t % 2 for t in source] for source in sources]
    fitted = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        before = torch.random.get_rng_state()
        model = fit_fertility_predictor(sources, targets, 10, epochs=2, batch_size=4,
                                        embed_dim=4, hidden_dim=4, dropout=0.5, classes=2)
        assert torch.equal(torch.random.get_rng_state(), before)
        fitted.append(model.state_dict())
    assert all(torch.equal(fitted[0][k], fitted[1][k]) for k in fitted[0])


def test_fit_refuses_targets_that_do_not_match_the_sources():
    with pytest.raises(ValueError, match="one fertility target per token"):
        fit_fertility_predictor([[3, 4]], [[1]], 10, epochs=1)
    with pytest.raises(ValueError, match="one fertility target per token"):
        fit_fertility_predictor([[3, 4]], [], 10, epochs=1)


def test_the_application_trains_the_predictor_once_and_gives_its_fertilities(
        tmp_path, monkeypatch):
    """The predictor is trained on the data's training sources and links, stored beside the
    BPE model, read back by another process (loading draws nothing from the global random
    state), and its expected fertility + 1 of every source subword is given to the data."""
    write_corpus(tmp_path / "corpus")

    def data() -> TranslationDataModule:
        module = TranslationDataModule(
            data_dir=str(tmp_path / "corpus"), prefixes=("train", "val", "test"), bpe_size=60,
            cache_dir=str(tmp_path / "cache"), fertility_strategy="predicted", sink=True)
        module.prepare_data()
        return module

    first = data()
    path = train_fertility_predictor(first, epochs=1, log=lambda message: None)
    assert path == predictor_file(first, 1) and path.parent == tmp_path / "cache"
    assert path.name.endswith(".ep1.predictor")
    give_predicted_fertilities(first, epochs=1)
    assert not first.awaits_fertilities
    for src, _, _, fertility in first.datasets["val"].items:
        assert len(fertility) == len(src) and fertility[-1] == 1.0  # the sink's placeholder
        assert all(1.0 <= f <= 10.0 for f in fertility[:-1])  # E[class in 0..9] + 1

    def trains(*args, **kwargs):
        raise AssertionError("the cached predictor must be read")

    monkeypatch.setattr("lit_structattn.prepare.fertility.fit_fertility_predictor", trains)
    rank = data()
    state = torch.get_rng_state()
    give_predicted_fertilities(rank, epochs=1)
    assert torch.equal(torch.get_rng_state(), state)
    assert rank.datasets["test"].items == first.datasets["test"].items
