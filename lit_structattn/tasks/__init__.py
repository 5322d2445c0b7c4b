"""LightningModules: losses, metrics, optimizers and logging around the plain models."""

from .classification import SequenceClassifier

__all__ = ["SequenceClassifier"]
