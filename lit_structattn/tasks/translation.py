"""Machine translation with sparse and constrained attention (Malaviya et al. 2018) around
an encoder-decoder (:class:`~lit_structattn.models.seq2seq.EncoderDecoder`: the LSTM
:class:`~lit_structattn.models.seq2seq.Seq2Seq` or a Transformer), on the batches of
:class:`~lit_structattn.datamodules.translation.TranslationDataModule`.

Logs ``train/loss`` (label-smoothed), ``val/loss``, ``val/ppl``, ``val/bleu`` (the score) and
``val/chrf`` (greedy decoding, every validation), and at test time (beam search) ``test/bleu``
(the score), ``test/chrf``, ``test/rep``, ``test/drop``, ``test/ppl`` and ``test/sparsity`` (the
share of exactly zero weights in the model's attention over the source, teacher-forced on the
references); the test translations
go to ``<log_dir>/test_translations.txt``. The sacreBLEU signatures and, with ``penalty_grid``,
the COVPENALTY weights chosen on the validation set are the task's ``report_notes`` (the
reproduction runner prints them under its table). What the task reads of its DataModule is
:class:`TranslationData`.

With the data's ``fertility_strategy: predicted`` the task trains the fertility predictor (once
per corpus, cached; :mod:`lit_structattn.prepare.fertility`) in ``prepare_data`` and gives the
data its predicted fertilities in ``setup``.

A checkpoint translates raw sentences on its own (:meth:`TranslationTask.translate`, ``structattn
predict``): the data's :class:`~lit_structattn.datamodules.translation.TranslationCodec` travels in
it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property, partial
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import AttributeDict, rank_zero_info

from ..common.constants import EOS
from ..common.masks import lengths_to_mask
from ..common.optional import optional_import
from ..common.rounding import rounded
from ..datamodules.subwords import Subwords
from ..datamodules.translation import TranslationDataset
from ..datamodules.vocabulary import content_ids
from ..figures.plots import AttentionMap
from ..metrics.translation import (
    AttentionSparsity,
    BleuChrf,
    BleuPerSetting,
    DropScore,
    RepScore,
    TokenPerplexity,
)
from ..models.fertility import FertilityPredictor
from ..models.seq2seq import Beams, EncoderDecoder
from ..prepare.fertility import (
    give_predicted_fertilities,
    predictor_from_state,
    train_fertility_predictor,
)
from .base import Task


class TranslationData(Protocol):
    """What :class:`TranslationTask` reads of its DataModule
    (:class:`~lit_structattn.datamodules.translation.TranslationDataModule` is one; the
    fertility preparation of :mod:`lit_structattn.prepare.fertility` reads more of it)."""

    subwords: Subwords  # once set up: sizes, detokenization, the words of a sentence
    datasets: Mapping[str, TranslationDataset]  # once set up: the raw pairs of every split
    hparams: AttributeDict  # aligner_iterations: the DROP aligner's

    @property
    def sink(self) -> bool: ...  # whether every source ends with <SINK>

    @property
    def awaits_fertilities(self) -> bool: ...  # PREDICTED fertilities not given yet

    def detokenize(self, ids: Sequence[int] | torch.Tensor) -> str: ...

    def references(self, split: str) -> list[str]: ...


def word_pairs(data: TranslationData, split: str) -> list[tuple[list[str], list[str]]]:
    """The pairs of ``split`` as word lists (the data's lowercased Moses tokens), what the DROP
    aligner reads."""
    words, subwords = data.subwords.words, data.subwords
    return [(words(s, subwords.src_lang), words(t, subwords.tgt_lang))
            for s, t in data.datasets[split].pairs]


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
    """An attentional encoder-decoder trained with teacher forcing
    (``configs/translation/base.yaml`` configures the cpu-budget BiLSTM-LSTM one,
    ``configs/translation/transformer.yaml`` a small Transformer).

    Args:
        model: the encoder-decoder (an :class:`~lit_structattn.models.seq2seq.EncoderDecoder`:
            :class:`~lit_structattn.models.seq2seq.Seq2Seq`, BiLSTM encoder, or
            :class:`~lit_structattn.models.seq2seq.TransformerSeq2Seq`). Its vocabulary sizes
            and ``sink`` come from the data (linked by the CLI from the DataModule's
            ``src_vocab``, ``tgt_vocab``, ``joint_vocab`` and ``sink``); batches with a
            ``fertility`` tensor (GUIDED / PREDICTED) override the LSTM's constant
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
        penalty_grid: COVPENALTY with tuned weights: ``[alpha, beta]`` pairs (Wu et al.'s
            length penalty) tried on the validation set; the best BLEU wins. Every validation
            then also ranks its final beams (``test_beam``) under each pair, and the test
            validates first (:meth:`on_test_start`).
        drop_score: compute the DROP score at test time (one eflomal run over train + test).
    """

    def __init__(
        self,
        model: EncoderDecoder,
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
        self.declare_metrics("bleu", {"ppl": TokenPerplexity(), "sacrebleu": BleuChrf()},
                             {"rep": RepScore(), "sparsity": AttentionSparsity(),
                              **({"drop": DropScore()} if drop_score else {})})
        self.penalty = {"alpha": alpha, "length_penalty": length_penalty,
                        "coverage_penalty": coverage_penalty, "min_attention": min_attention}
        # COVPENALTY: the BLEU of every (alpha, beta) of the grid on the validation set
        self.penalty_search = BleuPerSetting() if penalty_grid else None
        self.penalty_scores: dict[tuple[float, float], float] = {}

    # ---- set-up -------------------------------------------------------------------------

    @property
    def data(self) -> TranslationData:
        """The trainer's DataModule (``RuntimeError`` without one: the task reads the data's
        references, subwords and fertilities)."""
        data = self.trainer.datamodule
        if data is None:
            raise RuntimeError(f"{type(self).__name__} needs a DataModule: "
                               "trainer.fit/validate/test(task, datamodule=...)")
        return data

    def prepare_data(self) -> None:
        """Lightning calls this in one process per node, after the data's ``prepare_data``
        (which set the data up) and before any process's ``setup``: train and cache the
        fertility predictor if the data awaits predicted fertilities and the cache has none."""
        data: TranslationData | None = self.trainer.datamodule
        if data is not None and data.awaits_fertilities:
            train_fertility_predictor(data, self.hparams.predictor_epochs)

    def give_fertilities(self, data: TranslationData) -> None:
        """Give a set-up :class:`~lit_structattn.datamodules.translation.TranslationDataModule` that
        awaits predicted fertilities those of the cached predictor (trained first if missing); a
        no-op for other data. What :meth:`setup` does with the trainer's datamodule."""
        if data.awaits_fertilities:
            give_predicted_fertilities(data, self.hparams.predictor_epochs)

    def setup(self, stage: str) -> None:
        """Check the model's vocabulary sizes and ``sink`` against the set-up data, give it
        predicted fertilities if it awaits them (:meth:`give_fertilities`), and the DROP score
        the training pairs to align with. Nothing without a DataModule."""
        data: TranslationData | None = self.trainer.datamodule
        if data is None:
            return
        sizes = (("source", len(data.subwords), self.model.encoder.embed.num_embeddings),
                 ("target", data.subwords.target_size, self.model.tgt_embed.num_embeddings))
        for side, found, expected in sizes:
            if found != expected:
                raise ValueError(
                    f"the data's {side} vocabulary has {found} symbols, the model's "
                    f"{expected}: " + ("sentencepiece stopped short of bpe_size on this "
                                        f"corpus; set --data.init_args.bpe_size {found}"
                                        if side == "source" else
                                        "a checkpoint or configuration made for other data"))
        if data.sink != self.model.sink:
            raise ValueError(
                f"model sink={self.model.sink} but data.sink={data.sink}: the model's <SINK> "
                "handling needs the data to append the token (set both)"
            )
        self.give_fertilities(data)
        if "drop" in self.metrics["test"]:
            drop = self.metrics["test"]["drop"]
            drop.context, drop.iterations = (partial(word_pairs, data, "train"),
                                             data.hparams.aligner_iterations)

    # ---- training -----------------------------------------------------------------------

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The training loss of ``batch`` (the model's ``loss``: label-smoothed, mean over the
        target tokens)."""
        return self.model.loss(batch["src"], batch["src_lengths"], batch["tgt_in"],
                               batch["tgt_out"], batch.get("fertility"),
                               label_smoothing=self.hparams.label_smoothing)

    def _update_nll(self, batch: dict[str, torch.Tensor], split: str
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean token NLL of ``batch`` and its number of target tokens (the validation
        loss), accumulated in the perplexity of ``split`` (and the test's attention sparsity)."""
        logits, weights, _ = self.model(batch["src"], batch["src_lengths"], batch["tgt_in"],
                                  batch.get("fertility"), joint_k=self.hparams.test_joint_k)
        nll = F.cross_entropy(logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=0)
        tokens = (batch["tgt_out"] != 0).sum()
        self.metrics[split]["ppl"].update(nll, weight=tokens)
        if "sparsity" in self.metrics[split]:
            real_source = lengths_to_mask(batch["src_lengths"], weights.shape[-1])
            self.metrics[split]["sparsity"].update(
                weights, (batch["tgt_out"] != 0)[:, :, None] & real_source[:, None])
        return nll, tokens

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

    def final_beams(self, batch: dict[str, torch.Tensor]) -> Beams:
        """The final beams of ``batch`` (beam search with ``test_beam``), to rank under any
        penalty (:meth:`~lit_structattn.models.seq2seq.Beams.best`)."""
        return self.model.beams(batch["src"], batch["src_lengths"], self._max_len(batch),
                                beam=self.hparams.test_beam, fertility=batch.get("fertility"),
                                joint_k=self.hparams.test_joint_k)

    def detokenized(self, prediction: torch.Tensor) -> list[str]:
        """The target-language text of every row of ``prediction [B, T']``."""
        return [self.data.detokenize(row) for row in prediction]

    # ---- evaluation ---------------------------------------------------------------------

    def evaluate(self, batch: dict[str, torch.Tensor], split: str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """The perplexity, and the translations' scores: greedy for validation, beam search
        (``test_beam``) ranked with the task's penalties for the test."""
        nll_and_tokens = self._update_nll(batch, split)
        metrics, index = self.metrics[split], batch["index"]
        hypotheses = self.detokenized(
            self.decode(batch, beam=1 if split == "val" else self.hparams.test_beam))
        every_reference = self.data.references(split)
        references = [every_reference[i] for i in index.tolist()]
        metrics["sacrebleu"].update(index, hypotheses, references)
        if split == "test":
            self._update_word_scores(batch, hypotheses, metrics)
        elif self.penalty_search is not None:
            self.penalty_search.update(index, references, self._penalty_candidates(batch))
        return nll_and_tokens

    def _update_word_scores(self, batch: dict[str, torch.Tensor], hypotheses: list[str],
                            metrics: Mapping) -> None:
        """REP and DROP of the test ``hypotheses`` of ``batch``, on the data's words."""
        subwords = self.data.subwords
        pairs = [self.data.datasets["test"].pairs[i] for i in batch["index"].tolist()]
        references = [subwords.words(t, subwords.tgt_lang) for _, t in pairs]
        words = [subwords.words(h, subwords.tgt_lang) for h in hypotheses]
        metrics["rep"].update(batch["index"], words, references)
        if "drop" in metrics:
            sources = [subwords.words(s, subwords.src_lang) for s, _ in pairs]
            metrics["drop"].update(batch["index"], sources, references, words)

    def _penalty_candidates(self, batch: dict[str, torch.Tensor]) -> list[tuple[str, ...]]:
        """COVPENALTY: the translations of every sentence of ``batch`` under every ``(alpha,
        beta)`` of the grid (its final beams ranked by Wu et al.'s length penalty ``alpha`` and
        the coverage penalty ``beta``)."""
        beams = self.final_beams(batch)
        ranked = [self.detokenized(beams.best(alpha, "wu", beta, self.hparams.min_attention))
                  for alpha, beta in self.hparams.penalty_grid]
        return list(zip(*ranked, strict=True))

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        if self.penalty_search is not None:
            self._choose_penalty()

    def _choose_penalty(self) -> None:
        """COVPENALTY: the ``(alpha, beta)`` of the grid whose translations of the validation
        set scored the best BLEU (the first on ties) ranks the test's beams."""
        bleu = self.penalty_search.compute()  # every process: the same
        self.penalty_search.reset()
        self.penalty_scores = {(alpha, beta): score for (alpha, beta), score
                               in zip(self.hparams.penalty_grid, bleu, strict=True)}
        alpha, beta = max(self.penalty_scores, key=self.penalty_scores.get)
        self.penalty.update(alpha=alpha, length_penalty="wu", coverage_penalty=beta)
        rank_zero_info(self.report_notes["COVPENALTY"])

    # ---- test ---------------------------------------------------------------------------

    def on_test_start(self) -> None:
        """COVPENALTY (``penalty_grid``): validate before the test, so that the test ranks its
        beams with the penalty chosen on the validation set (:meth:`_choose_penalty`). The pass
        is Lightning's own validation loop, run the way its fit loop runs one between epochs
        (the validation split, ``limit_val_batches``, every device and process), within the
        test's set-up."""
        if self.penalty_search is None:
            return
        trainer = self.trainer
        trainer.state.fn, trainer.validating = TrainerFn.VALIDATING, True
        try:
            trainer.validate_loop.run()
        finally:
            trainer.state.fn, trainer.testing = TrainerFn.TESTING, True

    def on_test_epoch_end(self) -> None:
        """Log the test's metrics and write its translations to
        ``<log_dir>/test_translations.txt``."""
        hypotheses = self.metrics["test"]["sacrebleu"].corpus()[0]  # every process's
        scores = self.log_metrics("test")
        log_dir = self.trainer.log_dir  # in every process: DDP broadcasts it from the first
        if self.trainer.is_global_zero and log_dir:
            path = Path(log_dir) / "test_translations.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
            rank_zero_info(f"test translations written to {path}; BLEU {scores['bleu']:.2f} "
                           f"({self.report_notes['BLEU']})")

    @property
    def report_notes(self) -> dict[str, str]:
        """The COVPENALTY weights chosen on the validation set (with ``penalty_grid``) and the
        sacreBLEU signatures of BLEU and chrF."""
        notes = super().report_notes
        if self.penalty_scores:
            notes["COVPENALTY"] = (
                "alpha, beta tuned on validation BLEU over "
                + ", ".join(f"({a}, {b}): {s:.1f}" for (a, b), s in self.penalty_scores.items())
                + f"; chosen ({self.penalty['alpha']}, {self.penalty['coverage_penalty']})")
        return {**notes, **self.metrics["test"]["sacrebleu"].signatures}

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
