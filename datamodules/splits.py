"""What every DataModule of the project shares: the loader options (declared once, by
:class:`SplitDataModule`, whose subclasses take them as ``**kwargs``) and the dataloader
hooks."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

import lightning as L
from lightning.pytorch.accelerators import CUDAAccelerator
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


#: DataLoader workers on a GPU when a DataModule's ``num_workers`` is None
GPU_WORKERS = 2


def _check_int(name: str, value: object, low: int, optional: bool = False) -> None:
    """``ValueError`` unless ``value`` is an int >= ``low`` (or None, if ``optional``)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        none = "None or " if optional else ""
        raise ValueError(f"{name} must be {none}an int >= {low}, got {value!r}")


class SplitDataModule(L.LightningDataModule):
    """A DataModule with ``train``/``val``/``test`` splits served by one method,
    :meth:`_loader`; ``predict`` reads the test split.

    By default :meth:`_loader` serves length-bucketed batches of ``self.datasets[split]`` (a
    dataset with ``lengths``, built by ``setup``) through the subclass's ``collate`` function,
    with the loader options below. A subclass takes them as ``**kwargs`` and hands them to this
    constructor, which checks them and saves the hyper-parameters of the whole chain of
    constructors (the subclass's own arguments too): in a config they are the DataModule's
    own options (``--data.init_args.batch_size 16``).

    Args:
        batch_size: examples per training batch.
        eval_batch_size: examples per validation, test and predict batch (None: ``batch_size``;
            larger batches decode faster).
        bucket_batches: training batches sorted by length together (1 = no bucketing);
            evaluation batches are drawn from the whole split, sorted by length.
        num_workers: DataLoader worker processes (None: by device, :meth:`loader_options`).
        pin_memory: collate into pinned memory (None: on a GPU, :meth:`loader_options`).
        seed: base seed of the training batch order (with the epoch).
    """

    collate: Callable[[list], dict] | None = None

    def __init__(
        self,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        bucket_batches: int = 50,
        num_workers: int | None = None,
        pin_memory: bool | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        _check_int("batch_size", batch_size, 1)
        _check_int("eval_batch_size", eval_batch_size, 1, optional=True)
        _check_int("bucket_batches", bucket_batches, 1)
        _check_int("num_workers", num_workers, 0, optional=True)
        if pin_memory is not None and not isinstance(pin_memory, bool):
            raise ValueError(f"pin_memory must be None, true or false, got {pin_memory!r}")
        _check_int("seed", seed, 0)
        self.save_hyperparameters()  # collects the arguments of the subclasses' constructors

    def set_up(self) -> SplitDataModule:
        """This DataModule with its ``vocab``: :meth:`setup` runs now if it has not built it
        yet. The sizes the CLI links into the model (read before any setup) ask for it."""
        if getattr(self, "vocab", None) is None:
            self.setup("fit")
        return self

    def loader_options(self) -> dict:
        """``num_workers``, ``pin_memory`` and ``persistent_workers`` of the DataLoaders: the
        hyper-parameters where set, else by the trainer's device. On a GPU, 2 workers (kept
        between epochs) collate the next batches into pinned memory while the GPU computes;
        on the CPU the batches are collated in the training process (collating is cheap next
        to a step, and workers would take the cores the step uses)."""
        trainer = self.trainer
        on_gpu = trainer is not None and isinstance(trainer.accelerator, CUDAAccelerator)
        workers, pin = self.hparams.num_workers, self.hparams.pin_memory
        workers = (GPU_WORKERS if on_gpu else 0) if workers is None else workers
        return {"num_workers": workers, "pin_memory": on_gpu if pin is None else pin,
                "persistent_workers": workers > 0}

    def _batch_size(self, shuffle: bool) -> int:
        """Examples per batch (``shuffle``: for training)."""
        h = self.hparams
        return h.batch_size if shuffle else h.eval_batch_size or h.batch_size

    def _loader(self, split: str, shuffle: bool = False) -> DataLoader:
        """Length-bucketed batches (:class:`~.batching.BucketBatchSampler`): training
        batches in random order, evaluation batches from the whole split, shortest first."""
        if not getattr(self, "datasets", None):
            raise RuntimeError("call setup() before asking for a dataloader")
        h, data = self.hparams, self.datasets[split]
        return bucketed_loader(data, data.lengths, self.collate,
                               batch_size=self._batch_size(shuffle),
                               bucket_batches=h.bucket_batches, shuffle=shuffle, seed=h.seed,
                               **self.loader_options())

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test")
