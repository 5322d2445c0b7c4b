"""Lightning callbacks any run may take: predictions written to JSONL as they come, and a
fit's wall time and training step time kept across resumptions."""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info


class JsonlPredictionWriter(BasePredictionWriter):
    """Writes what ``predict_step`` returns (a list of JSON-ready records per batch) to a JSONL
    file, one record per line, as the batches come; under DDP each process writes
    ``<stem>.rank<k>.jsonl``.

    Args:
        output_path: the ``.jsonl`` file (its folder is created).
    """

    def __init__(self, output_path: str = "predictions.jsonl") -> None:
        super().__init__(write_interval="batch")
        self.output_path = Path(output_path)

    def _path(self, trainer: L.Trainer) -> Path:
        if trainer.world_size == 1:
            return self.output_path
        return self.output_path.with_suffix(f".rank{trainer.global_rank}.jsonl")

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        path = self._path(trainer)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch,
                           batch_idx, dataloader_idx) -> None:
        with self._path(trainer).open("a") as out:
            for record in prediction:
                out.write(json.dumps(record) + "\n")

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rank_zero_info(f"predictions written to {self._path(trainer)}")


class FitClock(L.Callback):
    """The wall time of a fit and of its training steps, kept in its checkpoints: a fit resumed
    from a checkpoint adds the time its earlier parts took up to that checkpoint (work redone
    after the checkpoint is counted once, when redone). Lightning restores the state from any
    checkpoint it loads, ``test(ckpt_path=...)`` included: read the clock right after ``fit``.

    A training step is timed from the batch's start to its end (forward, backward and the
    optimizer's step); validation, checkpoints and data loading between batches are not.

    Attributes:
        earlier_seconds: the time recorded by the checkpoint the fit resumed from; None when
            no checkpoint recorded one.
        step_seconds, steps: the training steps' total time and their number, earlier parts
            included.
    """

    def __init__(self) -> None:
        self.earlier_seconds: float | None = None
        self._started: float | None = None
        self.step_seconds, self.steps = 0.0, 0
        self._step_started: float | None = None  # while a step runs

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = time.perf_counter()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch,
                             batch_idx: int) -> None:
        self._step_started = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs,
                           batch, batch_idx: int) -> None:
        self.step_seconds, self.steps = self._with_running_step()
        self._step_started = None

    def _with_running_step(self) -> tuple[float, int]:
        """``(step_seconds, steps)`` counting the step that runs, if one does: a checkpoint
        written at a step's end by a callback before this one (an interruption's) has it done."""
        if self._step_started is None:
            return self.step_seconds, self.steps
        return self.step_seconds + time.perf_counter() - self._step_started, self.steps + 1

    def elapsed(self) -> float:
        """Seconds of this fit so far, its earlier parts included."""
        running = 0.0 if self._started is None else time.perf_counter() - self._started
        return (self.earlier_seconds or 0.0) + running

    def step_milliseconds(self) -> float | None:
        """The mean training step in milliseconds (None before the first)."""
        return 1000.0 * self.step_seconds / self.steps if self.steps else None

    def state_dict(self) -> dict[str, float]:
        step_seconds, steps = self._with_running_step()
        return {"seconds": self.elapsed(), "step_seconds": step_seconds, "steps": steps}

    def load_state_dict(self, state_dict: dict[str, float]) -> None:
        self.earlier_seconds = float(state_dict["seconds"])
        # checkpoints written before the steps were timed: the steps from the resumption on
        self.step_seconds = float(state_dict.get("step_seconds", 0.0))
        self.steps = int(state_dict.get("steps", 0))
