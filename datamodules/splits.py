"""The dataloader hooks every DataModule of the project shares."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

import lightning as L
from torch.utils.data import DataLoader

from .batching import bucketed_loader

T = TypeVar("T")


def hold_out(items: Sequence[T], fraction: float, seed: int) -> tuple[list[T], list[T]]:
    """``(kept, held_out)``: ``round(fraction * len(items))`` items drawn at random with
    ``seed`` (a validation split carved from a training or dev set), both in their original
    order."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    chosen = set(order[: round(fraction * len(items))])
    return ([x for i, x in enumerate(items) if i not in chosen],
            [x for i, x in enumerate(items) if i in chosen])


class SplitDataModule(L.LightningDataModule):
    """A DataModule with ``train``/``val``/``test`` splits served by one method,
    :meth:`_loader`; ``predict`` reads the test split.

    By default :meth:`_loader` serves length-bucketed batches of ``self.datasets[split]`` (a
    dataset with ``lengths``, built by ``setup``) through the subclass's ``collate`` function,
    with the hyper-parameters ``batch_size``, ``bucket_batches``, ``seed`` and ``num_workers``.
    """

    collate: Callable[[list], dict] | None = None

    def set_up(self) -> SplitDataModule:
        """This DataModule with its ``vocab``: :meth:`setup` runs now if it has not built it
        yet. The sizes the CLI links into the model (read before any setup) ask for it."""
        if getattr(self, "vocab", None) is None:
            self.setup("fit")
        return self

    def _batch_size(self, shuffle: bool) -> int:
        """Sentences per batch (``shuffle``: for training)."""
        return self.hparams.batch_size

    def _loader(self, split: str, shuffle: bool = False) -> DataLoader:
        """Length-bucketed batches (:class:`~datamodules.batching.BucketBatchSampler`): training
        batches in random order, evaluation batches from the whole split, shortest first."""
        if not getattr(self, "datasets", None):
            raise RuntimeError("call setup() before asking for a dataloader")
        h, data = self.hparams, self.datasets[split]
        return bucketed_loader(data, data.lengths, self.collate,
                               batch_size=self._batch_size(shuffle),
                               bucket_batches=h.bucket_batches, shuffle=shuffle, seed=h.seed,
                               num_workers=h.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test")
