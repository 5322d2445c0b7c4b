"""A fit whose training loss stops being a number ends at once, naming the step.

Problem: a loss that becomes NaN or infinite (a learning rate too high, a log of 0) makes every
later step NaN as well; the fit runs on to its last epoch and its checkpoints, metrics and
figures are worthless, and nothing says where it went wrong. A loss that grows far above where
it started is often the first sign of it.

Method: :class:`FiniteLoss` (every trainer of the ``structattn`` CLI has one) keeps the loss of
each training batch (the ``loss`` that ``training_step`` returned, detached) and reads the kept
values in one go at each check:

* on the CPU, after every batch (reading a CPU tensor costs nothing);
* on an accelerator, every ``trainer.log_every_n_steps`` batches and at the end of each epoch,
  where logging already waits for the device: no host-device synchronisation per step. The
  values kept in between still give the exact step of the first bad loss.

Contract: the first loss that is NaN or infinite raises :class:`NonFiniteLoss` (a
``ValueError``: ``structattn`` prints its one line and exits with status 2) naming its global
step, epoch and batch. The first loss more than :data:`GROWTH` times the first loss checked
(when that one is positive) warns once. Under DDP every process stops at the same check.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn

#: How many times its first value a loss may grow before :class:`FiniteLoss` warns.
GROWTH = 100.0


class NonFiniteLoss(ValueError):
    """A training loss that is NaN or infinite; the message says where (``where``, e.g.
    ``"nan at step 12 (epoch 0, batch 11)"``) and what to try."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"the training loss became {where}; the fit is stopped. Try a lower learning "
            "rate (optimizer lr), gradient clipping (--trainer.gradient_clip_val) or full "
            "precision (--trainer.precision 32)")


class FiniteLoss(L.Callback):
    """Stop a fit at the first NaN or infinite training loss and warn once when the loss grows
    :data:`GROWTH` times above its first value (see the module's docstring).

    Args:
        every_n_batches: read the kept losses every this many training batches (and at the end
            of each epoch); None (the default): after every batch on the CPU, every
            ``trainer.log_every_n_steps`` batches on an accelerator.
    """

    def __init__(self, every_n_batches: int | None = None) -> None:
        self.every_n_batches = every_n_batches
        self._kept: list[tuple[torch.Tensor, int, int, int]] = []  # (loss, step, epoch, batch)
        self._first: float | None = None
        self._warned = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._kept, self._first, self._warned = [], None, False

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):
            self._kept.append((loss.detach().float().reshape(-1)[:1], trainer.global_step,
                               trainer.current_epoch, batch_idx))
        every = self.every_n_batches
        if every is None:
            on_cpu = not self._kept or self._kept[-1][0].device.type == "cpu"
            every = 1 if on_cpu else trainer.log_every_n_steps
        if len(self._kept) >= every:
            self._check(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._check(trainer)

    def _check(self, trainer: L.Trainer) -> None:
        """Read the kept losses (one transfer), raise at the first bad one (on every process
        when any has one), warn at the first grown one."""
        bad = None
        if self._kept:
            values = torch.cat([loss for loss, *_ in self._kept]).tolist()
            losses = [(value, *place) for value, (_, *place) in zip(values, self._kept,
                                                                    strict=True)]
            self._kept = []
            bad = next((f"{value} at {_place(*place)}" for value, *place in losses
                        if not math.isfinite(value)), None)
            self._watch_growth(losses)
        if trainer.world_size > 1 and trainer.strategy.reduce_boolean_decision(
                bad is not None, all=False) and bad is None:
            bad = ("NaN or infinite in another process by "
                   f"{_place(trainer.global_step, trainer.current_epoch, None)}")
        if bad is not None:
            raise NonFiniteLoss(bad)

    def _watch_growth(self, losses: list[tuple[float, int, int, int]]) -> None:
        """Warn (once) at the first of ``losses`` ``(value, step, epoch, batch)`` above
        :data:`GROWTH` times the first loss checked, when that one is positive."""
        if self._first is None:
            self._first = losses[0][0]
        if self._warned or not self._first > 0:
            return
        grown = next((loss for loss in losses
                      if math.isfinite(loss[0]) and loss[0] > GROWTH * self._first), None)
        if grown is not None:
            self._warned = True
            rank_zero_warn(f"the training loss grew from {self._first:.4g} (its first value) to "
                           f"{grown[0]:.4g} at {_place(*grown[1:])}, over {GROWTH:g} times: the "
                           "fit may be diverging (a lower learning rate may help)")


def _place(step: int, epoch: int, batch: int | None) -> str:
    """``step S (epoch E, batch B)``: the global step after the batch, and where it was."""
    return f"step {step} (epoch {epoch}" + ("" if batch is None else f", batch {batch}") + ")"
