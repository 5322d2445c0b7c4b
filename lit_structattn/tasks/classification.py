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
    ``val/loss`` and ``{val,test}/accuracy`` (synced across processes by torchmetrics), the
    score.

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
        self.declare_metrics("accuracy", {"accuracy": MulticlassAccuracy(classes, average="micro")})

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits [B, C], attention [B, T])``."""
        return self.model(batch["tokens"], batch["lengths"])

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(self(batch)[0], batch["labels"])

    def evaluate(self, batch: dict[str, torch.Tensor], split: str) -> tuple[torch.Tensor, int]:
        logits, _ = self(batch)
        self.metrics[split]["accuracy"].update(logits, batch["labels"])
        return F.cross_entropy(logits, batch["labels"]), len(logits)

    def classify(self, sequences: Sequence[str | Sequence[int]], batch_size: int = 32
                 ) -> list[dict]:
        """The labels of raw sequences, each a line of token ids separated by spaces
        (``"5 1 7 3"``) or a list of ids: see :meth:`records`. A bare string is one sequence."""
        if isinstance(sequences, str):
            sequences = [sequences]
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
