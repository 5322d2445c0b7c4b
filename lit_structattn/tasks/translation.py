"""Machine translation with sparse and constrained attention (Malaviya et al. 2018) around
:class:`~lit_structattn.models.seq2seq.Seq2Seq`, on the batches of
:class:`~lit_structattn.datamodules.translation.TranslationDataModule`.

Logs ``train/loss`` (label-smoothed), ``val/loss``, ``val/ppl``, ``val/bleu`` and ``val/chrf``
(greedy decoding, every validation), and at test time (beam search) ``test/bleu``, ``test/chrf``,
``test/rep``, ``test/drop`` and ``test/ppl``. The sacreBLEU signatures and, with
``penalty_grid``, the COVPENALTY weights chosen on the validation set are kept in
``report_notes`` (the reproduction runner prints them under its table) and written with the
test translations to ``<log_dir>/test_translations.txt``.

With the data's ``fertility_strategy: predicted`` the task trains the fertility predictor (once
per corpus, cached; :mod:`lit_structattn.prepare.fertility`) in ``prepare_data`` and gives the
data its predicted fertilities in ``setup``.

A checkpoint translates raw sentences on its own (:meth:`TranslationTask.translate`, ``structattn
predict``): the data's :class:`~lit_structattn.datamodules.translation.TranslationCodec` travels in
it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info
from torchmetrics import MeanMetric

from ..common.constants import EOS
from ..common.optional import optional_import
from ..common.rounding import rounded
from ..datamodules.vocabulary import content_ids
from ..figures.plots import AttentionMap
from ..metrics.translation import bleu_chrf, drop_alignments, drop_score, rep_score
from ..models.fertility import FertilityPredictor
from ..models.seq2seq import Seq2Seq
from ..prepare.fertility import (
    give_predicted_fertilities,
    predictor_from_state,
    train_fertility_predictor,
)
from .base import Task


def _gather(items: list) -> list:
    """The items of every process, concatenated (a no-op without torch.distributed)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return items
    everyone: list[list] = [[] for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather_object(everyone, items)
    return [item for part in everyone for item in part]


def repeated_positions(tokens: Sequence[str]) -> list[int]:
    """Positions of tokens that occur earlier in ``tokens`` too (the repetitions to highlight)."""
    seen: set[str] = set()
    repeated = []
    for position, token in enumerate(tokens):
        if token in seen:
            repeated.append(position)
        seen.add(token)
    return repeated


class TranslationTask(Task):
    """An attentional BiLSTM-LSTM translation model trained with teacher forcing
    (``configs/translation/base.yaml`` configures the cpu-budget one).

    Args:
        model: the encoder-decoder (:class:`~lit_structattn.models.seq2seq.Seq2Seq`, BiLSTM
            encoder). Its vocabulary sizes and ``sink`` come from the data (linked by the CLI
            from the DataModule's ``src_vocab``, ``tgt_vocab``, ``joint_vocab`` and ``sink``);
            batches with a ``fertility`` tensor (GUIDED / PREDICTED) override its constant
            ``fertility``.
        optimizer, lr_scheduler: see :class:`~.base.Task` (the configurations: Adam 2e-3
            halved after every epoch from the 5th on).
        predictor_epochs: training epochs of the fertility predictor when the data's
            ``fertility_strategy`` is ``predicted`` (the authors: 10); unused otherwise.
        test_joint_k: the positions a joint output layer keeps for the perplexities and
            decoding (default: the model's ``joint_k``).
        label_smoothing: of the training loss (the validation loss and perplexity are plain;
            ``hard`` / ``sample_joint`` train without it).
        max_decode_len: decoding stops after ``min(max_decode_len, 2 S + 10)`` tokens.
        test_beam: beam size at test time (1 = greedy); validation decodes greedily.
        length_penalty, alpha, coverage_penalty, min_attention: the final ranking of the beams
            (:func:`~lit_structattn.models.seq2seq.rescore`; ``wu`` + ``coverage_penalty`` =
            COVPENALTY).
        penalty_grid: COVPENALTY with tuned weights: ``[alpha, beta]`` pairs tried on the
            validation set before testing (Wu et al.'s length penalty); the best BLEU wins.
        drop_score: compute the DROP score at test time (one eflomal run over train + test).
    """

    def __init__(
        self,
        model: Seq2Seq,
        optimizer: OptimizerCallable = torch.optim.Adam,
        lr_scheduler: LRSchedulerCallable | None = None,
        predictor_epochs: int = 5,
        test_joint_k: int | None = None,
        label_smoothing: float = 0.1,
        max_decode_len: int = 100,
        test_beam: int = 5,
        length_penalty: str = "avg",
        alpha: float = 1.0,
        coverage_penalty: float = 0.0,
        min_attention: float = 0.1,
        penalty_grid: list[tuple[float, float]] | None = None,
        drop_score: bool = True,
    ) -> None:
        super().__init__(optimizer, lr_scheduler)
        if drop_score:  # its word aligner comes with the translation extra
            optional_import("eflomal", "translation")
        self.save_hyperparameters()
        self.model = model
        self.nll = torch.nn.ModuleDict({split: MeanMetric() for split in ("val", "test")})
        self.penalty = {"alpha": alpha, "length_penalty": length_penalty,
                        "coverage_penalty": coverage_penalty, "min_attention": min_attention}
        self.report_notes: dict[str, str] = {}
        self._outputs: list[tuple[int, str]] = []

    # ---- set-up -------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Lightning calls this in one process per node, after the data's ``prepare_data``
        (which set the data up) and before any process's ``setup``: train and cache the
        fertility predictor if the data awaits predicted fertilities and the cache has none."""
        data = getattr(self.trainer, "datamodule", None)
        if getattr(data, "awaits_fertilities", False):
            train_fertility_predictor(data, self.hparams.predictor_epochs)

    def give_fertilities(self, data) -> None:
        """Give a set-up :class:`~lit_structattn.datamodules.translation.TranslationDataModule` that
        awaits predicted fertilities those of the cached predictor (trained first if missing); a
        no-op for other data. What :meth:`setup` does with the trainer's datamodule."""
        if getattr(data, "awaits_fertilities", False):
            give_predicted_fertilities(data, self.hparams.predictor_epochs)

    def setup(self, stage: str) -> None:
        """Check the model's vocabulary sizes and ``sink`` against the set-up data, then give
        it predicted fertilities if it awaits them (:meth:`give_fertilities`)."""
        data = getattr(self.trainer, "datamodule", None)
        subwords = getattr(data, "subwords", None)
        if subwords is not None:
            sizes = (("source", len(subwords), self.model.encoder.embed.num_embeddings),
                     ("target", subwords.target_size, self.model.tgt_embed.num_embeddings))
            for side, found, expected in sizes:
                if found != expected:
                    raise ValueError(
                        f"the data's {side} vocabulary has {found} symbols, the model's "
                        f"{expected}: " + ("sentencepiece stopped short of bpe_size on this "
                                            f"corpus; set --data.init_args.bpe_size {found}"
                                            if side == "source" else
                                            "a checkpoint or configuration made for other data"))
        data_sink = getattr(data, "sink", None)
        if data_sink is not None and data_sink != self.model.sink:
            raise ValueError(
                f"model sink={self.model.sink} but data.sink={data_sink}: the model's <SINK> "
                "handling needs the data to append the token (set both)"
            )
        self.give_fertilities(data)

    # ---- training -----------------------------------------------------------------------

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The training loss of ``batch`` (:meth:`Seq2Seq.loss`: label-smoothed, mean over the
        target tokens)."""
        return self.model.loss(batch["src"], batch["src_lengths"], batch["tgt_in"],
                               batch["tgt_out"], batch.get("fertility"),
                               label_smoothing=self.hparams.label_smoothing)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["src"]))
        return loss

    def _update_nll(self, batch: dict[str, torch.Tensor], split: str) -> None:
        """Accumulate the mean token NLL (for the loss and the perplexity)."""
        logits, _, _ = self.model(batch["src"], batch["src_lengths"], batch["tgt_in"],
                                  batch.get("fertility"), joint_k=self.hparams.test_joint_k)
        nll = F.cross_entropy(logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=0)
        self.nll[split].update(nll, weight=int((batch["tgt_out"] != 0).sum()))

    # ---- decoding -----------------------------------------------------------------------

    def _max_len(self, batch: dict[str, torch.Tensor]) -> int:
        return min(self.hparams.max_decode_len, 2 * int(batch["src_lengths"].max()) + 10)

    def greedy(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding of ``batch``: output ids ``[B, T']`` (0 after ``<eos>``) and the
        decoder's attention over the source at every step ``[B, T', S]``."""
        return self.model.greedy(batch["src"], batch["src_lengths"], self._max_len(batch),
                                 batch.get("fertility"), joint_k=self.hparams.test_joint_k)

    def decode(self, batch: dict[str, torch.Tensor], beam: int) -> torch.Tensor:
        """Output ids ``[B, T']`` (greedy for ``beam == 1``, else beam search ranked with the
        task's penalties)."""
        if beam <= 1:
            return self.greedy(batch)[0]
        return self.model.beams(batch["src"], batch["src_lengths"], self._max_len(batch),
                                beam=beam, fertility=batch.get("fertility"),
                                joint_k=self.hparams.test_joint_k).best(**self.penalty)

    def _collect(self, batch: dict[str, torch.Tensor], prediction: torch.Tensor) -> None:
        detokenize = self.trainer.datamodule.detokenize
        self._outputs += [(int(i), detokenize(row))
                          for i, row in zip(batch["index"], prediction, strict=True)]

    def _decoded(self) -> tuple[list[int], list[str]]:
        """The positions and translations this epoch decoded in every process, in dataset
        order (DDP pads the last shard by repeating examples: the repeats fold together)."""
        ordered = dict(sorted(_gather(self._outputs)))
        self._outputs = []
        return list(ordered), list(ordered.values())

    # ---- validation ---------------------------------------------------------------------

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update_nll(batch, "val")
        self._collect(batch, self.decode(batch, beam=1))

    def on_validation_epoch_end(self) -> None:
        nll = float(self.nll["val"].compute())
        self.nll["val"].reset()
        self.log_dict({"val/loss": nll, "val/ppl": math.exp(min(nll, 50.0))})
        indices, hypotheses = self._decoded()
        references = self.trainer.datamodule.references("val")
        scores = bleu_chrf(hypotheses, [references[i] for i in indices])
        self.log("val/bleu", scores["bleu"], prog_bar=True)
        self.log("val/chrf", scores["chrf"])

    # ---- test ---------------------------------------------------------------------------

    def _once(self, compute):
        """What ``compute()`` returns, computed by the first process only and sent to the
        others (under DDP, one-time work such as the penalty tuning and the word aligner runs
        once, not on every process)."""
        return self.trainer.strategy.broadcast(
            compute() if self.trainer.is_global_zero else None, src=0)

    def on_test_start(self) -> None:
        if self.hparams.penalty_grid:
            penalty, note = self._once(self._tune_coverage_penalty)
            self.penalty.update(penalty)
            self.report_notes["COVPENALTY"] = note
            rank_zero_info(note)

    @torch.no_grad()
    def _tune_coverage_penalty(self) -> tuple[dict, str]:
        """COVPENALTY: beam-search the validation set once, rank its final beams under every
        ``(alpha, beta)`` of the grid; returns the penalty settings of the pair with the best
        BLEU and a note of every pair's score."""
        data = self.trainer.datamodule
        loader = data.val_dataloader()
        limit = self.trainer.limit_val_batches  # as in validation: a count or a fraction
        count = int(limit) if isinstance(limit, int) else max(1, int(limit * len(loader)))
        beams = []
        for batch in itertools.islice(loader, count):
            batch = self.transfer_batch_to_device(batch, self.device, 0)
            beams.append((batch["index"], self.model.beams(
                batch["src"], batch["src_lengths"], self._max_len(batch),
                beam=self.hparams.test_beam, fertility=batch.get("fertility"),
                joint_k=self.hparams.test_joint_k)))
        references = data.references("val")
        scores = {}
        for alpha, beta in self.hparams.penalty_grid:
            outputs = {}
            for index, found in beams:
                best = found.best(alpha, "wu", beta, self.hparams.min_attention)
                outputs.update((int(i), data.detokenize(row))
                               for i, row in zip(index, best, strict=True))
            hypotheses = [outputs[i] for i in sorted(outputs)]
            chosen = [references[i] for i in sorted(outputs)]
            scores[(alpha, beta)] = bleu_chrf(hypotheses, chosen)["bleu"]
        alpha, beta = max(scores, key=scores.get)
        note = ("alpha, beta tuned on validation BLEU over "
                + ", ".join(f"({a}, {b}): {s:.1f}" for (a, b), s in scores.items())
                + f"; chosen ({alpha}, {beta})")
        return {"alpha": alpha, "length_penalty": "wu", "coverage_penalty": beta}, note

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update_nll(batch, "test")
        self._collect(batch, self.decode(batch, beam=self.hparams.test_beam))

    def on_test_epoch_end(self) -> None:
        nll = float(self.nll["test"].compute())
        self.nll["test"].reset()
        data = self.trainer.datamodule
        indices, hypotheses = self._decoded()
        references = [data.references("test")[i] for i in indices]
        scores = bleu_chrf(hypotheses, references)
        words = data.subwords.words
        lang = data.hparams.tgt_lang
        metrics = {
            "test/bleu": scores["bleu"], "test/chrf": scores["chrf"],
            "test/rep": rep_score([words(h, lang) for h in hypotheses],
                                  [words(r, lang) for r in references]),
            "test/ppl": math.exp(min(nll, 50.0)),
        }
        if self.hparams.drop_score:  # eflomal over train + test: once, not on every process
            metrics["test/drop"] = self._once(lambda: self._drop(data, hypotheses, indices))
        self.log_dict(metrics)
        self.report_notes["BLEU"] = scores["bleu_signature"]
        self.report_notes["chrF"] = scores["chrf_signature"]
        log_dir = self.trainer.log_dir  # in every process: DDP broadcasts it from the first
        if self.trainer.is_global_zero and log_dir:
            path = Path(log_dir) / "test_translations.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
            rank_zero_info(f"test translations written to {path}; BLEU {scores['bleu']:.2f} "
                           f"({scores['bleu_signature']})")

    @staticmethod
    def _drop(data, hypotheses: list[str], indices: list[int]) -> float:
        """The DROP score of ``hypotheses``, the translations of the test pairs ``indices``
        (words: the data's lowercased Moses tokens; aligned with the training pairs)."""
        words, h = data.subwords.words, data.hparams
        test = [data.datasets["test"].pairs[i] for i in indices]
        train = [(words(s, h.src_lang), words(t, h.tgt_lang))
                 for s, t in data.datasets["train"].pairs]
        return drop_score(*drop_alignments(
            train, [words(s, h.src_lang) for s, _ in test],
            [words(t, h.tgt_lang) for _, t in test],
            [words(t, h.tgt_lang) for t in hypotheses], h.aligner_iterations))

    # ---- raw sentences, figures and predictions ----------------------------------------

    def translate(self, sentences: Sequence[str], batch_size: int = 32) -> list[dict]:
        """Greedy translations of raw source sentences (untokenized text, one per item; blank
        ones are skipped): one :meth:`records` record per sentence. Errors name the sentence's
        position (``<input>:3``)."""
        return self.predict_text(sentences, batch_size=batch_size)

    def records(self, batch: dict[str, torch.Tensor], examples: Sequence | None = None
                ) -> list[dict]:
        """One JSON-ready record per source of ``batch``, decoded greedily (the validation
        decoding; ``test_beam`` is not used): ``source`` (the raw sentence of ``examples``, the
        parsed :class:`~lit_structattn.datamodules.translation.SourceSentence`; without them the
        detokenized source), ``translation`` (detokenized), ``source_pieces`` (the source subwords
        or characters, without ``<sink>``), ``target_pieces`` (the output subwords or words, up to
        ``<eos>``) and ``attention [len(target_pieces) + 1, len(source_pieces) (+ 1 for the
        <sink>)]``: the decoder's distribution over the source at every output step, ``<eos>``
        last (sparse and constrained attentions have exact zeros)."""
        return [{**record, "attention": rounded(record["attention"])}
                for record in self._greedy_records(batch, examples)]

    def _greedy_records(self, batch: dict[str, torch.Tensor], examples: Sequence | None = None
                        ) -> list[dict]:
        """:meth:`records` with every ``attention`` the tensor itself (not rounded: the
        figures tell exact zeros from small weights)."""
        subwords, sink = self.text_codec.subwords, int(self.text_codec.sink)
        prediction, attention = self.greedy(self.with_fertility(batch))
        records = []
        for b, length in enumerate(batch["src_lengths"].tolist()):
            ids = prediction[b].tolist()
            target = subwords.target_pieces(content_ids(ids, self.model.eos_id, ()))
            source = batch["src"][b, : length - sink].tolist()
            records.append({
                "source": (examples[b].text if examples is not None
                           else subwords.decode(source, subwords.src_lang)),
                "translation": subwords.decode(ids, subwords.tgt_lang),
                "source_pieces": subwords.pieces(source),
                "target_pieces": target,
                "attention": attention[b, : len(target) + 1, :length],
            })
        return records

    def with_fertility(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``batch`` with ``fertility [B, S]`` when it lacks one and the model was trained with
        PREDICTED fertilities (a batch of raw sentences): the codec's predictor's expected
        fertility + 1 of every source subword, 1.0 for the ``<sink>``, 0 at padding, as the
        data got them in training (:func:`~lit_structattn.prepare.fertility.
        give_predicted_fertilities`). Any other batch is returned as it is."""
        if "fertility" in batch or self.fertility_predictor is None:
            return batch
        src, lengths = batch["src"], batch["src_lengths"]
        sink = self.text_codec.sink
        predictor = self.fertility_predictor.to(src.device)
        fertility = predictor.expected(src, lengths - int(sink))  # 0 at the sink and padding
        if sink:
            fertility[torch.arange(len(src), device=src.device), lengths - 1] = 1.0
        return {**batch, "fertility": fertility}

    @cached_property
    def fertility_predictor(self) -> FertilityPredictor | None:
        """The text codec's fertility predictor (PREDICTED fertilities; None otherwise), built
        once. Kept out of the task's weights: it travels in the codec."""
        state = self.text_codec.predictor
        return None if state is None else predictor_from_state(state)

    @torch.no_grad()
    def attention_figures(self, batch: dict[str, torch.Tensor], vocab, limit: int) -> list:
        """Target x source attention of greedy decoding for the first ``limit`` examples
        (subword labels; white = exactly zero; repeated output subwords in red), for
        :class:`~lit_structattn.figures.callbacks.AttentionFigures` (the task's text codec names the
        pieces; ``vocab`` is not needed)."""
        records = self._greedy_records({k: v[:limit] for k, v in batch.items()})
        sink = ["<sink>"] * int(self.text_codec.sink)
        figures = []
        for b, r in enumerate(records):
            output = [*r["target_pieces"], EOS][: len(r["attention"])]
            figures.append((f"attention/example_{b}", AttentionMap(
                f"{self.model.attention_name} attention (greedy)", r["attention"].float().cpu(),
                output, r["source_pieces"] + sink, repeated_positions(output))))
        return figures

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> list[dict]:
        """:meth:`records` of a batch of the DataModule's predict split."""
        return self.records(batch)
