"""Lightning callbacks: attention figures in TensorBoard, predictions to JSONL, a fit's wall
time kept across resumptions."""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L
import matplotlib.pyplot as plt
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info

from .figures import plot_figure


class AttentionFigures(L.Callback):
    """At the end of every ``every_n_epochs``-th validation, log the attention of the first
    ``num_examples`` validation examples to TensorBoard as figures.

    The LightningModule provides ``attention_figures(batch, vocab, limit)`` returning a list of
    ``(tag, item)`` with items that :func:`~lit_structattn.figures.plot_figure` draws (heatmaps,
    raindrop plots, parses). Does nothing when there is no TensorBoard logger or the module has
    no such method.
    """

    def __init__(self, num_examples: int = 2, every_n_epochs: int = 1) -> None:
        self.num_examples = num_examples
        self.every_n_epochs = every_n_epochs

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
        if (
            logger is None
            or trainer.sanity_checking
            or not trainer.is_global_zero
            or trainer.current_epoch % self.every_n_epochs
            or not hasattr(pl_module, "attention_figures")
        ):
            return
        loader = trainer.val_dataloaders
        loader = loader[0] if isinstance(loader, list) else loader
        batch = pl_module.transfer_batch_to_device(next(iter(loader)), pl_module.device, 0)
        vocab = getattr(trainer.datamodule, "vocab", None)
        for tag, item in pl_module.attention_figures(batch, vocab, self.num_examples):
            figure = plot_figure(item)
            logger.experiment.add_figure(tag, figure, global_step=trainer.global_step)
            plt.close(figure)


class JsonlPredictionWriter(BasePredictionWriter):
    """Writes what ``predict_step`` returns (a list of JSON-ready records per batch) to a JSONL
    file, one record per line, as the batches come; under DDP each process writes
    ``<stem>.rank<k>.jsonl``.

    Args:
        output_path: the ``.jsonl`` file (its folder is created).
    """

    def __init__(self, output_path: str = "predictions.jsonl") -> None:
        super().__init__(write_interval="batch")
        self.output_path = Path(output_path)

    def _path(self, trainer: L.Trainer) -> Path:
        if trainer.world_size == 1:
            return self.output_path
        return self.output_path.with_suffix(f".rank{trainer.global_rank}.jsonl")

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        path = self._path(trainer)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch,
                           batch_idx, dataloader_idx) -> None:
        with self._path(trainer).open("a") as out:
            for record in prediction:
                out.write(json.dumps(record) + "\n")

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rank_zero_info(f"predictions written to {self._path(trainer)}")


class FitClock(L.Callback):
    """The wall time of a fit, kept in its checkpoints: a fit resumed from a checkpoint adds
    the time its earlier parts took up to that checkpoint (work redone after the checkpoint is
    counted once, when redone). Lightning restores the state from any checkpoint it loads,
    ``test(ckpt_path=...)`` included: read ``earlier_seconds`` right after ``fit``.

    Attributes:
        earlier_seconds: the time recorded by the checkpoint the fit resumed from; None when
            no checkpoint recorded one.
    """

    def __init__(self) -> None:
        self.earlier_seconds: float | None = None
        self._started: float | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds of this fit so far, its earlier parts included."""
        running = 0.0 if self._started is None else time.perf_counter() - self._started
        return (self.earlier_seconds or 0.0) + running

    def state_dict(self) -> dict[str, float]:
        return {"seconds": self.elapsed()}

    def load_state_dict(self, state_dict: dict[str, float]) -> None:
        self.earlier_seconds = float(state_dict["seconds"])
