"""bAbI question answering (Kim et al. 2017, §4.3, A.4, Table 4): MemN2N (softmax or sparsemax
per hop) against the unary and binary CRF attention over facts."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torchmetrics import MeanMetric

from ..common.rounding import rounded
from ..figures.plots import AttentionMap
from ..metrics.qa import FactSequenceAccuracy
from ..models.memory_network import MemoryNetwork, MemoryOutput
from .base import Task


class QATask(Task):
    """Trains a memory network (:mod:`lit_structattn.models.memory_network`) on bAbI batches
    (:class:`lit_structattn.datamodules.babi.BabiDataModule`).

    Loss: the cross-entropy of the answers summed over the batch (the MemN2N convention the
    learning rate 0.01 goes with). The paper: SGD lr 0.01 halved every 25 epochs
    (``configs/babi/base.yaml``); clip the gradient norm at 40 with
    ``trainer.gradient_clip_val``. Linear start: the model runs in its linear-start mode during
    the first ``linear_start_epochs`` epochs (the mode is saved in checkpoints, so a checkpoint
    is evaluated as it was trained).

    Logs ``train/loss`` (per question), ``val/loss``, ``{val,test}/accuracy`` (the score) and
    ``{val,test}/fact_accuracy`` (supporting-fact sequence accuracy; not logged when every
    question belongs to ``fact_excluded_tasks``).

    Args:
        model: the memory network: :class:`~lit_structattn.models.memory_network.MemN2N` (a
            transform per hop, ``softmax`` or ``sparsemax``) or
            :class:`~lit_structattn.models.memory_network.ChainCRFMemory` (the unary or binary
            CRF over facts); its ``vocab_size`` and ``memory_size`` come from the data (linked
            by the CLI). ``hops`` (K) is configured: Table 4 uses 3 for tasks 3, 7, 8 and 16,
            else 2 (``configs/tables/babi.yaml`` sets it per row).
        optimizer, lr_scheduler: see :class:`~.base.Task`.
        linear_start_epochs: the epochs in linear-start mode.
        fact_excluded_tasks: tasks without supporting-fact accuracy (7 and 8 in the paper).
    """

    summed_loss = True  # MemN2N's convention, which the learning rate 0.01 goes with

    def __init__(
        self, model: MemoryNetwork, optimizer: OptimizerCallable = torch.optim.SGD,
        lr_scheduler: LRSchedulerCallable | None = None, linear_start_epochs: int = 20,
        fact_excluded_tasks: tuple[int, ...] = (7, 8),
    ) -> None:
        super().__init__(optimizer, lr_scheduler)
        self.save_hyperparameters()
        self.model = model
        self.declare_metrics("accuracy", {
            "accuracy": MeanMetric(),  # of the per-question hits
            "fact_accuracy": FactSequenceAccuracy(fact_excluded_tasks)})

    def setup(self, stage: str) -> None:
        self.check_vocab_size(self.model.embeddings.vocab_size)

    @property
    def report_notes(self) -> dict[str, str]:
        """The number of hops, which the table sets per row."""
        return {**super().report_notes, "hops (K)": str(self.model.embeddings.hops)}

    def forward(self, batch: dict[str, torch.Tensor]) -> MemoryOutput:
        return self.model(batch["story"], batch["story_lengths"], batch["sentence_lengths"],
                          batch["query"], batch["query_lengths"])

    def on_train_epoch_start(self) -> None:
        self.model.embeddings.linear_start = (
            self.current_epoch < self.hparams.linear_start_epochs)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The mean cross-entropy of the answers (trained on its sum: :attr:`summed_loss`)."""
        return F.cross_entropy(self(batch).logits, batch["answer"])

    def evaluate(self, batch: dict[str, torch.Tensor], split: str) -> tuple[torch.Tensor, int]:
        output = self(batch)
        metrics = self.metrics[split]
        metrics["accuracy"].update((output.logits.argmax(-1) == batch["answer"]).float())
        metrics["fact_accuracy"].update(output.fact_sequence, batch["supports"], batch["task"])
        return F.cross_entropy(output.logits, batch["answer"]), len(output.logits)

    def answer(self, story: Sequence[str], questions: Sequence[str], batch_size: int = 32
               ) -> list[dict]:
        """Answers to ``questions`` (``"Where is Mary?"``) about one ``story`` (its statements in
        order, ``"Mary moved to the bathroom."``; the last ``memory_size`` of them are the
        memory), each asked after the whole story: see :meth:`records`. ``ValueError`` for a
        statement with a ``?`` (which the bAbI format reads as a question) and for a tab or a
        line break in a sentence."""
        misread = [s for s in story if "?" in s] + [s for s in (*story, *questions)
                                                     if "\t" in s or "\n" in s]
        if misread:
            raise ValueError("a statement holds no '?' (the bAbI format reads it as a question) "
                             f"and no sentence a tab or a line break: {misread[0]!r}")
        lines = [f"{i} {sentence}" for i, sentence in enumerate(story, start=1)]
        lines += [f"{i} {question}\t" for i, question in enumerate(questions, start=len(lines) + 1)]
        return self.predict_text(lines, batch_size=batch_size)

    def records(self, batch: dict[str, torch.Tensor], examples: Sequence | None = None
                ) -> list[dict]:
        """One JSON-ready record per question of ``batch``: ``story`` (its memories, oldest
        first, as sentences of the vocabulary's words), ``question``, ``answer`` (the most
        likely word), ``attention [K, n]`` (p(z_k = i): per hop the distribution over the n
        memories; the CRFs' marginals), ``facts`` (the selected memory per step, as the fact
        accuracy counts them: the per-hop argmax for MemN2N, the CRFs' most likely sequence)
        and, for the binary CRF, ``edge_marginals [K-1, n, n]`` (p(z_k = i, z_{k+1} = j))."""
        output = self(batch)
        words = self.text_codec.vocab
        answers = output.logits.argmax(-1).tolist()
        records = []
        for b, n in enumerate(batch["story_lengths"].tolist()):
            lengths = batch["sentence_lengths"][b].tolist()
            record = {
                "story": [" ".join(words.decode(batch["story"][b, i, : lengths[i]]))
                          for i in range(n)],
                "question": " ".join(words.decode(batch["query"][b, : batch["query_lengths"][b]])),
                "answer": words.tokens[answers[b]],
                "attention": rounded(output.attention[b, :, :n]),
                "facts": output.fact_sequence[b].tolist(),
            }
            if output.edge_marginals is not None:
                record["edge_marginals"] = rounded(output.edge_marginals[b, :, :n, :n])
            records.append(record)
        return records

    @torch.no_grad()
    def attention_figures(self, batch: dict[str, torch.Tensor], vocab, limit: int) -> list:
        """Per example of ``batch`` (the first ``limit``): a heatmap of p(z_k = i) with a row per
        fact (its sentence as label, the gold supporting facts in red) and a column per step;
        for the binary CRF also p(z_k = i, z_{k+1} = j) per pair of steps."""
        output = self(batch)
        figures = []
        for b in range(min(limit, len(batch["answer"]))):
            facts = int(batch["story_lengths"][b])
            words = batch["sentence_lengths"][b]
            sentences = [f"{i}: {' '.join(vocab.decode(batch['story'][b, i, : words[i]]))}"
                         for i in range(facts)]
            question = " ".join(vocab.decode(batch["query"][b, : batch["query_lengths"][b]]))
            gold = [int(s) for s in batch["supports"][b] if s >= 0]
            title = (f"{question}? {vocab.tokens[int(batch['answer'][b])]} "
                     f"(predicted {vocab.tokens[int(output.logits[b].argmax())]})")
            steps = output.attention.shape[1]
            figures.append((f"attention/example_{b}", AttentionMap(
                title, output.attention[b, :, :facts].T, sentences,
                [f"z{k + 1}" for k in range(steps)], highlight_rows=gold)))
            if output.edge_marginals is not None:
                for k in range(steps - 1):
                    figures.append((f"edge_marginals/example_{b}_z{k + 1}_z{k + 2}", AttentionMap(
                        f"p(z{k + 1} = row, z{k + 2} = column): {question}?",
                        output.edge_marginals[b, k, :facts, :facts], sentences,
                        [str(i) for i in range(facts)], highlight_rows=gold)))
        return figures
