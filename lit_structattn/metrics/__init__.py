"""Task metrics: torchmetrics ``Metric`` subclasses (DDP-synchronised through their states; the
corpus-level translation scores gather their corpus themselves), and the translation scores as
functions of a finished corpus."""

from lit_structattn.metrics.length_to_failure import ExactMatch, LengthToFailure
from lit_structattn.metrics.tagging import EntityF1, F1Mult, FirstFocusShare, TokenAccuracy
from lit_structattn.metrics.translation import (
    AttentionSparsity,
    BleuChrf,
    BleuPerSetting,
    CorpusScore,
    DropScore,
    RepScore,
    TokenPerplexity,
    bleu_chrf,
    drop_alignments,
    drop_score,
    rep_score,
)

__all__ = ["AttentionSparsity", "BleuChrf", "BleuPerSetting", "CorpusScore", "DropScore",
           "EntityF1", "ExactMatch", "F1Mult", "FirstFocusShare", "LengthToFailure", "RepScore",
           "TokenAccuracy", "TokenPerplexity", "bleu_chrf", "drop_alignments", "drop_score",
           "rep_score"]
