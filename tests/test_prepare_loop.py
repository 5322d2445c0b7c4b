"""The side models' training loop (:func:`lit_structattn.prepare.loop.fit`) on a toy tagger:
the loss falls, the weights follow the seed alone, the global random states are left as they
were, and the batches are the length-bucketed ones, in a new order every epoch."""

from __future__ import annotations

import random
from functools import partial

import pytest
import torch
from torch import Tensor, nn

from lit_structattn.common.masks import lengths_to_mask
from lit_structattn.datamodules.batching import pad_rows
from lit_structattn.prepare.loop import fit, length_batches


class ToyTagger(nn.Module):
    """Tags every token id with ``id % 3``, with dropout so that training draws random
    numbers."""

    def __init__(self, dropout: float = 0.3) -> None:
        super().__init__()
        self.embed = nn.Embedding(12, 8, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(8, 3)

    def loss(self, ids: Tensor, lengths: Tensor, tags: Tensor) -> Tensor:
        scores = self.output(self.dropout(self.embed(ids)))
        mask = lengths_to_mask(lengths, ids.shape[1])
        return nn.functional.cross_entropy(scores[mask], tags[mask])


def examples(count: int = 60) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randint(1, 11) for _ in range(rng.randint(1, 9))] for _ in range(count)]


def collate(rows: list[list[int]], seen: list[list[int]] | None = None) -> dict[str, Tensor]:
    """The toy batch; the lengths of its rows are appended to ``seen``."""
    width = max(len(row) for row in rows)
    if seen is not None:
        seen.append([len(row) for row in rows])
    return {"ids": torch.tensor(pad_rows(rows, width)),
            "lengths": torch.tensor([len(row) for row in rows]),
            "tags": torch.tensor(pad_rows([[t % 3 for t in row] for row in rows], width))}


def train(rows: list[list[int]], epochs: int = 2, seed: int = 0, **options) -> ToyTagger:
    settings = {"collate": collate, "batch_size": 8, "clip_norm": 5.0,
                "optimizer": partial(torch.optim.Adam, lr=0.05), **options}
    return fit(ToyTagger, rows, lengths=[len(row) for row in rows], epochs=epochs, seed=seed,
               description="toy tagger", **settings)


def same_weights(first: nn.Module, second: nn.Module) -> bool:
    one, other = first.state_dict(), second.state_dict()
    return all(torch.equal(one[name], other[name]) for name in one)


def test_the_loss_falls_and_the_model_comes_back_in_eval_mode():
    losses = []
    model = train(examples(), epochs=15, after_epoch=lambda model, epoch, loss: losses.append(
        (epoch, model.training, loss)))
    assert [epoch for epoch, _, _ in losses] == list(range(1, 16))
    assert all(training for _, training, _ in losses)
    assert losses[-1][2] < 0.3 * losses[0][2]
    assert not model.training


def test_the_weights_follow_the_seed_and_not_the_global_random_state():
    rows = examples()
    fitted = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        random.seed(global_seed)
        fitted.append(train(rows, seed=3))
    assert same_weights(*fitted)
    assert not same_weights(fitted[0], train(rows, seed=4))


def test_the_global_random_states_are_left_as_they_were():
    torch.manual_seed(5)
    random.seed(5)
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    train(examples())
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert random.getstate() == python_state


def test_batches_are_the_length_bucketed_ones_in_a_new_order_every_epoch():
    """Every epoch sees every example once, in the batches of
    :func:`~lit_structattn.prepare.loop.length_batches` (sorted by length, then cut: the
    lengths of two batches overlap at most at one value), in another order."""
    rows = examples()
    seen: list[list[int]] = []
    train(rows, epochs=2, collate=partial(collate, seen=seen))
    per_epoch = len(length_batches([len(row) for row in rows], 8))
    assert per_epoch == 8 and len(seen) == 2 * per_epoch
    epochs = [seen[:per_epoch], seen[per_epoch:]]
    for batches in epochs:
        assert sorted(length for batch in batches for length in batch) == sorted(
            len(row) for row in rows)
        ranges = sorted((min(batch), max(batch)) for batch in batches)
        assert all(high <= low for (_, high), (low, _) in zip(ranges, ranges[1:], strict=False))
    assert sorted(epochs[0]) == sorted(epochs[1]) and epochs[0] != epochs[1]


def test_length_batches_sort_then_cut_with_ties_in_input_order():
    assert length_batches([3, 1, 2, 1, 3], 2) == [[1, 3], [2, 0], [4]]
    assert length_batches([4], 8) == [[0]]


def test_mismatched_or_missing_examples_are_refused():
    with pytest.raises(ValueError, match="3 examples but 2 lengths"):
        fit(ToyTagger, [[1], [2], [3]], lengths=[1, 1], collate=collate, epochs=1, batch_size=2,
            optimizer=torch.optim.Adam, clip_norm=1.0, seed=0, description="toy tagger")
    with pytest.raises(ValueError, match="no examples to train the toy tagger on"):
        train([])
