"""Natural language inference (Kim et al. 2017, §4.4, A.5, Table 5): the decomposable attention
model with no, simple, structured, hard-parent or pretrained structured intra-sentence attention,
and any transform between the sentences.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torchmetrics.classification import MulticlassAccuracy

from ..figures import AttentionMap
from ..layers import registry
from ..models.decomposable import SUPERVISED, DecomposableAttention, DecomposableOutput
from .base import Task


class NLITask(Task):
    """Trains :class:`~lit_structattn.models.decomposable.DecomposableAttention` on the batches
    of :class:`datamodules.nli.NLIDataModule` (``premise``, ``hypothesis``, their lengths,
    ``labels``). The model is built in :meth:`configure_model` from the data's vocabulary and
    pretrained vectors (if any); the supervised parser of ``hard_parent`` /
    ``pretrained_structured`` is trained in :meth:`prepare_data` (once, on local rank 0, cached)
    and only read from the cache when the model is built.

    The paper: Adagrad (lr 0.05, initial accumulator 0.1, ``configs/nli/base.yaml``), weights
    from ``N(0, init_std^2)``; clip the gradient norm at 5 with ``trainer.gradient_clip_val``
    (A.5). A frozen parser (``pretrained_structured``) is left out of the optimizer. Logs
    ``train/loss``, ``val/loss``, ``val/accuracy`` and ``test/accuracy``.

    Args:
        intra: the intra-sentence attention (``registry.FAMILIES["nli"]["intra"]``): ``none``,
            ``simple``, ``structured``, ``hard_parent`` or ``pretrained_structured``.
        inter: the inter-sentence transform (``registry.FAMILIES["nli"]["inter"]``):
            ``softmax`` (the paper's), ``sparsemax``, ``csoftmax``, ``csparsemax`` or
            ``sigmoid``; the constrained ones with the bounds of
            :class:`~lit_structattn.models.decomposable.DecomposableAttention`.
        parser_epochs: for ``hard_parent`` / ``pretrained_structured``, the epochs of the
            supervised parser on UD English-EWT (trained once by :meth:`prepare_data` and
            cached, see :mod:`lit_structattn.parser_training`); its sizes are
            ``parser_embed_dim`` and ``parser_dim``.
        parser_seed: the seed of that parser's training.
        optimizer, lr_scheduler: see :class:`~.base.Task`.
        Others: see :class:`~lit_structattn.models.decomposable.DecomposableAttention`.
    """

    def __init__(
        self,
        intra: registry.IntraAttentionName = "none",
        inter: registry.InterAttentionName = "softmax",
        embed_dim: int = 300,
        hidden_dim: int = 300,
        dropout: float = 0.2,
        parser_embed_dim: int = 100,
        parser_dim: int = 100,
        parser_epochs: int = 1,
        parser_seed: int = 0,
        init_std: float | None = 0.01,
        optimizer: OptimizerCallable = torch.optim.Adagrad,
        lr_scheduler: LRSchedulerCallable | None = None,
    ) -> None:
        super().__init__(optimizer, lr_scheduler)
        registry.check_attention("nli", "intra", intra)
        registry.check_attention("nli", "inter", inter)
        self.save_hyperparameters()
        self.model: DecomposableAttention | None = None
        self.accuracy = torch.nn.ModuleDict()
        self.report_notes: dict[str, str] = {}

    def prepare_data(self) -> None:
        """Train the supervised parser of ``hard_parent`` / ``pretrained_structured`` unless the
        cache has it (nothing for the other variants). Lightning runs this once per node, on
        local rank 0, before ``setup`` and :meth:`configure_model`, while the other processes
        wait; the cache file is named by the hyper-parameters alone
        (:func:`~lit_structattn.parser_training.parser_path`), so no data or model is needed
        here."""
        h = self.hparams
        if h.intra in SUPERVISED:
            from ..parser_training import prepare_parser

            prepare_parser(h.parser_epochs, h.parser_embed_dim, h.parser_dim, h.parser_seed,
                           log=self.print)

    def configure_model(self) -> None:
        """Build the model for the vocabulary (and vectors) of ``trainer.datamodule``; a
        supervised parser is read from the cache that :meth:`prepare_data` filled (never
        trained here)."""
        if self.model is None:
            self.build_for(self.trainer.datamodule)

    def build_for(self, data) -> None:
        """Build the model for the vocabulary, labels and vectors of ``data`` (a set-up
        :class:`~datamodules.nli.NLIDataModule`); ``FileNotFoundError`` if a supervised parser
        is needed and not cached (see :meth:`prepare_data`)."""
        h = self.hparams
        parser = parser_ids = None
        if h.intra in SUPERVISED:
            from ..parser_training import build_parser, cached_parser

            record = cached_parser(h.parser_epochs, h.parser_embed_dim, h.parser_dim,
                                   h.parser_seed)
            parser, parser_vocab = build_parser(record)
            parser_ids = torch.tensor([parser_vocab.id(w.lower()) for w in data.vocab.tokens])
            uas = record["uas"]
            self.report_notes["supervised parser"] = (
                f"{h.parser_epochs} epoch(s) on UD English-EWT train, UAS dev "
                f"{100 * uas['dev']:.1f} / test {100 * uas['test']:.1f}")
        self.model = DecomposableAttention(
            len(data.vocab), len(data.labels), h.embed_dim, h.hidden_dim, h.intra, h.dropout,
            vectors=data.vectors, parser_embed_dim=h.parser_embed_dim, parser_dim=h.parser_dim,
            parser=parser, parser_ids=parser_ids, init_std=h.init_std, inter=h.inter)
        self.accuracy = torch.nn.ModuleDict(
            {split: MulticlassAccuracy(len(data.labels), average="micro")
             for split in ("val", "test")})

    def forward(self, batch: dict[str, torch.Tensor]) -> DecomposableOutput:
        return self.model(batch["premise"], batch["premise_lengths"], batch["hypothesis"],
                          batch["hypothesis_lengths"])

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch).logits, batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def _evaluate(self, batch: dict[str, torch.Tensor], split: str) -> None:
        logits, size = self(batch).logits, len(batch["labels"])
        if split == "val":
            loss = F.cross_entropy(logits, batch["labels"])
            self.log("val/loss", loss, sync_dist=True, batch_size=size)
        metric = self.accuracy[split]
        metric(logits, batch["labels"])
        self.log(f"{split}/accuracy", metric, prog_bar=True, batch_size=size)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> list[dict]:
        labels = self.trainer.datamodule.labels
        predicted = self(batch).logits.argmax(-1).tolist()
        return [{"index": i, "prediction": labels[p]}
                for i, p in zip(batch["index"].tolist(), predicted, strict=True)]

    @torch.no_grad()
    def attention_figures(self, batch: dict[str, torch.Tensor], vocab, limit: int) -> list:
        """Figures of the first ``limit`` pairs (for
        :class:`~lit_structattn.callbacks.AttentionFigures`): the premise -> hypothesis
        attention and, with intra-sentence attention, the premise's soft parents (each row a
        word's distribution over heads, ``$`` = root) and its Eisner parse (the argmax tree of
        the parsing layer's scores; for ``hard_parent`` the supervised parse)."""
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
                figures.append((f"self_attention/example_{b}", AttentionMap(
                    "soft parents p(head | word)", output.premise_parents[b].T[1 : n + 1, : n + 1],
                    premise, ["$", *premise])))
                figures.append((f"parse/example_{b}", (["$", *premise], heads[b, : n + 1].tolist(),
                                                       "Eisner argmax parse")))
        return figures
