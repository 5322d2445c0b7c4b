"""Lightning callbacks: attention figures in TensorBoard."""

from __future__ import annotations

import lightning as L
import matplotlib.pyplot as plt
from lightning.pytorch.loggers import TensorBoardLogger

from .figures import plot_attention, plot_parse


class AttentionFigures(L.Callback):
    """At the end of every ``every_n_epochs``-th validation, log the attention of the first
    ``num_examples`` validation examples to TensorBoard as figures.

    The LightningModule provides ``attention_figures(batch, vocab, limit)`` returning a list of
    ``(tag, AttentionMap | (tokens, heads))``; heatmaps and parses are drawn from those. Does
    nothing when there is no TensorBoard logger or the module has no such method.
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
            figure = plot_attention(item) if hasattr(item, "weights") else plot_parse(*item)
            logger.experiment.add_figure(tag, figure, global_step=trainer.global_step)
            plt.close(figure)
