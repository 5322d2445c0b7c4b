"""Sequence tagging (POS, NER, word-level QE) with the neural easy-first tagger of Martins &
Kreutzer (2017) and its baselines, around
:class:`~lit_structattn.models.easy_first.EasyFirstTagger`.

Batches (from the tagging DataModules): ``words [B, T]``, ``prefixes``/``suffixes [B, T, 4]``,
``tags [B, T]`` (0 = padding), ``lengths [B]``, ``index [B]`` (position in the split) and, for
QE, ``aligned [B, T, A]``. The model is built in :meth:`configure_model`, once the data's
vocabulary sizes are known (checkpoints keep them: ``load_from_checkpoint`` needs no data).
Logs ``train/loss``, ``val/loss`` and ``{val,test}/<metric>`` (also as ``{val,test}/score``,
which the configs' checkpointing monitors whatever the metric).
"""

from __future__ import annotations

import inspect
from typing import Literal

import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.plugins.precision import MixedPrecision

from ..common.checks import check_choice
from ..figures import Raindrop
from ..layers.registry import EasyFirstAttentionName
from ..metrics import EntityF1, F1Mult, FirstFocusShare, TokenAccuracy
from ..models.easy_first import EasyFirstTagger, UpdateName
from .base import Task

METRICS = ("accuracy", "entity_f1", "f1_mult")
MetricName = Literal[METRICS]  # as the type of the constructor argument


class TaggingTask(Task):
    """Trains a tagger (Martins & Kreutzer: Adagrad lr 0.1, gradient clipping 5;
    ``configs/easy_first/common.yaml``).

    Args:
        metric: ``accuracy`` (POS), ``entity_f1`` (NER, conlleval-style) or ``f1_mult`` (QE).
        steps: sketch steps: an int (0 = the BiLSTM tagger) or ``"L"`` (one per word).
        attention: a name of ``registry.names("easy_first")``: ``csoftmax``, ``csparsemax``,
            ``sigmoid``, ``softmax``, ``sparsemax``, ``softmax_penalty``, ``uniform``,
            ``left_to_right``, ``right_to_left`` or ``vanilla`` (see ``EasyFirstDecoder``).
        sketch_update: ``full`` (NEF-F) or ``single`` (NEF-S).
        crf: a linear-chain CRF output layer instead of per-token softmax.
        concat: output features ``[h_i; s_i]`` (False: ``s_i`` only, the ablation).
        tag_weights: loss weight per tag name (QE: ``{"BAD": 5.0}``); others weigh 1.
        use_affixes: prefix/suffix n-gram embeddings (the QE model has none).
        use_capitalization: the authors' 4-way capitalization one-hot as an extra input.
        optimizer, lr_scheduler: see :class:`~.base.Task`. An optimizer that can fuse its step
            (Adagrad, Adam, SGD, ...) is fused on the CPU unless its ``fused`` is set
            (:meth:`configure_optimizers`).
        Other sizes: see :class:`~lit_structattn.models.easy_first.EasyFirstTagger`.
    """

    def __init__(
        self,
        metric: MetricName = "accuracy",
        steps: int | str = "L",
        attention: EasyFirstAttentionName = "csoftmax",
        sketch_update: UpdateName = "full",
        crf: bool = False,
        concat: bool = True,
        dropout: float = 0.2,
        word_dim: int = 64,
        affix_dim: int = 50,
        hidden_dim: int = 50,
        sketch_dim: int = 50,
        preattention_dim: int = 50,
        window: int = 2,
        penalty: float = 1.0,
        use_affixes: bool = True,
        use_capitalization: bool = False,
        tag_weights: dict[str, float] | None = None,
        optimizer: OptimizerCallable = torch.optim.Adagrad,
        lr_scheduler: LRSchedulerCallable | None = None,
    ) -> None:
        super().__init__(optimizer, lr_scheduler)
        check_choice("metric", metric, METRICS)
        self.save_hyperparameters()
        self.model: EasyFirstTagger | None = None
        self.data_sizes: dict | None = None
        self.metrics = torch.nn.ModuleDict()

    # ------------------------------------------------------------------ building

    def configure_model(self) -> None:
        """Build the tagger with the vocabulary sizes of ``trainer.datamodule`` (after setup) and
        start its word embeddings from the data's pretrained vectors, if it read any
        (``pretrained_matrix [vocab_size, word_dim]``); without a Trainer
        (``load_from_checkpoint``) :meth:`on_load_checkpoint` builds it."""
        if self.model is not None or self._trainer is None:
            return
        data = self.trainer.datamodule
        source_vocab = getattr(data, "source_vocab", None)
        self._build({
            "words": len(data.vocab), "tags": list(data.tag_vocab.tokens),
            "affixes": len(data.affix_vocab) if self.hparams.use_affixes else 0,
            "sources": len(source_vocab) if source_vocab is not None else 0,
        })
        if data.pretrained_matrix is not None:
            self.model.encoder.init_word_embeddings(data.pretrained_matrix)
            self.print(f"pretrained vectors: {data.pretrained_found} of {len(data.vocab)} words "
                       "found")

    def _build(self, sizes: dict) -> None:
        """The tagger and metrics for the data's ``sizes``: vocabulary sizes (``words``,
        ``affixes``, ``sources``) and the ``tags`` in id order; kept in checkpoints, so that
        ``TaggingTask.load_from_checkpoint`` works without the data."""
        hp = self.hparams
        tags = sizes["tags"]
        weights = None
        if hp.tag_weights:
            unknown = set(hp.tag_weights) - set(tags)
            if unknown:
                raise ValueError(f"tag_weights names unknown tags {sorted(unknown)}; tags: {tags}")
            weights = [float(hp.tag_weights.get(tag, 1.0)) for tag in tags]
        self.data_sizes = sizes
        self.model = EasyFirstTagger(
            sizes["words"], len(tags), sizes["affixes"], sizes["sources"],
            word_dim=hp.word_dim, affix_dim=hp.affix_dim, hidden_dim=hp.hidden_dim,
            use_affixes=hp.use_affixes, use_capitalization=hp.use_capitalization,
            dropout=hp.dropout, steps=hp.steps,
            attention=hp.attention, update=hp.sketch_update, sketch_dim=hp.sketch_dim,
            preattention_dim=hp.preattention_dim, window=hp.window, penalty=hp.penalty,
            concat=hp.concat, crf=hp.crf, tag_weights=weights, pad_tag=0,
        )
        self.metrics = torch.nn.ModuleDict({split: self._metric(tags) for split in ("val", "test")})
        if "VERB" in tags and self.model.decoder is not None:  # UD POS: where does it start?
            self.metrics["test_first_verb"] = FirstFocusShare(tags.index("VERB"))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["data_sizes"] = self.data_sizes

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self.model is None and "data_sizes" in checkpoint:  # loaded without a Trainer
            self._build(checkpoint["data_sizes"])
        super().on_load_checkpoint(checkpoint)  # refuses weights of another configuration

    def _metric(self, tags: list[str]):
        if self.hparams.metric == "accuracy":
            return TokenAccuracy()
        if self.hparams.metric == "entity_f1":
            return EntityF1(tags)
        return F1Mult(tags.index("OK"), tags.index("BAD"))

    # ------------------------------------------------------------------ steps

    def forward(self, batch: dict[str, torch.Tensor]):
        """The model's :class:`~lit_structattn.models.easy_first.EasyFirstOutput` for ``batch``."""
        affixes = self.hparams.use_affixes
        return self.model(
            batch["words"], batch["lengths"],
            batch["prefixes"] if affixes else None, batch["suffixes"] if affixes else None,
            batch.get("aligned"), caps=batch["caps"] if self.hparams.use_capitalization else None,
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.model.loss(self(batch), batch["tags"], batch["lengths"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["words"]))
        return loss

    def _evaluate(self, batch: dict[str, torch.Tensor], split: str) -> None:
        outputs = self(batch)
        size = len(batch["words"])
        if split == "val":
            loss = self.model.loss(outputs, batch["tags"], batch["lengths"])
            self.log("val/loss", loss, sync_dist=True, batch_size=size)
        prediction = self.model.predict(outputs, batch["lengths"])
        metric = self.metrics[split]
        metric.update(prediction, batch["tags"], batch["lengths"])
        self.log(f"{split}/{self.hparams.metric}", metric, prog_bar=True, batch_size=size)
        self.log(f"{split}/score", metric, batch_size=size)  # the same, for generic monitoring
        if split == "test" and "test_first_verb" in self.metrics:
            first_verb = self.metrics["test_first_verb"]
            first_verb.update(outputs.attention, batch["tags"], outputs.steps)
            self.log("test/first_step_on_verb", first_verb, batch_size=size)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> list[dict]:
        """One JSON-ready record per sentence: words, predicted tags, attention per step."""
        outputs = self(batch)
        prediction = self.model.predict(outputs, batch["lengths"])
        data = self.trainer.datamodule
        split = data.datasets["test"]
        records = []
        for b, (index, length) in enumerate(zip(batch["index"].tolist(),
                                                batch["lengths"].tolist(), strict=True)):
            steps = int(outputs.steps[b])
            records.append({
                "words": list(split.sentences[index].words),
                "prediction": [data.tag_vocab.tokens[t] for t in prediction[b, :length].tolist()],
                "attention": [[round(w, 5) for w in row]
                              for row in outputs.attention[b, :steps, :length].tolist()],
            })
        return records

    @torch.no_grad()
    def attention_figures(self, batch: dict[str, torch.Tensor], vocab, limit: int) -> list:
        """Raindrop plots (attention of every sketch step, cumulative attention) of the first
        ``limit`` sentences of ``batch`` (for :class:`~lit_structattn.callbacks.AttentionFigures`).
        """
        if self.model.decoder is None:
            return []
        sentences = self.trainer.datamodule.datasets["val"].sentences
        outputs = self(batch)
        figures = []
        for b in range(min(limit, len(batch["words"]))):
            sentence = sentences[int(batch["index"][b])]
            steps, length = int(outputs.steps[b]), int(batch["lengths"][b])
            figures.append((f"raindrop/example_{b}", Raindrop(
                f"{self.hparams.attention} attention per sketch step",
                outputs.attention[b, :steps, :length], sentence.words)))
        return figures

    def configure_optimizers(self):
        """The optimizer, fused on the CPU when it takes ``fused`` and its configuration leaves
        it unset (one pass over each parameter instead of four: the embedding tables hold
        nearly all the parameters, and the unfused Adagrad update took a quarter of an NER
        training step; the same update up to rounding). Not under mixed precision
        (``bf16-mixed``, ``16-mixed``): Lightning refuses to clip the gradients of a fused
        optimizer there, as a fused step unscales the gradients itself, after the clipping."""
        mixed = self._trainer is not None and isinstance(self.trainer.precision_plugin,
                                                         MixedPrecision)
        if self.device.type == "cpu" and not mixed and fusable(self.optimizer):
            return self.optimizer(self.parameters(), fused=True)
        return super().configure_optimizers()


def fusable(optimizer: OptimizerCallable) -> bool:
    """Whether ``optimizer`` (an optimizer class, or the callable a config makes of one) takes
    ``fused`` and leaves it unset."""
    configured = getattr(optimizer, "keywords", None)  # a config's functools.partial
    if configured is not None:
        return "fused" in configured and configured["fused"] is None
    return "fused" in inspect.signature(optimizer).parameters
