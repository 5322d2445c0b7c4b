"""Synthetic data that the project generates itself (no files, no download).

``NeedleDataModule``: find-the-needle classification. Each sequence holds random tokens and one
marker token; the label is the token right after the marker. Solving it needs attention to a
single position whose place varies, so it exercises every attention transform. Deterministic
given ``seed``. A trained model reads raw sequences (token ids separated by spaces, one sequence
a line) with :class:`NeedleCodec`, at most ``max_tokens`` ids each (longer ones refused naming
``<source>:<line>``, or cut with ``length_policy="truncate"``; see :mod:`.limits`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import DataLoader, TensorDataset

from .batching import bucketed_loader, pad_rows
from .limits import BoundedCodec, LengthLimit, limit_from_state
from .splits import SplitDataModule

MARKER = 1  # token id of the needle marker; 0 is padding
#: the default ``max_tokens`` (ids of one raw sequence; the generated ones hold ``max_len``)
MAX_TOKENS = 500


def make_needle_split(
    size: int, min_len: int, max_len: int, vocab_size: int, num_classes: int, seed: int
) -> TensorDataset:
    """``size`` examples: tokens ``[N, max_len]`` (0-padded), lengths ``[N]``, labels ``[N]``.

    Tokens are drawn from ``2 .. vocab_size - 1``; the marker sits at a uniform position before
    the last one, and the label is ``(next token - 2) % num_classes``.
    """
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (size,), generator=g)
    tokens = torch.randint(2, vocab_size, (size, max_len), generator=g)
    positions = (torch.rand(size, generator=g) * (lengths - 1)).long()
    rows = torch.arange(size)
    tokens[rows, positions] = MARKER
    labels = (tokens[rows, positions + 1] - 2) % num_classes
    tokens = tokens.masked_fill(torch.arange(max_len) >= lengths[:, None], 0)
    return TensorDataset(tokens, lengths, labels)


class NeedleCodec(BoundedCodec):
    """Raw token-id sequences for a trained needle classifier
    (:class:`~lit_structattn.common.codec.TextCodec`): examples are lists of ids, batches
    ``tokens [B, T]`` (0-padded), ``lengths [B]``, ``labels [B]`` (-1: none given) and
    ``index [B]``.

    Args:
        vocab_size: the model's token ids are ``1 .. vocab_size - 1`` (0 is padding).
        limit: the most ids of a sequence (default :data:`MAX_TOKENS`, refused), kept in
            :meth:`state`.
    """

    format = f"one sequence per line, token ids separated by spaces ({MARKER}: the marker): 5 1 7 3"

    def __init__(self, vocab_size: int, limit: LengthLimit | None = None) -> None:
        self.vocab_size = vocab_size
        self.limit = limit or LengthLimit(MAX_TOKENS, unit="ids")

    def state(self) -> dict:
        return {"vocab_size": self.vocab_size, **self.limit.state()}

    @classmethod
    def from_state(cls, state: dict) -> NeedleCodec:
        """The codec of :meth:`state`; a state saved without the limit gets the default."""
        return cls(state["vocab_size"], limit_from_state(state, MAX_TOKENS, "ids"))

    def read(self, line: str) -> list[int]:
        """The token ids of a line within ``limit``; ``ValueError`` naming the tokens that are
        not ids in ``1 .. vocab_size - 1``, or for too many."""
        tokens = line.split()
        outside = [t for t in tokens if not (t.isdecimal() and 0 < int(t) < self.vocab_size)]
        if outside:
            raise ValueError(f"token ids outside 1..{self.vocab_size - 1}: {' '.join(outside)}")
        return self.limit.cut(([int(t) for t in tokens],), "sequence")[0]

    def batch(self, examples: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        """``tokens [B, T]`` (0-padded), ``lengths [B]``, ``labels [B]`` (-1) and ``index [B]``."""
        lengths = [len(tokens) for tokens in examples]
        return {"tokens": torch.tensor(pad_rows(examples, max(lengths))),
                "lengths": torch.tensor(lengths), "labels": torch.full((len(examples),), -1),
                "index": torch.arange(len(examples))}


class NeedleDataModule(SplitDataModule):
    """Find-the-needle classification (see module docstring).

    Batches are dicts: ``tokens [B, T]`` long (0 = padding), ``lengths [B]``, ``labels [B]``.
    ``max_tokens`` and ``length_policy`` bound the raw sequences of the trained model
    (:class:`NeedleCodec`); ``max_len`` must not exceed ``max_tokens``. ``seed`` draws the
    sequences too; it and the other loader options (``**loader``: ``batch_size``, ...) are those
    of :class:`~.splits.SplitDataModule`.
    """

    def __init__(
        self,
        num_train: int = 2000,
        num_val: int = 200,
        num_test: int = 200,
        min_len: int = 5,
        max_len: int = 20,
        vocab_size: int = 20,
        num_classes: int = 5,
        max_tokens: int = MAX_TOKENS,
        length_policy: str = "error",
        **loader,
    ) -> None:
        super().__init__(**loader)
        if not 2 <= min_len <= max_len:
            raise ValueError(f"need 2 <= min_len <= max_len, got {min_len}, {max_len}")
        self.limit = LengthLimit(max_tokens, length_policy, "ids")
        if max_len > max_tokens:
            raise ValueError(f"max_len={max_len} exceeds max_tokens={max_tokens}: the "
                             "generated sequences must fit the limit")
        if vocab_size < 3 or num_classes < 2:
            raise ValueError("need vocab_size >= 3 and num_classes >= 2")

    @property
    def vocab_size(self) -> int:
        """Token ids ``0 .. vocab_size - 1`` (0 = padding), for the model (linked by the CLI)."""
        return self.hparams.vocab_size

    @property
    def num_classes(self) -> int:
        """Labels ``0 .. num_classes - 1``, for the model (linked by the CLI)."""
        return self.hparams.num_classes

    def setup(self, stage: str | None = None) -> None:
        h = self.hparams
        args = (h.min_len, h.max_len, h.vocab_size, h.num_classes)
        self.splits = {
            name: make_needle_split(size, *args, seed=h.seed * 3 + offset)
            for offset, (name, size) in enumerate(
                [("train", h.num_train), ("val", h.num_val), ("test", h.num_test)]
            )
        }

    def text_codec(self) -> NeedleCodec:
        """What a trained model keeps to read raw sequences (its checkpoint saves it)."""
        return NeedleCodec(self.hparams.vocab_size, self.limit)

    def _loader(self, split: str, shuffle: bool = False) -> DataLoader:
        """Training batches in an order drawn from the seeds and the epoch only (resumable
        mid-epoch); evaluation batches sorted by length."""
        data, h = self.splits[split], self.hparams
        return bucketed_loader(data, data.tensors[1].tolist(), _as_dict,
                               batch_size=self._batch_size(shuffle),
                               bucket_batches=h.bucket_batches, shuffle=shuffle, seed=h.seed,
                               **self.loader_options())


def _as_dict(items: list[tuple[torch.Tensor, ...]]) -> dict[str, torch.Tensor]:
    tokens, lengths, labels = (torch.stack(column) for column in zip(*items, strict=True))
    return {"tokens": tokens[:, : int(lengths.max())], "lengths": lengths, "labels": labels}
