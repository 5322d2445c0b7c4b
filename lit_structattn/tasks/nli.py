"""Natural language inference (Kim et al. 2017, §4.4, A.5, Table 5): the decomposable attention
model with no, simple, structured, hard-parent or pretrained structured intra-sentence attention,
and any transform between the sentences.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torchmetrics.classification import MulticlassAccuracy

from ..common.rounding import rounded
from ..figures.plots import AttentionMap, Parse
from ..models.decomposable import SUPERVISED, DecomposableAttention, DecomposableOutput
from ..models.parser import DependencyParser
from .base import Task


class NLITask(Task):
    """Trains :class:`~lit_structattn.models.decomposable.DecomposableAttention` on the batches
    of :class:`lit_structattn.datamodules.nli.NLIDataModule` (``premise``, ``hypothesis``, their
    lengths, ``labels``).

    The model comes configured; its ``vocab_size``, ``num_classes`` and ``vector_dim`` come from
    the data (linked by the CLI, saved with the checkpoint). Before fitting, the task gives it
    the data's fixed vectors (if any) and, for ``hard_parent`` / ``pretrained_structured``, the
    supervised parser, trained in :meth:`prepare_data` (once, on local rank 0, cached) and only
    read from the cache in :meth:`configure_model`. A checkpoint records the parser's vocabulary
    size, so ``load_from_checkpoint`` rebuilds every variant without data or cache.

    The paper: Adagrad (lr 0.05, initial accumulator 0.1, ``configs/nli/base.yaml``), weights
    from ``N(0, init_std^2)``; clip the gradient norm at 5 with ``trainer.gradient_clip_val``
    (A.5). A frozen parser (``hard_parent``) is left out of the optimizer. Logs ``train/loss``,
    ``val/loss`` and ``{val,test}/accuracy``, the score.

    Args:
        model: the decomposable attention model: ``intra`` (``none``, ``simple``,
            ``structured``, ``hard_parent`` or ``pretrained_structured``), ``inter`` (any
            transform) and its sizes.
        parser_epochs: for ``hard_parent`` / ``pretrained_structured``, the epochs of the
            supervised parser on UD English-EWT (see :mod:`lit_structattn.prepare.parser`);
            its sizes are the model's ``parser`` options.
        parser_seed: the seed of that parser's training.
        optimizer, lr_scheduler: see :class:`~.base.Task`.
    """

    def __init__(
        self,
        model: DecomposableAttention,
        parser_epochs: int = 1,
        parser_seed: int = 0,
        optimizer: OptimizerCallable = torch.optim.Adagrad,
        lr_scheduler: LRSchedulerCallable | None = None,
    ) -> None:
        super().__init__(optimizer, lr_scheduler)
        self.save_hyperparameters()
        self.model = model
        classes = model.out.out_features
        self.declare_metrics("accuracy", {"accuracy": MulticlassAccuracy(classes, average="micro")})
        self.parser_uas: dict[str, float] | None = None  # of the attached supervised parser

    def _parser_settings(self) -> dict:
        """The cache key of the supervised parser
        (:func:`~lit_structattn.prepare.parser.parser_settings`): epochs, sizes, seed, its
        training options and the digest of the treebank's files."""
        from ..prepare.parser import parser_settings

        sizes = self.model.parser_options
        return parser_settings(self.hparams.parser_epochs, sizes.embed_dim, sizes.hidden_dim,
                               self.hparams.parser_seed)

    def prepare_data(self) -> None:
        """Train the supervised parser of ``hard_parent`` / ``pretrained_structured`` unless the
        cache has it (nothing for the other variants). Lightning runs this once per node, on
        local rank 0, before ``setup`` and :meth:`configure_model`, while the other processes
        wait; the cache file is named by the parser's settings and the treebank's content
        (:func:`~lit_structattn.prepare.parser.parser_path`), so no NLI data is needed here."""
        if self.model.intra in SUPERVISED:
            from ..prepare.parser import prepare_parser

            prepare_parser(self._parser_settings(), log=self.print)

    def configure_model(self) -> None:
        """Give the model what the set-up ``trainer.datamodule`` brings (:meth:`prepare_for`);
        nothing without a trainer (``load_from_checkpoint``: :meth:`on_load_checkpoint`)."""
        if self._trainer is not None:
            self.prepare_for(self.trainer.datamodule)

    def prepare_for(self, data) -> None:
        """Give the model the fixed vectors of ``data`` (a set-up
        :class:`~lit_structattn.datamodules.nli.NLIDataModule`), if it has any, and the cached
        supervised parser that its intra-sentence attention needs (``FileNotFoundError`` if it is
        not cached, see :meth:`prepare_data`); neither again once the model has them (trained
        further, or from a checkpoint)."""
        model = self.model
        if data.vectors is not None and not model.embedding.weight.any():  # not given yet
            model.load_vectors(data.vectors)
        if model.intra not in SUPERVISED or model.parser is not None:
            return
        from ..prepare.parser import build_parser, cached_parser

        record = cached_parser(self._parser_settings())
        parser, parser_vocab = build_parser(record)
        model.attach_parser(parser, torch.tensor([parser_vocab.id(w.lower())
                                                  for w in data.vocab.tokens]))
        self.parser_uas = record["uas"]

    @property
    def report_notes(self) -> dict[str, str]:
        """The supervised parser's training and accuracy, when the model has one from the
        cache."""
        notes = super().report_notes
        if self.parser_uas is not None:
            uas = self.parser_uas
            notes["supervised parser"] = (
                f"{self.hparams.parser_epochs} epoch(s) on UD English-EWT train, UAS dev "
                f"{100 * uas['dev']:.1f} / test {100 * uas['test']:.1f}")
        return notes

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.model.parser_ids is not None:  # a supervised parser: its vocabulary's size
            checkpoint["supervised_parser_vocab"] = self.model.parser.embedding.num_embeddings

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Without a trainer (``load_from_checkpoint``), attach a supervised parser of the
        saved size for the checkpoint's weights to fill."""
        size = checkpoint.get("supervised_parser_vocab")
        model = self.model
        if size is not None and model.parser is None:
            parser = DependencyParser(size, model.parser_options, bounded=False)
            model.attach_parser(parser, torch.zeros(model.embedding.num_embeddings,
                                                    dtype=torch.long))
        super().on_load_checkpoint(checkpoint)

    def forward(self, batch: dict[str, torch.Tensor]) -> DecomposableOutput:
        return self.model(batch["premise"], batch["premise_lengths"], batch["hypothesis"],
                          batch["hypothesis_lengths"])

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(self(batch).logits, batch["labels"])

    def evaluate(self, batch: dict[str, torch.Tensor], split: str) -> tuple[torch.Tensor, int]:
        logits = self(batch).logits
        self.metrics[split]["accuracy"].update(logits, batch["labels"])
        return F.cross_entropy(logits, batch["labels"]), len(logits)

    def classify(self, premises: Sequence[str], hypotheses: Sequence[str],
                 batch_size: int = 32) -> list[dict]:
        """The labels of raw pairs ``premises[i]``, ``hypotheses[i]`` (sentences, split into
        words as the data's): see :meth:`records`. ``ValueError`` unless there are as many
        hypotheses as premises, or for a tab or line break in a sentence. Two bare strings are
        one pair."""
        if isinstance(premises, str) and isinstance(hypotheses, str):
            premises, hypotheses = [premises], [hypotheses]
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises but {len(hypotheses)} hypotheses")
        bad = [s for s in (*premises, *hypotheses) if "\t" in s or "\n" in s]
        if bad:
            raise ValueError(f"a sentence holds a tab or a line break: {bad[0]!r}")
        lines = [f"{p}\t{h}" for p, h in zip(premises, hypotheses, strict=True)]
        return self.predict_text(lines, batch_size=batch_size)

    def records(self, batch: dict[str, torch.Tensor], examples: Sequence | None = None
                ) -> list[dict]:
        """One JSON-ready record per pair of ``batch``: ``premise`` and ``hypothesis`` (the
        vocabulary's words), ``label`` (the most likely), ``probabilities`` (label ->
        probability), ``attention [n, m]`` (every premise word's weights over the hypothesis
        words) and, with intra-sentence attention, ``parents [n, n + 1]`` (every premise word's
        distribution over its heads, the root ``$`` first: the soft parents, or the supervised
        parse's one-hot rows for ``hard_parent``)."""
        output = self(batch)
        codec = self.text_codec
        probabilities = output.logits.softmax(-1)
        records = []
        for b, (n, m) in enumerate(zip(batch["premise_lengths"].tolist(),
                                       batch["hypothesis_lengths"].tolist(), strict=True)):
            record = {
                "premise": codec.vocab.decode(batch["premise"][b, :n]),
                "hypothesis": codec.vocab.decode(batch["hypothesis"][b, :m]),
                "label": codec.labels[int(probabilities[b].argmax())],
                "probabilities": dict(zip(codec.labels, rounded(probabilities[b]), strict=True)),
                "attention": rounded(output.premise_attention[b, :n, :m]),
            }
            if output.premise_parents is not None:
                record["parents"] = rounded(output.premise_parents[b].T[1 : n + 1, : n + 1])
            records.append(record)
        return records

    @torch.no_grad()
    def attention_figures(self, batch: dict[str, torch.Tensor], vocab, limit: int) -> list:
        """Figures of the first ``limit`` pairs (for
        :class:`~lit_structattn.figures.callbacks.AttentionFigures`): the premise -> hypothesis
        attention and, with intra-sentence attention, the premise's soft parents (each row a
        word's distribution over heads, ``$`` = root) and its Eisner parse (the argmax tree of
        the parsing layer's scores; for ``hard_parent`` the supervised parse; drawn as a tree
        when it is not flat, see :func:`~lit_structattn.figures.plots.plot_latent_parse`)."""
        batch = {key: value[:limit] for key, value in batch.items()}
        output = self(batch)
        model = self.model
        heads = None
        if model.parser is not None:
            heads = model.parser.parse(model.parser_word_ids(batch["premise"]),
                                       batch["premise_lengths"])
        figures = []
        for b in range(len(batch["labels"])):
            n, m = int(batch["premise_lengths"][b]), int(batch["hypothesis_lengths"][b])
            premise = vocab.decode(batch["premise"][b, :n])
            hypothesis = vocab.decode(batch["hypothesis"][b, :m])
            figures.append((f"attention/example_{b}", AttentionMap(
                "premise -> hypothesis attention", output.premise_attention[b, :n, :m], premise,
                hypothesis)))
            if heads is not None:
                parents = output.premise_parents[b].T[1 : n + 1, : n + 1]
                figures.append((f"self_attention/example_{b}", AttentionMap(
                    "soft parents p(head | word)", parents, premise, ["$", *premise])))
                figures.append((f"parse/example_{b}", Parse(
                    "Eisner argmax parse", ["$", *premise], heads[b, : n + 1].tolist(), parents)))
        return figures
