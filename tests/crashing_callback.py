"""A callback that kills the training process, for the interruption test (imported by the
``structattn`` subprocess through ``PYTHONPATH``)."""

from __future__ import annotations

import os

import lightning as L


class CrashAtEpoch(L.Callback):
    """Ends the process abruptly (no cleanup, like a kill) when training epoch ``epoch``
    starts, after the checkpoints of the epochs before it are written."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            os._exit(17)
