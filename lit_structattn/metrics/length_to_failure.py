"""Average length to failure (Grefenstette et al. 2015; Kim et al. 2017, Table 2), and exact
match (a length to failure of 1; morphological inflection).

The score of one example is the number of leading target tokens predicted correctly before the
first error, divided by the gold length (``<eos>`` included), so it lies in ``[0, 1]``.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric


def length_to_failure(
    pred: torch.Tensor, gold: torch.Tensor, gold_lengths: torch.Tensor
) -> torch.Tensor:
    """Per-example length to failure ``[B]`` (float in ``[0, 1]``).

    ``pred [B, T']`` and ``gold [B, T]`` are token ids aligned position by position (both without
    ``<bos>``); ``gold_lengths [B]`` counts the real gold tokens including ``<eos>``. ``T'`` may
    differ from ``T``: gold positions beyond the prediction count as errors, and predicted
    tokens beyond the gold length are ignored.
    """
    width = gold.shape[1]
    if pred.shape[1] < width:
        pred = torch.nn.functional.pad(pred, (0, width - pred.shape[1]), value=-1)
    positions = torch.arange(width, device=gold.device)
    correct = (pred[:, :width] == gold) & (positions < gold_lengths[:, None])
    leading = correct.long().cumprod(dim=1).sum(dim=1)
    return leading / gold_lengths


class LengthToFailure(Metric):
    """Mean length to failure per formula depth and overall.

    ``update(pred [B, T'], gold [B, T], gold_lengths [B], depth [B])`` (see
    :func:`length_to_failure`; ``depth`` in ``0 .. max_depth``). ``compute()`` returns
    ``{depth: mean score}`` for every depth seen, plus ``"all"``: the mean over all examples
    (NaN before any update). States are per-depth sums and counts ``[max_depth + 1]``, summed
    across processes.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, max_depth: int, **kwargs) -> None:
        super().__init__(**kwargs)
        if not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth must be an int >= 1, got {max_depth!r}")
        self.max_depth = max_depth
        self.add_state("score_sum", torch.zeros(max_depth + 1), dist_reduce_fx="sum")
        self.add_state("count", torch.zeros(max_depth + 1, dtype=torch.long), dist_reduce_fx="sum")

    def update(
        self,
        pred: torch.Tensor,
        gold: torch.Tensor,
        gold_lengths: torch.Tensor,
        depth: torch.Tensor,
    ) -> None:
        """Add a batch: ``pred [B, T']``, ``gold [B, T]``, ``gold_lengths [B]``, ``depth [B]``."""
        self._check(pred, gold, gold_lengths, depth)
        scores = length_to_failure(pred, gold, gold_lengths).to(self.score_sum.dtype)
        depth = depth.long()
        self.score_sum = self.score_sum.index_add(0, depth, scores)
        self.count = self.count.index_add(0, depth, torch.ones_like(depth))

    def compute(self) -> dict[int | str, torch.Tensor]:
        """``{depth: mean score}`` for the depths seen, and ``"all"``: the mean over examples."""
        means: dict[int | str, torch.Tensor] = {
            int(d): self.score_sum[d] / self.count[d] for d in self.count.nonzero().flatten()
        }
        means["all"] = self.score_sum.sum() / self.count.sum()
        return means

    def _check(
        self,
        pred: torch.Tensor,
        gold: torch.Tensor,
        gold_lengths: torch.Tensor,
        depth: torch.Tensor,
    ) -> None:
        if pred.dim() != 2 or gold.dim() != 2 or pred.shape[0] != gold.shape[0]:
            raise ValueError(f"need pred [B, T'] and gold [B, T], got {tuple(pred.shape)} and "
                             f"{tuple(gold.shape)}")
        batch = (gold.shape[0],)
        if gold_lengths.shape != batch or depth.shape != batch:
            raise ValueError(f"need gold_lengths and depth of shape {batch}, got "
                             f"{tuple(gold_lengths.shape)} and {tuple(depth.shape)}")
        if batch[0] == 0:
            return
        if gold_lengths.min() < 1 or gold_lengths.max() > gold.shape[1]:
            raise ValueError(f"gold_lengths must lie in 1 .. {gold.shape[1]}")
        if depth.min() < 0 or depth.max() > self.max_depth:
            raise ValueError(f"depth must lie in 0 .. {self.max_depth} (max_depth)")


class ExactMatch(Metric):
    """The share of outputs equal to the gold sequence (every gold token, ``<eos>`` included,
    predicted in place: a length to failure of 1).

    ``update(pred [B, T'], gold [B, T], gold_lengths [B])`` as :func:`length_to_failure`;
    ``compute()`` -> a scalar in ``[0, 1]``. States (hits, count) are summed across processes.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("hits", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("count", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, pred: torch.Tensor, gold: torch.Tensor, gold_lengths: torch.Tensor) -> None:
        scores = length_to_failure(pred, gold, gold_lengths)
        self.hits += int((scores == 1).sum())
        self.count += len(scores)

    def compute(self) -> torch.Tensor:
        return self.hits / self.count
