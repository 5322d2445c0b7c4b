"""What every LightningModule of the project shares: one skeleton of steps and metrics, its
optimizer and schedule given as callables (``class_path`` in a config), clear errors for a
checkpoint that was trained with another configuration and for a vocabulary size that does not
fit the data, and predictions on raw text from a checkpoint alone (the data's
:class:`~lit_structattn.common.codec.TextCodec` travels in every checkpoint).

The skeleton (:class:`Task`): the task owns the training, validation, test and predict steps and
one set of metrics per evaluation split, and logs them under one naming: ``train/loss``,
``val/loss``, ``{split}/<metric>`` and ``{split}/score``, the family's headline metric again,
which the shared checkpointing of ``configs/callbacks.yaml`` monitors. A family supplies what
differs: :meth:`~Task.loss` (the training objective of a batch), :meth:`~Task.evaluate` (a
batch's evaluation: it updates the split's metrics and returns the validation loss),
:meth:`~Task.records` (JSON-ready predictions) and, once in its constructor, its metrics
(:meth:`~Task.declare_metrics`).
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence, Sized
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import lightning as L
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import move_data_to_device
from torchmetrics import MeanMetric, Metric

from ..common.codec import (
    CODEC_KEY,
    TASK_KEY,
    TextCodec,
    class_path,
    codec_record,
    import_class,
    restore_codec,
)
from ..run.checkpoints import checkpoint_bytes
from .upgrade import upgrade_hyperparameters, upgraded_checkpoint

# A task given its model as an object (``model: class_path ...``) records the model's
# configuration in its hyper-parameters (LightningCLI's instantiator does), which is what
# ``load_from_checkpoint`` rebuilds it from; Lightning's advice to leave the module out does not
# apply.
warnings.filterwarnings("ignore", message=r"Attribute '\w+' is an instance of `nn.Module`")

#: The evaluation splits, each with its own copy of a task's metrics.
SPLITS = ("val", "test")


@runtime_checkable
class TaskData(Protocol):
    """What every task reads of its DataModule, when it has one: the codec of its raw text
    (kept in checkpoints). Every DataModule of :mod:`lit_structattn.datamodules` is one."""

    def text_codec(self) -> TextCodec: ...


class VocabularyData(Protocol):
    """A DataModule whose inputs are ids of one vocabulary, ``vocab`` once set up (what
    :meth:`Task.check_vocab_size` reads)."""

    vocab: Sized


def examples_in(batch: Mapping[str, torch.Tensor]) -> int:
    """The number of examples of ``batch`` (a dict of tensors, batch first)."""
    return len(next(iter(batch.values())))


class Task(L.LightningModule):
    """Base of the project's LightningModules: the steps, the metrics of every split and their
    logging (see the module's docstring).

    A family subclass declares its metrics once in its constructor
    (:meth:`declare_metrics`), and defines :meth:`loss`, :meth:`evaluate` and :meth:`records`;
    it may add to :attr:`report_notes`.

    Loading a checkpoint (``--ckpt_path`` in ``fit``/``test``/``predict``) whose weights do not
    fit the configured model raises a ``ValueError`` naming the hyper-parameters that differ,
    instead of PyTorch's list of mismatched tensor shapes.

    Every checkpoint also keeps the task's class and the data's text codec (its DataModule's
    ``text_codec()``: vocabularies, tag sets, subword model), so that :func:`load_task` (or
    ``<TaskClass>.load_from_checkpoint``) in a fresh process gives a task whose
    :meth:`predict_text` and family method (``transduce``, ``tag``, ``translate``, ``answer``,
    ``classify``) read raw text without the training data.

    Args:
        optimizer: builds the optimizer from the trained parameters, e.g. ``torch.optim.Adam``
            or, in a config, ``{class_path: torch.optim.Adam, init_args: {lr: 0.002}}``.
        lr_scheduler: builds the learning-rate schedule (stepped every epoch) from the
            optimizer, e.g. :class:`~lit_structattn.tasks.schedules.DecayFrom`; None: a constant
            rate.
    """

    #: Whether the training objective is :meth:`loss` summed over the batch's examples instead
    #: of their mean (the memory networks' convention, which their learning rate goes with);
    #: ``train/loss`` logs the mean either way.
    summed_loss: ClassVar[bool] = False

    def __init__(self, optimizer: OptimizerCallable,
                 lr_scheduler: LRSchedulerCallable | None = None) -> None:
        super().__init__()
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        self._codec: TextCodec | None = None
        self.validation_loss = MeanMetric()
        self.metrics = torch.nn.ModuleDict()
        self.score_name = ""

    # ---- what a family supplies ----------------------------------------------------------

    def declare_metrics(self, score: str, metrics: Mapping[str, Metric],
                        test_only: Mapping[str, Metric] | None = None) -> None:
        """The family's metrics, once: ``self.metrics[split][name]`` is a copy of
        ``metrics[name]`` for every split of :data:`SPLITS`, with ``test_only`` added to the
        test split's. At the end of a split's epoch, each metric's ``compute()`` is logged as
        ``{split}/<name>``, or, when it gives a mapping, each of its items as
        ``{split}/<key>`` (values that are NaN, measured on nothing, are left out); ``score``,
        one of these names, is the headline metric, logged again as ``{split}/score``."""
        self.score_name = score
        self.metrics = torch.nn.ModuleDict({
            split: torch.nn.ModuleDict({
                **{name: metric.clone() for name, metric in metrics.items()},
                **(dict(test_only or {}) if split == "test" else {}),
            }) for split in SPLITS
        })

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The training objective of ``batch``: a 0-dim mean over its examples or target
        tokens (summed by :meth:`training_step` with :attr:`summed_loss`)."""
        raise NotImplementedError(f"{type(self).__name__} defines no loss")

    def evaluate(self, batch: dict[str, torch.Tensor], split: str
                 ) -> tuple[torch.Tensor, int | torch.Tensor]:
        """Evaluate ``batch`` of ``split`` (``val`` or ``test``): update
        ``self.metrics[split]`` with it, and return its validation loss as ``(mean, count)``,
        the mean over ``count`` items (see :meth:`log_validation_loss`)."""
        raise NotImplementedError(f"{type(self).__name__} defines no evaluation")

    @property
    def report_notes(self) -> dict[str, str]:
        """What a reproduction report prints under its table about this task's run, label ->
        text (the settings the run chose or was given that the table's note does not say, the
        scores' signatures); read after the test. A family adds its own to its parent's."""
        return {}

    # ---- the steps ---------------------------------------------------------------------

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, size = self.loss(batch), examples_in(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        return loss * size if self.summed_loss else loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log_validation_loss(*self.evaluate(batch, "val"))

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.evaluate(batch, "test")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> list[dict]:
        """:meth:`records` of a batch of the DataModule's predict split."""
        return self.records(batch)

    def on_validation_epoch_end(self) -> None:
        self.log_metrics("val")

    def on_test_epoch_end(self) -> None:
        self.log_metrics("test")

    def log_metrics(self, split: str) -> dict[str, Any]:
        """Compute, log and reset the metrics of ``split`` (see :meth:`declare_metrics`);
        returns the values by name. Every DDP process calls it (the metrics sync there)."""
        values: dict[str, Any] = {}
        for name, metric in self.metrics[split].items():
            value = metric.compute()
            metric.reset()
            values.update(value if isinstance(value, Mapping) else {name: value})
        if self.score_name not in values:
            raise KeyError(f"{type(self).__name__}'s score {self.score_name!r} is none of its "
                           f"metrics: {', '.join(values)}")
        for name, value in values.items():
            if name == self.score_name or not math.isnan(float(value)):
                self._log_synced(f"{split}/{name}", value, prog_bar=name == self.score_name)
        self._log_synced(f"{split}/score", values[self.score_name])
        return values

    def _log_synced(self, name: str, value: Any, prog_bar: bool = False) -> None:
        """Log ``value``, which every DDP process holds the same of (a metric computes in sync):
        Lightning's sync by ``max`` keeps it exactly, and knows it is synced."""
        self.log(name, value, prog_bar=prog_bar, sync_dist=True, reduce_fx="max")

    def log_validation_loss(self, loss: torch.Tensor, count: int | torch.Tensor) -> None:
        """Log ``val/loss``: the batch's ``loss``, a mean over ``count`` items (what the loss
        averages: examples for a classifier or tagger, target tokens for an encoder-decoder),
        averaged over the whole split weighted by ``count`` and summed across DDP processes
        (torchmetrics), so that it is the mean over every item of the split however the split
        is sharded and batched. ``count`` may be a 0-dim tensor (no wait for the device)."""
        self.validation_loss.update(loss.detach(), weight=count)
        self.log("val/loss", self.validation_loss)  # a Metric: Lightning reads no batch size

    # ---- raw text ----------------------------------------------------------------------

    @property
    def text_codec(self) -> TextCodec:
        """The codec of the data: the attached DataModule's ``text_codec()``, or the one the
        loaded checkpoint carried. ``RuntimeError`` when there is neither."""
        if self._codec is None:
            data = self._trainer.datamodule if self._trainer is not None else None
            if isinstance(data, TaskData):
                self._codec = data.text_codec()
        if self._codec is None:
            raise RuntimeError(
                f"{type(self).__name__} has no text codec: load it from a checkpoint saved by "
                "this version of lit_structattn, or attach the DataModule it was trained on")
        return self._codec

    @text_codec.setter
    def text_codec(self, codec: TextCodec) -> None:
        """Give the task a codec (the DataModule's ``text_codec()``), e.g. for a checkpoint
        saved before checkpoints kept it; the next checkpoint keeps it."""
        self._codec = codec

    def predict_text(self, lines: str | Iterable[str], source: str = "<input>",
                     batch_size: int = 32, pretokenized: bool = False) -> list[dict]:
        """Predictions of the lines of a raw file in the family's natural format (the codec's
        ``format``; errors name ``source`` and the line): one JSON-ready record per example,
        ``line`` (the 1-based number of its line) first; blank lines give none (see
        :mod:`~lit_structattn.common.codec`). A string is the text of a file (one line: one
        sentence). ``pretokenized``: a tagger reads words separated by whitespace as they are
        instead of tokenising (other families refuse it)."""
        if isinstance(lines, str):
            lines = lines.splitlines()
        codec = self.text_codec.pretokenized() if pretokenized else self.text_codec
        numbers, examples = codec.parse_numbered(lines, source)
        return self.predict_examples(examples, batch_size, numbers)

    def predict_examples(self, examples: Sequence, batch_size: int = 32,
                         lines: Sequence[int] | None = None) -> list[dict]:
        """One JSON-ready record (:meth:`records`) per parsed example, in batches of
        ``batch_size``, in evaluation mode and without gradients, each starting with ``line``:
        the example's entry of ``lines`` (the numbers of their input lines; None: their
        1-based positions)."""
        lines = range(1, len(examples) + 1) if lines is None else lines
        if len(lines) != len(examples):
            raise ValueError(f"{len(lines)} line numbers for {len(examples)} examples")
        was_training = self.training
        self.eval()
        records: list[dict] = []
        try:
            with torch.no_grad():
                for start in range(0, len(examples), batch_size):
                    chunk = examples[start : start + batch_size]
                    batch = move_data_to_device(self.text_codec.batch(chunk), self.device)
                    records.extend(self.records(batch, chunk))
        finally:
            self.train(was_training)
        return [{"line": line, **record} for line, record in zip(lines, records, strict=True)]

    def records(self, batch: dict[str, torch.Tensor], examples: Sequence | None = None
                ) -> list[dict]:
        """The JSON-ready prediction of every example of ``batch`` (``examples``: the parsed
        raw examples it was made of; None for a batch of the DataModule's); each family
        defines it."""
        raise NotImplementedError(f"{type(self).__name__} does not predict on raw text")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[TASK_KEY] = class_path(self)
        try:
            checkpoint[CODEC_KEY] = codec_record(self.text_codec)
        except RuntimeError:  # no data attached and none loaded: nothing to keep
            pass

    def configure_optimizers(self):
        optimizer = self.optimizer([p for p in self.parameters() if p.requires_grad])
        if self.lr_scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.lr_scheduler(optimizer)}

    def check_vocab_size(self, size: int, name: str = "vocab_size") -> None:
        """``ValueError`` unless the model's vocabulary ``size`` (its argument ``name``) equals
        the size of the set-up DataModule's ``vocab`` (a :class:`VocabularyData`; nothing
        without a DataModule)."""
        data: VocabularyData | None = self.trainer.datamodule
        if data is not None and len(data.vocab) != size:
            raise ValueError(
                f"the model's {name} is {size} but the data's vocabulary has {len(data.vocab)} "
                "symbols: a checkpoint or configuration made for other data"
            )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if CODEC_KEY in checkpoint:
            self._codec = restore_codec(checkpoint[CODEC_KEY])
        saved, expected = as_loaded(self, checkpoint.get("state_dict", {})), self.state_dict()
        mismatched = sorted(
            set(saved) ^ set(expected)
            | {k for k in set(saved) & set(expected) if saved[k].shape != expected[k].shape}
        )
        if not mismatched:
            return
        recorded = checkpoint.get("hyper_parameters", {})
        before = flat_hyperparameters(upgrade_hyperparameters(recorded))  # in the new form
        now = flat_hyperparameters(self.hparams)
        differing = [
            f"{key}: {before.get(key, '<unset>')!r} in the checkpoint, {now.get(key, '<unset>')!r} "
            "now"
            for key in sorted(set(before) | set(now))
            if before.get(key, "<unset>") != now.get(key, "<unset>")
        ]
        detail = "; ".join(differing) if differing else "no hyper-parameter differs"
        raise ValueError(
            "the checkpoint was trained with an incompatible configuration "
            f"({detail}). Mismatched weights: {', '.join(mismatched[:5])}"
            f"{' ...' if len(mismatched) > 5 else ''}. Use the config the checkpoint was "
            "trained with (its hparams.yaml / config.yaml sits beside the checkpoints)."
        )


def as_loaded(module: torch.nn.Module, state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """``state_dict`` as ``module.load_state_dict`` reads it: after the key renames of the
    load-state-dict pre-hooks of ``module`` and its submodules (a checkpoint saved before some
    parameters moved into a submodule, e.g. the output layer of the encoder-decoder)."""
    view = dict(state_dict)
    for name, submodule in module.named_modules():
        for hook in submodule._load_state_dict_pre_hooks.values():
            hook(view, f"{name}." if name else "", {}, True, [], [], [])
    return view


def flat_hyperparameters(hparams: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``hparams`` with the objects a config gives by ``class_path`` / ``init_args`` (the model,
    the optimizer) and the groups of options (a model's ``encoder``) spread into dotted keys:
    ``{"model": "...Seq2Seq", "model.hidden_dim": 50, "model.encoder.kind": "bilstm"}``."""
    flat: dict[str, Any] = {}
    for key, value in hparams.items():
        if hasattr(value, "as_dict"):  # a jsonargparse Namespace
            value = value.as_dict()
        if isinstance(value, Mapping) and "class_path" in value:
            flat[prefix + key] = value["class_path"]
            flat.update(flat_hyperparameters(value.get("init_args") or {}, f"{prefix}{key}."))
        elif isinstance(value, Mapping) and value:
            flat.update(flat_hyperparameters(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def load_task(checkpoint_path: str | Path, map_location: Any = "cpu",
              trusted: bool = False) -> Task:
    """The task of a checkpoint, whatever its class (the checkpoint names it), with its text
    codec, in evaluation mode: ``load_task("best.ckpt").predict_text(["( + 1 2 )"])``.

    The checkpoint is read as data (:func:`~lit_structattn.run.checkpoints.read_checkpoint`): one
    that holds other Python objects is refused, unless ``trusted`` (a legacy checkpoint of a
    task built in Python, whose hyper-parameters keep its model object, from a source you
    trust). A checkpoint saved before the models took their parts' options as groups is
    upgraded first (:mod:`~lit_structattn.tasks.upgrade`).

    Raises:
        UnsafeCheckpoint, UnreadableCheckpoint: see :func:`~lit_structattn.run.checkpoints.
            read_checkpoint`.
        ValueError: the checkpoint names no task class of this project.
    """
    checkpoint, data = checkpoint_bytes(checkpoint_path, trusted)
    name = checkpoint.get(TASK_KEY)
    if name is None:
        raise ValueError(f"{checkpoint_path}: the checkpoint names no task class (saved before "
                         "lit_structattn kept it); use <TaskClass>.load_from_checkpoint")
    cls = import_class(name)
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ValueError(f"{checkpoint_path}: {name} is not a lit_structattn task")
    data = upgraded_checkpoint(checkpoint, data)
    # Lightning reads the very bytes checked above (or their upgrade); Lightning < 2.6 has no
    # weights_only argument (and unpickles in full: safe here, the bytes were read as data).
    full = ({"weights_only": not trusted}
            if "weights_only" in inspect.signature(cls.load_from_checkpoint).parameters else {})
    return cls.load_from_checkpoint(data, map_location=map_location, **full).eval()
