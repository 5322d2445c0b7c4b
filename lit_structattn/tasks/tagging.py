"""Sequence tagging (POS, NER, word-level QE) with the neural easy-first tagger of Martins &
Kreutzer (2017) and its baselines, around
:class:`~lit_structattn.models.easy_first.EasyFirstTagger`.

Batches (from the tagging DataModules): ``words [B, T]``, ``prefixes``/``suffixes [B, T, 4]``,
``caps [B, T]``, ``tags [B, T]`` (0 = padding), ``lengths [B]``, ``index [B]`` (position in the
split) and, for QE, ``aligned [B, T, A]``. Logs ``train/loss``, ``val/loss`` and
``{val,test}/<metric>`` (also as ``{val,test}/score``, which the configs' checkpointing monitors
whatever the metric). A trained tagger tags raw sentences from its checkpoint alone
(:meth:`TaggingTask.tag`, ``predict_text``, ``structattn predict``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Literal

import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.plugins.precision import MixedPrecision

from ..common.checks import check_choice
from ..common.codec import is_blank, raw_input_at
from ..common.rounding import rounded
from ..datamodules.tagging import TaggedSentence
from ..figures.plots import Raindrop
from ..metrics import EntityF1, F1Mult, FirstFocusShare, TokenAccuracy
from ..models.easy_first import EasyFirstOutput, EasyFirstTagger
from .base import Task

METRICS = ("accuracy", "entity_f1", "f1_mult")
MetricName = Literal[METRICS]  # as the type of the constructor argument


class TaggingTask(Task):
    """Trains a tagger (Martins & Kreutzer: Adagrad lr 0.1, gradient clipping 5;
    ``configs/easy_first/common.yaml``).

    What comes from the data: the model's ``vocab_size``, ``num_tags``, ``affix_vocab_size``
    and (QE) ``source_vocab_size``, and the task's ``tag_names``, all linked by the CLI from the
    DataModule's attributes of those names (:data:`~lit_structattn.run.lightning_cli.DATA_SIZES`,
    :data:`~lit_structattn.run.lightning_cli.TASK_DATA`). They are kept in the hyper-parameters,
    so ``TaggingTask.load_from_checkpoint`` rebuilds the model, its metrics and its loss
    weights without the data. Built in Python, pass them yourself (``tag_names=data.tag_names``).

    Args:
        model: the tagger (steps, attention, update, CRF, sizes, dropout, inputs: see
            :class:`~lit_structattn.models.easy_first.EasyFirstTagger`).
        tag_names: the tag of every tag id, the padding tag 0 first (``data.tag_names``); as
            many as the model's ``num_tags``.
        metric: ``accuracy`` (POS), ``entity_f1`` (NER, conlleval-style) or ``f1_mult`` (QE).
            With a ``VERB`` tag and sketch steps the test also logs the share of first sketch
            steps that fall on a verb (``test/first_step_on_verb``).
        tag_weights: loss weight per tag name (QE: ``{"BAD": 5.0}``); others weigh 1. The task
            gives the model the weights by tag id (``loss_weights [K]``) with every loss.
        optimizer, lr_scheduler: see :class:`~.base.Task`. An optimizer that can fuse its step
            (Adagrad, Adam, SGD, ...) is fused on the CPU unless its ``fused`` is set
            (:meth:`configure_optimizers`).
    """

    def __init__(
        self,
        model: EasyFirstTagger,
        tag_names: list[str],
        metric: MetricName = "accuracy",
        tag_weights: dict[str, float] | None = None,
        optimizer: OptimizerCallable = torch.optim.Adagrad,
        lr_scheduler: LRSchedulerCallable | None = None,
    ) -> None:
        super().__init__(optimizer, lr_scheduler)
        check_choice("metric", metric, METRICS)
        tag_names = list(tag_names)
        if len(tag_names) != model.num_tags:
            raise ValueError(f"{len(tag_names)} tag_names for a model with num_tags="
                             f"{model.num_tags}")
        self.save_hyperparameters()
        self.model = model
        self.tag_names = tag_names
        self.register_buffer("loss_weights", weights_by_id(tag_names, tag_weights),
                             persistent=False)
        test_only = {}
        if "VERB" in tag_names and model.decoder is not None:  # UD POS: where does it start?
            test_only["first_step_on_verb"] = FirstFocusShare(tag_names.index("VERB"))
        self.declare_metrics(metric, {metric: self._metric()}, test_only)

    def _metric(self) -> TokenAccuracy | EntityF1 | F1Mult:
        if self.hparams.metric == "accuracy":
            return TokenAccuracy()
        if self.hparams.metric == "entity_f1":
            return EntityF1(self.tag_names)
        return F1Mult(self.tag_names.index("OK"), self.tag_names.index("BAD"))

    def setup(self, stage: str) -> None:
        """Check the model and the tags against the set-up data; when fitting, start the word
        embeddings from the data's pretrained vectors, if it read any (``pretrained_matrix
        [vocab_size, word_dim]``; the weights of a checkpoint resumed from replace them).
        Loading a checkpoint (``load_from_checkpoint``, no Trainer) reads no data."""
        data = self.trainer.datamodule
        if data is None:
            return
        self.check_vocab_size(self.model.encoder.word_embedding.num_embeddings)
        if data.tag_names != self.tag_names:
            raise ValueError(f"the task's tags {self.tag_names} are not the data's "
                             f"{data.tag_names}: a checkpoint or configuration made for other "
                             "data")
        if stage == "fit" and data.pretrained_matrix is not None:
            self.model.encoder.init_word_embeddings(data.pretrained_matrix)
            self.print(f"pretrained vectors: {data.pretrained_found} of {len(data.vocab)} words "
                       "found")

    # ------------------------------------------------------------------ steps

    def forward(self, batch: dict[str, torch.Tensor]) -> EasyFirstOutput:
        """The model's :class:`~lit_structattn.models.easy_first.EasyFirstOutput` for ``batch``
        (its encoder reads the affixes, capitalization and aligned source words only when its
        options ask for them)."""
        return self.model(batch["words"], batch["lengths"], batch["prefixes"], batch["suffixes"],
                          batch.get("aligned"), caps=batch["caps"])

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The model's mean sentence loss of ``batch``'s gold tags, weighted by ``tag_weights``."""
        return self._loss(self(batch), batch)

    def _loss(self, outputs: EasyFirstOutput, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.loss(outputs, batch["tags"], batch["lengths"],
                               tag_weights=self.loss_weights)

    def evaluate(self, batch: dict[str, torch.Tensor], split: str) -> tuple[torch.Tensor, int]:
        outputs = self(batch)
        loss = self._loss(outputs, batch)
        metrics = self.metrics[split]
        prediction = self.model.predict(outputs, batch["lengths"])
        metrics[self.hparams.metric].update(prediction, batch["tags"], batch["lengths"])
        if "first_step_on_verb" in metrics:
            metrics["first_step_on_verb"].update(outputs.attention, batch["tags"], outputs.steps)
        return loss, len(batch["words"])

    # ------------------------------------------------------------------ predictions

    def tag(self, sentences: str | Sequence[str | Sequence[str]], batch_size: int = 32, *,
            pretokenized: bool = False, sources: Sequence[str | Sequence[str]] | None = None,
            alignments: Sequence[str | Sequence[tuple[int, int]]] | None = None) -> list[dict]:
        """The tags of raw sentences, one :meth:`records` record per sentence, ``line`` (its
        1-based position in ``sentences``) first and ``words`` the words it tagged.

        A sentence is a string, split into words the way the training data was (the codec's
        ``tokenizer``: ``"I live in New York."`` -> ``I live in New York .``; with
        ``pretokenized``, on whitespace only), or its list of words, taken as they are; a bare
        string is one sentence. A blank sentence (whitespace, or no words) gives no record, as
        a blank line does for ``structattn predict``. A word-level QE model also reads, per
        (MT) sentence, its source sentence (``sources``, the same forms) and their alignment
        (``alignments``: ``"0-0 1-2"`` or ``(source i, MT j)`` pairs, 0-based); its sentences
        are words separated by whitespace, never tokenised (the alignment counts them). Errors
        name the sentence's position (``<input>:3: sentence of 120 words ...``)."""
        if isinstance(sentences, str):
            sentences, sources, alignments = [sentences], _one(sources), _one(alignments)
        sentences = list(sentences)
        for name, given in (("sources", sources), ("alignments", alignments)):
            if given is not None and len(given) != len(sentences):
                raise ValueError(f"{len(given)} {name} for {len(sentences)} sentences")
        codec = self.text_codec.pretokenized() if pretokenized else self.text_codec
        lines, examples = [], []
        for n, words in enumerate(sentences):
            if is_blank(words):
                continue
            with raw_input_at("<input>", n + 1):
                examples.append(codec.example(words, None if sources is None else sources[n],
                                              None if alignments is None else alignments[n]))
            lines.append(n + 1)
        return self.predict_examples(examples, batch_size, lines)

    def records(self, batch: dict[str, torch.Tensor],
                examples: Sequence[TaggedSentence] | None = None) -> list[dict]:
        """One JSON-ready record per sentence of ``batch`` (``examples``: its sentences, in
        the batch's order; None: the DataModule's test sentences at the batch's ``index``):

        - ``words``: the words it tagged, as read (tokenised; an unknown word too, not
          ``<unk>``); for word-level QE also ``source``, the source sentence's words;
        - ``tags``: the predicted tag of every word (Viterbi under a CRF, else the best tag);
        - ``attention [steps, T]``: the easy-first attention over the words at every sketch
          step (absent without sketch steps: the BiLSTM baselines);
        - with a CRF output layer, ``tag_names`` (the tags without the padding tag, ``K`` of
          them) and ``marginals [T, K]``: every word's marginal distribution over those tags.
        """
        if examples is None:  # a batch of the DataModule's predict split: its test sentences
            sentences = self.trainer.datamodule.datasets["test"].sentences
            examples = [sentences[i] for i in batch["index"].tolist()]
        outputs = self(batch)
        lengths = batch["lengths"]
        prediction = self.model.predict(outputs, lengths).tolist()
        steps = outputs.steps.tolist()
        marginals = names = None
        if self.model.crf:
            kept = [k for k in range(self.model.num_tags) if k != self.model.pad_tag]
            marginals = self.model.marginals(outputs, lengths)[..., kept]
            names = [self.tag_names[k] for k in kept]
        records = []
        for b, (example, length) in enumerate(zip(examples, lengths.tolist(), strict=True)):
            record = {"words": list(example.words)}
            if example.source is not None:
                record["source"] = list(example.source)
            record["tags"] = [self.tag_names[t] for t in prediction[b][:length]]
            if self.model.decoder is not None:
                record["attention"] = rounded(outputs.attention[b, : steps[b], :length])
            if marginals is not None:
                record["tag_names"] = names
                record["marginals"] = rounded(marginals[b, :length])
            records.append(record)
        return records

    @torch.no_grad()
    def attention_figures(self, batch: dict[str, torch.Tensor], vocab, limit: int) -> list:
        """Raindrop plots (attention of every sketch step, cumulative attention) of the first
        ``limit`` sentences of ``batch`` (for
        :class:`~lit_structattn.figures.callbacks.AttentionFigures`).
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
                f"{self.model.decoder.attention} attention per sketch step",
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


def _one(given: object | None) -> list | None:
    """``given`` (one sentence's source or alignment) as a list of one, or None."""
    return None if given is None else [given]


def fusable(optimizer: OptimizerCallable) -> bool:
    """Whether ``optimizer`` (an optimizer class, or the callable a config makes of one) takes
    ``fused`` and leaves it unset."""
    configured = getattr(optimizer, "keywords", None)  # a config's functools.partial
    if configured is not None:
        return "fused" in configured and configured["fused"] is None
    return "fused" in inspect.signature(optimizer).parameters


def weights_by_id(tag_names: Sequence[str],
                  tag_weights: Mapping[str, float] | None) -> torch.Tensor | None:
    """``[K]`` the loss weight of every tag id from ``tag_weights`` given by tag name (1 for the
    tags it does not name); None without ``tag_weights``."""
    if not tag_weights:
        return None
    unknown = set(tag_weights) - set(tag_names)
    if unknown:
        raise ValueError(f"tag_weights names unknown tags {sorted(unknown)}; tags: "
                         f"{list(tag_names)}")
    weights = [float(tag_weights.get(tag, 1.0)) for tag in tag_names]
    if any(w <= 0 for w in weights):
        raise ValueError(f"tag_weights must be positive, got {dict(tag_weights)}")
    return torch.tensor(weights)
