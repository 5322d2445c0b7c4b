"""What a run prints while it runs: where it writes, where it stands, what it scores.

Every run says its folder (and the checkpoint it resumes from or evaluates) when a stage starts
(:class:`RunHeadlines`). A fit prints one line per epoch that stays on the screen: the epoch's
mean training loss, the validation metrics (``val/loss``, the monitored ``val/score`` and the
task's named metrics), the epoch's time and an estimate of the time left (:class:`EpochLines`).

The progress between those lines depends on where stdout goes (:func:`progress_bar`): in a
terminal, Lightning's TQDM bar (:class:`EpochBar`); elsewhere (stdout piped to a file,
``make demo | tee``, a batch job), where a bar is one endless line that a log shows only at the
end, a plain line every ``every_seconds`` during a loop (:class:`PlainProgress`), so a log
grows at a steady rate however long an epoch takes.
"""

from __future__ import annotations

import sys
import time

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from lightning.pytorch.trainer.states import TrainerFn
from tqdm import tqdm


def say(text: str) -> None:
    """Print ``text`` as a line of stdout, now, above any progress bar."""
    tqdm.write(text, file=sys.stdout)
    sys.stdout.flush()


def duration(seconds: float) -> str:
    """``0.4 s``, ``42 s``, ``5.2 min`` or ``1.3 h``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def fraction_done(trainer: L.Trainer, epochs_done: int) -> float | None:
    """How much of the fit is done after ``epochs_done`` epochs and ``trainer.global_step``
    steps, by the nearer of its limits ``max_epochs`` and ``max_steps`` (None without one)."""
    parts = []
    if trainer.max_epochs is not None and trainer.max_epochs > 0:
        parts.append(epochs_done / trainer.max_epochs)
    if trainer.max_steps is not None and trainer.max_steps > 0:
        parts.append(trainer.global_step / trainer.max_steps)
    return min(max(parts), 1.0) if parts else None


def epoch_name(trainer: L.Trainer) -> str:
    """``epoch 3/8`` for the epoch under way (counted from 1), ``epoch 3`` without
    ``max_epochs``."""
    limit = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
    return f"epoch {trainer.current_epoch + 1}" + (f"/{limit}" if limit else "")


def scalar_metrics(trainer: L.Trainer, prefix: str) -> dict[str, float]:
    """The logged metrics named ``prefix...`` that hold one number, by name."""
    return {name: float(value) for name, value in sorted(trainer.callback_metrics.items())
            if name.startswith(prefix) and getattr(value, "numel", lambda: 1)() == 1}


class RunHeadlines(L.Callback):
    """One line when a stage starts (rank 0): ``fit: run folder DIR`` and, for a resumed fit,
    the checkpoint and the epoch and step it resumes at; ``test: run folder DIR, checkpoint
    FILE`` (likewise ``validate`` and ``predict``). When a fit ends: the best checkpoint and
    score of its first ModelCheckpoint (its latest checkpoint if it monitors nothing). The run
    folder is where the logger writes (``trainer.log_dir``: ``<root>/lightning_logs/
    version_<n>`` for TensorBoard)."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        resumed = (f"\nRestored all states from the checkpoint at {trainer.ckpt_path}: resuming "
                   f"at epoch {trainer.current_epoch}, step {trainer.global_step}"
                   if trainer.ckpt_path else "")
        self._announce(trainer, "fit", resumed)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.VALIDATING:  # not the validation within a fit
            self._announce(trainer, "validate", self._weights(trainer))

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._announce(trainer, "test", self._weights(trainer))

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._announce(trainer, "predict", self._weights(trainer))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        best = trainer.checkpoint_callback
        if not trainer.is_global_zero or best is None or not best.best_model_path:
            return
        if best.monitor is None or best.best_model_score is None:
            say(f"fit: done; checkpoint {best.best_model_path}")
        else:
            say(f"fit: done; best checkpoint {best.best_model_path} "
                f"({best.monitor} {float(best.best_model_score):.4g})")

    @staticmethod
    def _weights(trainer: L.Trainer) -> str:
        return f", checkpoint {trainer.ckpt_path}" if trainer.ckpt_path else ""

    @staticmethod
    def _announce(trainer: L.Trainer, stage: str, more: str) -> None:
        folder = trainer.log_dir  # every process: a broadcast under DDP
        if trainer.is_global_zero:
            say(f"{stage}: run folder {folder}{more}")


class EpochLines:
    """The line of each training epoch (a mixin of the progress bars below), e.g.::

        epoch 3/8: train/loss 1.27, val/loss 1.102, val/score 0.545, val/accuracy 0.545;
        12 s, ETA 1.0 min

    ``train/loss`` is the mean over the epoch's batches of the logged training loss; the
    validation metrics show when the epoch validated. The ETA extrapolates the time this
    process has trained to the fit's nearer limit (``max_epochs`` or ``max_steps``); a fit
    that stops early (early stopping) ends before it.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._fit_started = self._epoch_started = 0.0
        self._done_at_start: float | None = None
        self._loss_sum, self._loss_batches, self._validated = 0.0, 0, False  # of the epoch

    def write(self, text: str) -> None:
        say(text)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._fit_started = time.perf_counter()
        self._done_at_start = fraction_done(trainer, trainer.current_epoch)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._epoch_started = time.perf_counter()
        self._loss_sum, self._loss_batches, self._validated = 0.0, 0, False

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs,
                           batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        loss = trainer.callback_metrics.get("train/loss")
        if loss is not None:  # summed as a tensor: no wait for the device at every step
            self._loss_sum = self._loss_sum + loss
            self._loss_batches += 1

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_epoch_end(trainer, pl_module)
        self._validated = self._validated or not trainer.sanity_checking

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if trainer.is_global_zero:
            self.write(self.epoch_line(trainer))

    def epoch_line(self, trainer: L.Trainer) -> str:
        """The line of the epoch ``trainer.current_epoch`` as it ends."""
        metrics = {}
        if self._loss_batches:
            metrics["train/loss"] = float(self._loss_sum) / self._loss_batches
        if self._validated:
            validation = scalar_metrics(trainer, "val/")
            first = [name for name in ("val/loss", "val/score") if name in validation]
            metrics.update({name: validation[name] for name in first})
            metrics.update(validation)
        shown = ", ".join(f"{name} {value:.4g}" for name, value in metrics.items())
        now = time.perf_counter()
        timing = duration(now - self._epoch_started)
        done, start = fraction_done(trainer, trainer.current_epoch + 1), self._done_at_start
        if done is not None and start is not None and start < done < 1:
            left = (now - self._fit_started) * (1 - done) / (done - start)
            timing += f", ETA {duration(left)}"
        return f"{epoch_name(trainer)}: {shown}; {timing}"


class EpochBar(EpochLines, TQDMProgressBar):
    """Lightning's TQDM bar, with the line of each epoch above it (for a terminal)."""


class PlainProgress(EpochLines, ProgressBar):
    """Progress as plain lines (for stdout that is not a terminal): during a training,
    validation, test or prediction loop, one line every ``every_seconds`` (the loop, the share
    of its batches done, the batches per second), and the line of each epoch. The sanity check
    prints nothing.

    Args:
        every_seconds: the time between two lines of a loop.
    """

    def __init__(self, every_seconds: float = 30.0) -> None:
        super().__init__()
        self.every_seconds = every_seconds
        self._enabled = True
        self._loop_started = self._last_line = 0.0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def write(self, text: str) -> None:
        if self._enabled:
            say(text)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._start_loop()

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._start_loop()

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._start_loop()

    def on_predict_epoch_start(self, trainer, pl_module) -> None:
        self._start_loop()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self._due():
            loss = trainer.callback_metrics.get("train/loss")
            self._report(epoch_name(trainer), batch_idx + 1,
                         self.total_train_batches,
                         "" if loss is None else f", train/loss {float(loss):.4g}")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking and self._due():
            self.has_dataloader_changed(dataloader_idx)
            self._report("validation", batch_idx + 1, self.total_val_batches_current_dataloader)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        if self._due():
            self.has_dataloader_changed(dataloader_idx)
            self._report("test", batch_idx + 1, self.total_test_batches_current_dataloader)

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        if self._due():
            self.has_dataloader_changed(dataloader_idx)
            self._report("predict", batch_idx + 1,
                         self.total_predict_batches_current_dataloader)

    def _start_loop(self) -> None:
        self._loop_started = self._last_line = time.perf_counter()

    def _due(self) -> bool:
        """Whether ``every_seconds`` passed since the last line."""
        return time.perf_counter() - self._last_line >= self.every_seconds

    def _report(self, loop: str, batches: int, total: float, more: str = "") -> None:
        """The line ``LOOP: 42% (120/287 batches), 3.1 batches/s MORE``."""
        self._last_line = now = time.perf_counter()
        share = (f"{batches} batches" if total == float("inf") else
                 f"{batches / total:.0%} ({batches}/{total} batches)")
        rate = batches / max(now - self._loop_started, 1e-9)
        self.write(f"{loop}: {share}, {rate:.3g} batches/s{more}")


def progress_bar() -> ProgressBar:
    """The progress a run shows: :class:`EpochBar` when stdout is a terminal, else
    :class:`PlainProgress`."""
    return EpochBar() if sys.stdout.isatty() else PlainProgress()
