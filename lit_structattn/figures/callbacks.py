"""TensorBoard callbacks: attention figures of a few validation examples every epoch, and the
monitored metric in TensorBoard's HParams view."""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import matplotlib.pyplot as plt
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn

from .plots import plot_figure


class AttentionFigures(L.Callback):
    """At the end of every ``every_n_epochs``-th validation, log the attention of
    ``num_examples`` validation examples to TensorBoard as figures: the same examples every
    epoch, of about the median length of the validation set (:func:`median_examples`).

    The LightningModule provides ``attention_figures(batch, vocab, limit)`` returning a list of
    ``(tag, item)`` with items that :func:`~lit_structattn.figures.plots.plot_figure` draws
    (heatmaps, raindrop plots, parses). The examples' batch is built once per run with the
    DataModule's ``collate`` from its ``datasets["val"]`` (which has ``lengths``); for data without
    these, the first validation batch is shown instead, with a warning. Does nothing when there is
    no TensorBoard logger or the module has no such method.
    """

    def __init__(self, num_examples: int = 2, every_n_epochs: int = 1) -> None:
        self.num_examples = num_examples
        self.every_n_epochs = every_n_epochs
        self._examples: dict | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._examples = None  # a new run picks from its own data

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = tensorboard_logger(trainer)
        if (
            logger is None
            or trainer.sanity_checking
            or not trainer.is_global_zero
            or trainer.current_epoch % self.every_n_epochs
            or not hasattr(pl_module, "attention_figures")
        ):
            return
        if self._examples is None:
            self._examples = self._pick_examples(trainer)
        batch = pl_module.transfer_batch_to_device(self._examples, pl_module.device, 0)
        vocab = getattr(trainer.datamodule, "vocab", None)
        for tag, item in pl_module.attention_figures(batch, vocab, self.num_examples):
            figure = plot_figure(item)
            logger.experiment.add_figure(tag, figure, global_step=trainer.global_step)
            plt.close(figure)

    def _pick_examples(self, trainer: L.Trainer) -> dict:
        """The batch of :func:`median_examples` of the DataModule's validation set; the first
        validation batch (with a warning) when the data has no such set or ``collate``."""
        data = trainer.datamodule
        dataset = getattr(data, "datasets", {}).get("val")
        collate = getattr(data, "collate", None)
        if dataset is not None and collate is not None and hasattr(dataset, "lengths"):
            return collate([dataset[i] for i in median_examples(dataset.lengths,
                                                                self.num_examples)])
        rank_zero_warn("AttentionFigures: the data has no datasets['val'] with lengths and "
                       "no collate; showing the first validation batch instead")
        loader = trainer.val_dataloaders
        return next(iter(loader[0] if isinstance(loader, list) else loader))


class HparamsMetric(L.Callback):
    """TensorBoard's HParams view shows ``best/<monitor>``, the best value so far of the metric
    that the first monitoring ``ModelCheckpoint`` monitors (logged at every epoch's start and at
    the end of the fit), in place of the TensorBoard logger's placeholder ``hp_metric = -1``.
    Does nothing without a TensorBoard logger or a monitoring checkpoint."""

    def __init__(self) -> None:
        self._hparams_logged = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Switch the placeholder off before the trainer logs the hyper-parameters (the
        logger's ``default_hp_metric``, which a ``logger: true`` configuration cannot set)."""
        logger = tensorboard_logger(trainer)
        if logger is not None and monitored_checkpoint(trainer) is not None:
            logger._default_hp_metric = False
        self._hparams_logged = False

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log_best(trainer)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log_best(trainer)

    def _log_best(self, trainer: L.Trainer) -> None:
        """Log the checkpoint's best score so far, once known (the checkpoint records an
        epoch's score after every other callback's ``on_train_epoch_end``: it is read at the
        next epoch's start and at the end of the fit)."""
        logger, checkpoint = tensorboard_logger(trainer), monitored_checkpoint(trainer)
        if logger is None or checkpoint is None or checkpoint.best_model_score is None:
            return
        metrics = {f"best/{checkpoint.monitor}": float(checkpoint.best_model_score)}
        if self._hparams_logged:
            logger.log_metrics(metrics, trainer.global_step)
        else:  # the HParams view's metrics are those the hyper-parameters are logged with
            logger.log_hyperparams(logger.hparams, metrics, trainer.global_step)
            self._hparams_logged = True


def monitored_checkpoint(trainer: L.Trainer) -> ModelCheckpoint | None:
    """The trainer's first ``ModelCheckpoint`` that monitors a metric, if any."""
    return next((c for c in trainer.checkpoint_callbacks
                 if isinstance(c, ModelCheckpoint) and c.monitor), None)


def median_examples(lengths: Sequence, count: int) -> list[int]:
    """The indices of ``count`` examples around the median of ``lengths`` (one length, or a
    tuple of lengths, per example), in order of length; ties are broken by index."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    start = max(0, (len(order) - count) // 2)
    return order[start : start + count]


def tensorboard_logger(trainer: L.Trainer) -> TensorBoardLogger | None:
    """The trainer's first TensorBoard logger, if any."""
    return next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
