"""Tagging metrics of Martins & Kreutzer (2017): token accuracy (POS), entity-level F1 (NER, the
conlleval convention through seqeval) and F1-MULT = F1(OK) x F1(BAD) (word-level QE).

Each is a torchmetrics ``Metric`` whose states are counts summed across processes, so the
values are exact under DDP. Inputs: ``pred [B, T]`` and ``gold [B, T]`` tag ids, ``lengths [B]``
(positions ``>= lengths[b]`` are padding and ignored).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from seqeval.metrics.sequence_labeling import get_entities
from torchmetrics import Metric


def _valid(pred: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """bool ``[B, T]``: positions within each sentence (after checking the shapes agree)."""
    if pred.shape != gold.shape or pred.dim() != 2 or lengths.shape != pred.shape[:1]:
        raise ValueError(f"need pred and gold [B, T] and lengths [B], got {tuple(pred.shape)}, "
                         f"{tuple(gold.shape)} and {tuple(lengths.shape)}")
    return torch.arange(pred.shape[1], device=pred.device) < lengths[:, None]


class TokenAccuracy(Metric):
    """Share of real tokens whose predicted tag equals the gold tag."""

    is_differentiable, higher_is_better, full_state_update = False, True, False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("correct", torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0), dist_reduce_fx="sum")

    def update(self, pred: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> None:
        valid = _valid(pred, gold, lengths)
        self.correct += ((pred == gold) & valid).sum()
        self.total += valid.sum()

    def compute(self) -> torch.Tensor:
        return self.correct / self.total.clamp_min(1)


class EntityF1(Metric):
    """Entity-level micro F1 over IOB2 (or IOB1) chunks, as conlleval counts them: a predicted
    entity is correct when its type and both boundaries match a gold entity (seqeval's default,
    conlleval-compatible chunking, which also reads ill-formed sequences as conlleval does).

    Args:
        tags: the tag name of every id (e.g. ``["<pad>", "O", "B-PER", "I-PER", ...]``).
    """

    is_differentiable, higher_is_better, full_state_update = False, True, False

    def __init__(self, tags: Sequence[str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.tags = list(tags)
        for name in ("correct", "predicted", "gold"):
            self.add_state(name, torch.tensor(0), dist_reduce_fx="sum")

    def update(self, pred: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> None:
        _valid(pred, gold, lengths)
        for p_ids, g_ids, n in zip(pred.tolist(), gold.tolist(), lengths.tolist(), strict=True):
            p_spans = set(get_entities([self.tags[i] for i in p_ids[:n]]))
            g_spans = set(get_entities([self.tags[i] for i in g_ids[:n]]))
            self.correct += len(p_spans & g_spans)
            self.predicted += len(p_spans)
            self.gold += len(g_spans)

    def compute(self) -> torch.Tensor:
        precision = self.correct / self.predicted.clamp_min(1)
        recall = self.correct / self.gold.clamp_min(1)
        return 2 * precision * recall / (precision + recall).clamp_min(1e-12)


class F1Mult(Metric):
    """Word-level QE: the product of the token-level F1 of the ``OK`` and of the ``BAD`` class.

    Args:
        ok_id, bad_id: the tag ids of ``OK`` and ``BAD``.
    """

    is_differentiable, higher_is_better, full_state_update = False, True, False

    def __init__(self, ok_id: int, bad_id: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.classes = (ok_id, bad_id)
        for name in ("true_positive", "predicted", "gold"):
            self.add_state(name, torch.zeros(2, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, pred: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor) -> None:
        valid = _valid(pred, gold, lengths)
        classes = torch.tensor(self.classes, device=pred.device)[:, None, None]  # [2, 1, 1]
        is_pred, is_gold = (pred == classes) & valid, (gold == classes) & valid  # [2, B, T]
        self.true_positive += (is_pred & is_gold).sum((1, 2))
        self.predicted += is_pred.sum((1, 2))
        self.gold += is_gold.sum((1, 2))

    def per_class_f1(self) -> torch.Tensor:
        """``[2]``: F1 of OK and of BAD."""
        return 2 * self.true_positive / (self.predicted + self.gold).clamp_min(1)

    def compute(self) -> torch.Tensor:
        return self.per_class_f1().prod()


class FirstFocusShare(Metric):
    """Share of sentences whose first sketch step attends most to a word with gold tag
    ``tag_id`` (Martins & Kreutzer 2017, §5.1: 57% of English test sentences start on a VERB).

    ``update(attention [B, N, T], gold [B, T], steps [B])``: sentences with no sketch step are
    not counted.
    """

    is_differentiable, higher_is_better, full_state_update = False, None, False

    def __init__(self, tag_id: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tag_id = tag_id
        self.add_state("hits", torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0), dist_reduce_fx="sum")

    def update(self, attention: torch.Tensor, gold: torch.Tensor, steps: torch.Tensor) -> None:
        counted = steps > 0
        if attention.shape[1] == 0 or not bool(counted.any()):
            return
        first = attention[:, 0].argmax(-1, keepdim=True)  # [B, 1]
        hits = (gold.gather(1, first).squeeze(1) == self.tag_id) & counted
        self.hits += hits.sum()
        self.total += counted.sum()

    def compute(self) -> torch.Tensor:
        return self.hits / self.total.clamp_min(1)
