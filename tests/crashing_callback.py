"""Callbacks that kill or signal the training process, for the interruption tests (imported by
the ``structattn`` subprocess through ``PYTHONPATH``)."""

from __future__ import annotations

import os
import signal
import time

import lightning as L


class CrashAtEpoch(L.Callback):
    """Ends the process abruptly (no cleanup, like a kill) when training epoch ``epoch``
    starts, after the checkpoints of the epochs before it are written."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            os._exit(17)


class SignalAtStep(L.Callback):
    """Sends ``signal_name`` (``SIGINT``, ``SIGTERM``) to its own process when training step
    ``step`` ends, as Ctrl-C or a scheduler would, once per process; sleeps ``pause`` seconds
    after every step (for tests that signal from outside)."""

    def __init__(self, step: int = -1, signal_name: str = "SIGINT", pause: float = 0.0) -> None:
        self.step = step
        self.signal_name = signal_name
        self.pause = pause

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), getattr(signal, self.signal_name))
        time.sleep(self.pause)
