"""Task metrics: torchmetrics ``Metric`` subclasses (DDP-synchronised through their states), and
corpus-level translation scores computed once after decoding."""

from lit_structattn.metrics.length_to_failure import ExactMatch, LengthToFailure
from lit_structattn.metrics.tagging import EntityF1, F1Mult, FirstFocusShare, TokenAccuracy
from lit_structattn.metrics.translation import (
    bleu_chrf,
    drop_alignments,
    drop_score,
    rep_score,
)

__all__ = ["EntityF1", "ExactMatch", "F1Mult", "FirstFocusShare", "LengthToFailure",
           "TokenAccuracy", "bleu_chrf", "drop_alignments", "drop_score", "rep_score"]
