"""The supporting-fact sequence accuracy of Kim et al. (2017, Table 4), as a torchmetrics
``Metric`` whose states are counts summed across processes (exact under DDP). (Answer accuracy
is torchmetrics' ``MeanMetric`` of the per-question hits.)"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torchmetrics import Metric


def fact_sequence_correct(predicted: torch.Tensor, supports: torch.Tensor) -> torch.Tensor:
    """bool ``[B]``: the selected facts equal the gold supporting facts, in order and in number.

    Args:
        predicted: ``[B, K]`` slot selected at every step.
        supports: ``[B, S]`` gold slots in the dataset's order, -1 = padding (or a fact outside
            the memory window, which no selection can match).
    """
    steps = predicted.shape[1]
    gold = supports[:, :steps]
    if gold.shape[1] < steps:
        gold = torch.cat([gold, gold.new_full((len(gold), steps - gold.shape[1]), -1)], 1)
    same_count = (supports >= 0).sum(1) == steps
    return same_count & (predicted == gold).all(1)


class FactSequenceAccuracy(Metric):
    """Share of questions whose selected fact sequence is exactly the gold one
    (:func:`fact_sequence_correct`), counting only questions of tasks not in ``excluded_tasks``
    (the paper leaves out tasks 7 and 8, whose number of supporting facts varies). ``compute``
    gives NaN when no question was counted.
    """

    is_differentiable, higher_is_better, full_state_update = False, True, False

    def __init__(self, excluded_tasks: Sequence[int] = (7, 8), **kwargs) -> None:
        super().__init__(**kwargs)
        self.excluded_tasks = tuple(excluded_tasks)
        self.add_state("correct", torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0), dist_reduce_fx="sum")

    def update(self, predicted: torch.Tensor, supports: torch.Tensor, task: torch.Tensor) -> None:
        """``predicted [B, K]``, ``supports [B, S]`` (see :func:`fact_sequence_correct`),
        ``task [B]`` bAbI task numbers."""
        counted = ~torch.isin(task, torch.tensor(self.excluded_tasks, device=task.device))
        self.correct += (fact_sequence_correct(predicted, supports) & counted).sum()
        self.total += counted.sum()

    def compute(self) -> torch.Tensor:
        if self.total == 0:
            return torch.tensor(float("nan"))
        return self.correct / self.total
