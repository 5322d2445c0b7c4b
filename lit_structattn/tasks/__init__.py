"""LightningModules: losses, metrics, optimizers and logging around the plain models."""

from .classification import SequenceClassifier
from .nli import NLITask
from .qa import QATask
from .seq2seq import Seq2SeqTask
from .tagging import TaggingTask
from .translation import TranslationTask

__all__ = [
    "NLITask", "QATask", "SequenceClassifier", "Seq2SeqTask", "TaggingTask", "TranslationTask",
]
