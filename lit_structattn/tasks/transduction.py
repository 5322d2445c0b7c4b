"""Transduction of symbol sequences (tree transduction, morphological inflection): training and
evaluation of :class:`~lit_structattn.models.seq2seq.Seq2Seq` on one shared vocabulary.

Batches: ``src [B, S]``, ``src_lengths [B]``, ``tgt_in [B, T]`` (``<bos>`` + target),
``tgt_out [B, T]`` (target + ``<eos>``), ``tgt_lengths [B]`` and, for tree transduction,
``depth [B]``. Logs ``train/loss``, ``val/loss`` and, with ``metric="length_to_failure"``,
``{val,test}/ltf`` (over all depths, the score) and ``{val,test}/ltf_d{depth}``; with
``metric="exact_match"`` (morphological inflection) ``{val,test}/accuracy``, the score.
Validation decodes greedily, the test with beam search by default (as Kim et al.).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable

from ..common.checks import check_choice
from ..common.constants import EOS
from ..common.rounding import rounded
from ..figures.plots import AttentionMap, Parse
from ..metrics import ExactMatch, LengthToFailure
from ..models.seq2seq import Seq2Seq
from .base import Task

METRICS = ("length_to_failure", "exact_match")
MetricName = Literal[METRICS]  # the names as the type of the constructor argument


class LengthToFailureByDepth(LengthToFailure):
    """:class:`~lit_structattn.metrics.LengthToFailure` by logged name: ``ltf`` over all
    depths and ``ltf_d{depth}`` for every depth seen."""

    def compute(self) -> dict[str, torch.Tensor]:
        return {"ltf" if depth == "all" else f"ltf_d{depth}": value
                for depth, value in super().compute().items()}


class TransductionTask(Task):
    """Trains an attentional encoder-decoder with teacher forcing.

    Args:
        model: the encoder-decoder; its vocabulary sizes come from the data (linked by the
            CLI from the DataModule's ``src_vocab`` / ``tgt_vocab``).
        optimizer, lr_scheduler: see :class:`~.base.Task` (the paper: SGD lr 1, halved every
            epoch after epoch 9, ``configs/tree_transduction/base.yaml``).
        max_decode_len: decoding stops after this many tokens.
        test_beam: beam size at test time (1 = greedy); validation decodes greedily.
        test_joint_k: the positions a joint output layer keeps at validation and test time
            (default: the model's ``joint_k``).
        metric: ``length_to_failure`` (per formula depth) or ``exact_match``.
        max_depth: largest formula depth reported by the length-to-failure metric.
    """

    def __init__(
        self,
        model: Seq2Seq,
        optimizer: OptimizerCallable = torch.optim.SGD,
        lr_scheduler: LRSchedulerCallable | None = None,
        max_decode_len: int = 200,
        test_beam: int = 5,
        test_joint_k: int | None = None,
        metric: MetricName = "length_to_failure",
        max_depth: int = 6,
    ) -> None:
        super().__init__(optimizer, lr_scheduler)
        check_choice("metric", metric, METRICS)
        self.save_hyperparameters()
        self.model = model
        if metric == "length_to_failure":
            self.declare_metrics("ltf", {"ltf": LengthToFailureByDepth(max_depth)})
        else:
            self.declare_metrics("accuracy", {"accuracy": ExactMatch()})

    def setup(self, stage: str) -> None:
        self.check_vocab_size(self.model.encoder.embed.num_embeddings)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.loss(batch["src"], batch["src_lengths"], batch["tgt_in"],
                               batch["tgt_out"])

    def token_nll(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The validation loss: the mean token NLL of the model's deterministic output layer
        (for ``hard`` / ``sample_joint``: the one they decode with)."""
        logits, _, _ = self.model(batch["src"], batch["src_lengths"], batch["tgt_in"])
        return F.cross_entropy(logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=0)

    def decode(self, batch: dict[str, torch.Tensor], beam: int) -> torch.Tensor:
        """Predicted target ids ``[B, T']`` (greedy for ``beam == 1``), beam-joint keeping
        ``test_joint_k`` positions."""
        args = (batch["src"], batch["src_lengths"], self.hparams.max_decode_len)
        joint_k = self.hparams.test_joint_k
        if beam <= 1:
            return self.model.greedy(*args, joint_k=joint_k)[0]
        return self.model.beam_search(*args, beam=beam, joint_k=joint_k)

    def evaluate(self, batch: dict[str, torch.Tensor], split: str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Decodes greedily for validation, with ``test_beam`` for the test."""
        loss = self.token_nll(batch)
        prediction = self.decode(batch, beam=1 if split == "val" else self.hparams.test_beam)
        by_depth = (batch["depth"],) if self.hparams.metric == "length_to_failure" else ()
        self.metrics[split][self.score_name].update(prediction, batch["tgt_out"],
                                                    batch["tgt_lengths"], *by_depth)
        return loss, (batch["tgt_out"] != 0).sum()

    def transduce(self, sources: Sequence[str], batch_size: int = 32) -> list[dict]:
        """Greedy predictions for raw sources, one per line of the data's format (a prefix
        formula ``( + 1 ( * 2 3 ) )``; for inflection ``lemma,feature_bundle``): see
        :meth:`records`. Errors name the source's position (``<input>:3``)."""
        return self.predict_text(sources, batch_size=batch_size)

    def records(self, batch: dict[str, torch.Tensor], examples: Sequence | None = None
                ) -> list[dict]:
        """One JSON-ready record per source of ``batch``: ``input`` and ``prediction`` (greedy)
        as space-separated symbols, ``attention [len(prediction) + 1, S]`` (the decoder's
        distribution over the source at every output step, ``<eos>`` last; the marginals of
        a structured attention) and, with a syntactic encoder, ``parents [S, S + 1]`` (every
        source word's marginal distribution over its heads, the root ``$`` first)."""
        src, lengths = batch["src"], batch["src_lengths"]
        prediction, attention, parents = self._greedy_and_parents(src, lengths)
        decode = self.text_codec.decode
        records = []
        for b, length in enumerate(lengths.tolist()):
            target = decode(prediction[b])
            record = {"input": " ".join(decode(src[b, :length])),
                      "prediction": " ".join(target),
                      "attention": rounded(attention[b, : len(target) + 1, :length])}
            if parents is not None:
                record["parents"] = rounded(parents[b].T[1 : length + 1, : length + 1])
            records.append(record)
        return records

    def _greedy_and_parents(self, src: torch.Tensor, lengths: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Greedy decoding of ``src [B, S]`` (``lengths [B]``): ``prediction [B, T']``,
        ``attention [B, T', S]`` and, with a syntactic encoder, the soft-parent marginals
        ``[B, S + 1, S + 1]`` (head x word, the root first; None without)."""
        prediction, attention = self.model.greedy(src, lengths, self.hparams.max_decode_len,
                                                  joint_k=self.hparams.test_joint_k)
        syntactic = self.model.encoder.syntactic
        parents = None
        if syntactic is not None:
            parents = syntactic(self.model.encoder.embed(src), lengths).marginals
        return prediction, attention, parents

    @torch.no_grad()
    def attention_figures(self, batch: dict[str, torch.Tensor], vocab, limit: int) -> list:
        """Figures of the first ``limit`` examples (for
        :class:`~lit_structattn.figures.callbacks.AttentionFigures`): target x source attention of
        greedy decoding, and with syntactic attention the source self-attention (each row a
        word's distribution over parents, ``$`` = root) and the Eisner parse (drawn as a tree
        when it is not flat, see :func:`~lit_structattn.figures.plots.plot_latent_parse`)."""
        src, lengths = batch["src"][:limit], batch["src_lengths"][:limit]
        prediction, attention, marginals = self._greedy_and_parents(src, lengths)
        decode = (vocab if vocab is not None else self.text_codec).decode
        heads = None
        if marginals is not None:
            heads = self.model.encoder.syntactic.parse(self.model.encoder.embed(src), lengths)
        figures = []
        for b in range(len(src)):
            source = decode(src[b, : lengths[b]])
            target = decode(prediction[b]) + [EOS]
            figures.append((f"attention/example_{b}", AttentionMap(
                "decoder attention (greedy)", attention[b, : len(target)], target, source)))
            if heads is not None:
                n = int(lengths[b])
                parents = marginals[b].T[1 : n + 1, : n + 1]
                figures.append((f"self_attention/example_{b}", AttentionMap(
                    "soft parents p(head | word)", parents, source, ["$", *source])))
                figures.append((f"parse/example_{b}", Parse(
                    "Eisner argmax parse", ["$", *source], heads[b, : n + 1].tolist(), parents)))
        return figures
