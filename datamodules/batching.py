"""Length-bucketed batching that stays DDP-aware.

:class:`BucketBatchSampler` is a ``BatchSampler`` over any index sampler: it takes
``bucket_batches`` batches' worth of indices from the sampler, sorts them by length, cuts them
into batches and yields those in random order. Under DDP, Lightning re-creates it around a
``DistributedSampler`` (it subclasses ``BatchSampler`` and takes the sampler as its first
argument), so each process buckets its own shard: in training all processes see the same number
of batches; in evaluation each sees its :class:`EvaluationShard`, every example exactly once
(no padding repeats for the metrics to count).

The training order is a function of the seeds and the epoch alone (:class:`EpochShuffle`, the
DataLoader's own generator): no draw from torch's global random state, so a run resumed from a
checkpoint sees the batches an uninterrupted run would, and
:meth:`BucketBatchSampler.skip_batches` resumes an epoch where it stopped.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    Sampler,
    SequentialSampler,
)


class EncodedItems(Dataset):
    """A split of encoded examples: ``items[i]`` is a tuple whose first element is the source
    ids; the batches are bucketed by :attr:`lengths`. Subclasses fill ``items``."""

    items: list[tuple]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple:
        return self.items[index]

    @property
    def lengths(self) -> list[int]:
        """Source length of every item (what the batches are bucketed by)."""
        return [len(item[0]) for item in self.items]


def seq2seq_batch(
    src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], bos: int, eos: int,
    **extra: Sequence[int],
) -> dict[str, torch.Tensor]:
    """The encoder-decoder batch layout (padding id 0, each tensor trimmed to its longest row):
    ``src [B, S]``, ``src_lengths [B]``, ``tgt_in [B, T]`` (``bos`` + target), ``tgt_out [B, T]``
    (target + ``eos``), ``tgt_lengths [B]`` (target length + 1) and one ``[B]`` tensor per
    ``extra`` keyword."""
    src_lengths = [len(s) for s in src]
    tgt_lengths = [len(t) + 1 for t in tgt]
    width = max(tgt_lengths)
    return {
        "src": torch.tensor(pad_rows(src, max(src_lengths))),
        "src_lengths": torch.tensor(src_lengths),
        "tgt_in": torch.tensor(pad_rows([[bos, *t] for t in tgt], width)),
        "tgt_out": torch.tensor(pad_rows([[*t, eos] for t in tgt], width)),
        "tgt_lengths": torch.tensor(tgt_lengths),
        **{name: torch.tensor(list(values)) for name, values in extra.items()},
    }


def pad_rows(rows: Sequence[Sequence[Any]], width: int, value: Any = 0) -> list[list[Any]]:
    """Every row extended with ``value`` to ``width`` entries (rows are not cut; ``value`` may
    itself be a padding row, for nested lists)."""
    return [[*row] + [value] * (width - len(row)) for row in rows]


class EpochShuffle(Sampler[int]):
    """The indices ``0 .. size-1`` in an order drawn from ``seed`` and the epoch
    (``set_epoch``, which Lightning calls every epoch) only."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.size, generator=generator).tolist())

    def __len__(self) -> int:
        return self.size


class EvaluationShard(DistributedSampler):
    """One process's share of an evaluation split under DDP: indices ``rank, rank + n,
    rank + 2n, ...`` of the ``n`` processes, so that every example is evaluated exactly once.
    The ``DistributedSampler`` that Lightning puts in place pads the shares to equal sizes
    with repeats, which the metrics would count; shares here differ by at most one example.

    Args:
        padded: that ``DistributedSampler`` (its dataset, ``num_replicas`` and ``rank``).
    """

    def __init__(self, padded: DistributedSampler) -> None:
        super().__init__(padded.dataset, num_replicas=padded.num_replicas, rank=padded.rank,
                         shuffle=False)
        self.total_size = len(self.dataset)
        self.num_samples = len(range(self.rank, self.total_size, self.num_replicas))

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.total_size, self.num_replicas))


class BucketBatchSampler(BatchSampler):
    """Batches of indices of similar length.

    Args:
        sampler: yields dataset indices (a ``RandomSampler``, ``SequentialSampler`` or, under
            DDP, the ``DistributedSampler`` Lightning puts in its place; for evaluation
            (``shuffle=False``) that one is replaced by its :class:`EvaluationShard`).
        batch_size, drop_last: as for ``BatchSampler``.
        lengths: the length of every dataset item (indexable by the sampler's indices).
        bucket_batches: how many batches are sorted together (1 = no bucketing).
        shuffle: yield the batches of a bucket in random order, drawn from ``seed`` and the
            epoch of ``sampler`` (its ``epoch`` attribute, 0 if it has none).
        seed: base seed of that order.
    """

    def __init__(
        self,
        sampler: Sampler[int] | Sequence[int],
        batch_size: int,
        drop_last: bool,
        lengths: Sequence[int] = (),
        bucket_batches: int = 50,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if not shuffle and type(sampler) is DistributedSampler:  # Lightning's, padded
            sampler = EvaluationShard(sampler)
        super().__init__(sampler, batch_size, drop_last)
        if bucket_batches < 1:
            raise ValueError(f"bucket_batches must be >= 1, got {bucket_batches}")
        self.lengths = lengths
        self.bucket_batches = bucket_batches
        self.shuffle = shuffle
        self.seed = seed
        self._skip = 0

    def skip_batches(self, count: int) -> None:
        """Leave out the first ``count`` batches of the next pass (only that one): a run
        resumed in the middle of an epoch continues with the batch it would have seen next."""
        self._skip = count

    def __iter__(self) -> Iterator[list[int]]:
        skip, self._skip = self._skip, 0
        for position, batch in enumerate(self._all_batches()):
            if position >= skip:
                yield batch

    def _all_batches(self) -> Iterator[list[int]]:
        rng = random.Random(self.seed + getattr(self.sampler, "epoch", 0))
        bucket: list[int] = []
        for index in self.sampler:
            bucket.append(index)
            if len(bucket) == self.batch_size * self.bucket_batches:
                yield from self._batches(bucket, rng)
                bucket = []
        if bucket:
            yield from self._batches(bucket, rng)

    def _batches(self, bucket: list[int], rng: random.Random) -> Iterator[list[int]]:
        ordered = sorted(bucket, key=lambda i: self.lengths[i])
        size = self.batch_size
        batches = [ordered[i : i + size] for i in range(0, len(ordered), size)]
        if self.drop_last and len(batches[-1]) < self.batch_size:
            batches.pop()
        if self.shuffle:
            rng.shuffle(batches)
        yield from batches

    def __len__(self) -> int:
        return super().__len__()


def bucketed_loader(
    dataset: Dataset, lengths: Sequence[int], collate_fn, *, batch_size: int,
    bucket_batches: int, shuffle: bool, seed: int, num_workers: int = 0,
    pin_memory: bool = False, persistent_workers: bool = False,
) -> DataLoader:
    """The DataLoader every DataModule here uses: training (``shuffle``) batches are bucketed by
    ``lengths`` ``bucket_batches`` at a time and come in random order; evaluation batches are
    drawn from the whole split sorted by length (shortest first).

    The training order depends on ``seed``, the run's seed (``torch.initial_seed()``, which
    ``seed_everything`` sets) and the epoch, and on nothing else. ``num_workers``,
    ``pin_memory`` and ``persistent_workers`` go to the DataLoader."""
    seed = run_seed(seed)
    indices = EpochShuffle(len(dataset), seed) if shuffle else SequentialSampler(dataset)
    batches = BucketBatchSampler(
        indices, batch_size, drop_last=False, lengths=lengths,
        bucket_batches=bucket_batches if shuffle else max(1, len(dataset)),
        shuffle=shuffle, seed=seed,
    )
    return DataLoader(dataset, batch_sampler=batches, num_workers=num_workers,
                      pin_memory=pin_memory, persistent_workers=persistent_workers,
                      collate_fn=collate_fn, generator=torch.Generator().manual_seed(seed))


def run_seed(seed: int) -> int:
    """``seed`` combined with the run's seed (``torch.initial_seed()``) into one seed."""
    return (torch.initial_seed() * 1_000_003 + seed) % 2**62
