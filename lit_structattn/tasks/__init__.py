"""LightningModules: losses, metrics, optimizers and logging around the plain models."""

from .base import Task, load_task
from .classification import SequenceClassifier
from .nli import NLITask
from .qa import QATask
from .tagging import TaggingTask
from .transduction import TransductionTask
from .translation import TranslationTask

__all__ = [
    "NLITask", "QATask", "SequenceClassifier", "TaggingTask", "Task", "TransductionTask",
    "TranslationTask", "load_task",
]
