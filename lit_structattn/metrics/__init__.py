"""Task metrics (torchmetrics ``Metric`` subclasses, DDP-synchronised through their states)."""

from lit_structattn.metrics.length_to_failure import LengthToFailure

__all__ = ["LengthToFailure"]
