"""Sequence classification with attention pooling (the plumbing demo of the CLI)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torchmetrics.classification import MulticlassAccuracy

from ..common.rounding import rounded
from ..models.pooling import AttentionPoolingClassifier
from .base import Task


class SequenceClassifier(Task):
    """Trains :class:`~lit_structattn.models.pooling.AttentionPoolingClassifier`.

    Batches: ``tokens [B, T]``, ``lengths [B]``, ``labels [B]``. Logs ``train/loss``,
    ``val/loss``, ``val/acc``, ``test/acc`` (accuracy synced across processes by torchmetrics).

    Args:
        model: the classifier; its ``vocab_size`` and ``num_classes`` come from the data
            (linked by the CLI from the DataModule's attributes of those names).
        optimizer, lr_scheduler: see :class:`~.base.Task`.
    """

    def __init__(
        self,
        model: AttentionPoolingClassifier,
        optimizer: OptimizerCallable = torch.optim.Adam,
        lr_scheduler: LRSchedulerCallable | None = None,
    ) -> None:
        super().__init__(optimizer, lr_scheduler)
        self.save_hyperparameters()
        self.model = model
        classes = model.output.out_features
        self.accuracy = torch.nn.ModuleDict(
            {split: MulticlassAccuracy(classes, average="micro") for split in ("val", "test")}
        )

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits [B, C], attention [B, T])``."""
        return self.model(batch["tokens"], batch["lengths"])

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits, _ = self(batch)
        loss = F.cross_entropy(logits, batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(logits))
        return loss

    def _evaluate(self, batch: dict[str, torch.Tensor], split: str) -> None:
        logits, _ = self(batch)
        metric = self.accuracy[split]
        metric(logits, batch["labels"])
        self.log(f"{split}/acc", metric, prog_bar=True, batch_size=len(logits))
        if split == "val":
            loss = F.cross_entropy(logits, batch["labels"])
            self.log_validation_loss(loss, len(logits))

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def classify(self, sequences: Sequence[str | Sequence[int]], batch_size: int = 32
                 ) -> list[dict]:
        """The labels of raw sequences, each a line of token ids separated by spaces
        (``"5 1 7 3"``) or a list of ids: see :meth:`records`."""
        lines = [s if isinstance(s, str) else " ".join(map(str, s)) for s in sequences]
        return self.predict_text(lines, batch_size=batch_size)

    def records(self, batch: dict[str, torch.Tensor], examples: Sequence | None = None
                ) -> list[dict]:
        """One JSON-ready record per sequence of ``batch``: ``tokens`` (its ids),
        ``prediction`` (the most likely label) and ``attention [T]`` (the pooling weights over
        its tokens)."""
        logits, attention = self(batch)
        predictions = logits.argmax(-1).tolist()
        return [{"tokens": batch["tokens"][b, :n].tolist(), "prediction": predictions[b],
                 "attention": rounded(attention[b, :n])}
                for b, n in enumerate(batch["lengths"].tolist())]

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> list[dict]:
        """:meth:`records` of a batch of the DataModule's predict split."""
        return self.records(batch)
