"""The one training loop of the side models (the fertility predictor, the parser).

Problem: a side model is trained once, in a preparation step, before the task's ``Trainer``
exists (``prepare_data`` on local rank 0, or a command line), and cached; a run that trains it
and a run that finds it in the cache must go on identically, so its training may neither depend
on nor advance the global random state.

Method: the examples are cut into batches of similar length once, by the project's own
:class:`~lit_structattn.datamodules.batching.BucketBatchSampler` (the whole set as one bucket:
sorted by length, then cut), and every epoch visits those batches in a new order drawn from a
local ``torch.Generator`` seeded with ``seed``; each step is the model's loss, a backward pass,
the gradient norm clipped and one optimizer step. The model is built and trained under
``torch.random.fork_rng`` with the CPU generator seeded with ``seed``, so its initialization
and its dropout follow ``seed`` alone. A progress bar shows each epoch and the last loss.

Contract: :func:`fit` returns the trained model in eval mode; the same arguments give the same
weights; ``torch``'s global random state (and Python's) is as it was before the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from ..datamodules.batching import BucketBatchSampler

Model = TypeVar("Model", bound=nn.Module)
Example = TypeVar("Example")


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Index batches of ``batch_size`` (the last one may be smaller) over items of ``lengths``:
    all items sorted by length (ties in input order), then cut
    (:class:`~lit_structattn.datamodules.batching.BucketBatchSampler` with one bucket)."""
    buckets = max(1, -(-len(lengths) // batch_size))
    return list(BucketBatchSampler(range(len(lengths)), batch_size, drop_last=False,
                                   lengths=lengths, bucket_batches=buckets, shuffle=False))


def fit(
    build: Callable[[], Model], examples: Sequence[Example], *, lengths: Sequence[int],
    collate: Callable[[list[Example]], dict[str, Tensor]], epochs: int, batch_size: int,
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer], clip_norm: float,
    seed: int, description: str,
    after_epoch: Callable[[Model, int, float], Any] | None = None,
) -> Model:
    """Train the model that ``build()`` makes on ``examples``.

    Args:
        build: makes the model (called once, under the seeded random state): an ``nn.Module``
            whose ``loss(**batch)`` is the scalar to minimize on a batch.
        examples: the training examples, any type ``collate`` takes a list of.
        lengths: the length of every example, what the batches are bucketed by.
        collate: a list of examples -> the keyword arguments of the model's ``loss``.
        epochs, batch_size: passes over ``examples``, examples per batch.
        optimizer: the model's parameters -> its optimizer (e.g.
            ``functools.partial(torch.optim.Adam, lr=1e-3)``).
        clip_norm: the largest gradient norm (all parameters together) of a step.
        seed: initialization, batch order and dropout.
        description: the progress bar's name of the model.
        after_epoch: called after each epoch with the model, the epoch (from 1) and the
            epoch's mean batch loss (the model is put back in training mode afterwards).

    Returns:
        The trained model, in eval mode.

    Raises:
        ValueError: ``examples`` and ``lengths`` differ in length, or there are no examples.
    """
    if len(examples) != len(lengths):
        raise ValueError(f"{len(examples)} examples but {len(lengths)} lengths")
    if not examples:
        raise ValueError(f"no examples to train the {description} on")
    from tqdm.auto import tqdm

    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        model = build()
        updates = optimizer(model.parameters())
        order = torch.Generator().manual_seed(seed)
        batches = length_batches(lengths, batch_size)
        for epoch in range(1, epochs + 1):
            model.train()
            shuffled = [batches[i] for i in torch.randperm(len(batches), generator=order)]
            bar = tqdm(shuffled, desc=f"{description}, epoch {epoch}/{epochs}", leave=False)
            total = 0.0
            for indices in bar:
                loss = _step(model, updates, collate([examples[i] for i in indices]), clip_norm)
                total += loss
                bar.set_postfix(loss=f"{loss:.3f}")
            if after_epoch is not None:
                after_epoch(model, epoch, total / len(batches))
    return model.eval()


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, Tensor],
          clip_norm: float) -> float:
    """One update on ``batch``: the model's loss, its gradient with the norm clipped to
    ``clip_norm``, an optimizer step; returns the loss."""
    loss = model.loss(**batch)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    return loss.item()
