"""Task metrics (torchmetrics ``Metric`` subclasses, DDP-synchronised through their states)."""

from lit_structattn.metrics.length_to_failure import LengthToFailure
from lit_structattn.metrics.tagging import EntityF1, F1Mult, FirstFocusShare, TokenAccuracy

__all__ = ["EntityF1", "F1Mult", "FirstFocusShare", "LengthToFailure", "TokenAccuracy"]
