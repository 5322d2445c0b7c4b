"""Nothing lost on interruption: Ctrl-C (SIGINT) or SIGTERM during a fit writes a checkpoint at
the training step it stopped, and a fit resumed from any checkpoint continues exactly as the
uninterrupted fit would have.

:class:`ResumableFit` (every ``structattn`` trainer has one) does three things.

* **Signals.** During a fit, the first SIGINT or SIGTERM asks to stop: the current training
  step finishes, ``last.ckpt`` is written beside the run's checkpoints and the fit ends with
  :class:`FitInterrupted` (``structattn`` exits with status 130 and says how to resume). A
  second signal stops at once. A signal during the final validation ends the run after it.
* **Random state.** Every training step starts from the random states (torch, CUDA, numpy,
  Python) that the previous step left, whatever ran in between (validation, figures, a
  restart), and the checkpoint carries them: a resumed fit draws the same dropout masks and
  samples as the uninterrupted one.
* **Data position.** The checkpoint records how many batches of its epoch were trained; a fit
  resumed in the middle of an epoch skips those (the training batch sampler's
  ``skip_batches``, see :mod:`lit_structattn.datamodules.batching`). The epoch's order itself
  depends only on the seeds and the epoch number.
"""

from __future__ import annotations

import random
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class FitInterrupted(Exception):
    """A fit stopped by a signal after writing ``checkpoint``."""

    def __init__(self, checkpoint: Path, signal_name: str, epoch: int, step: int) -> None:
        self.checkpoint = checkpoint
        super().__init__(
            f"{signal_name}: stopped at epoch {epoch}, step {step}; checkpoint written to "
            f"{checkpoint}. To resume: the same command with --ckpt_path last (structattn "
            "reproduce: the same command)")


class ResumableFit(L.Callback):
    """Stop at a training step on SIGINT/SIGTERM with a checkpoint, and resume from any
    checkpoint with the random states and data position of the uninterrupted fit (see the
    module's docstring)."""

    def __init__(self) -> None:
        self._random_states: dict[str, Any] | None = None  # as the last training step left them
        self._position = (0, 0)  # (epoch, training batches done in it)
        self._resumed = False  # restored from a checkpoint, not yet training
        self._requested: int | None = None  # the signal that asked to stop
        self._previous: dict[int, Any] = {}

    # -- signals ------------------------------------------------------------------------------
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._requested = None
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._request) for sig in SIGNALS}

    def _request(self, signum: int, frame) -> None:
        if signum not in self._previous or self._requested is not None:
            self._pass_on(signum, frame)  # after the fit, or a second signal: stop now
            return
        self._requested = signum
        print(f"\nstructattn: {signal.Signals(signum).name} received: stopping after this "
              "training step (send it again to stop at once)", file=sys.stderr, flush=True)

    def _pass_on(self, signum: int, frame) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def _release_signals(self) -> None:
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._request:
                signal.signal(sig, previous)
        self._previous = {}

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        requested = self._requested
        self._release_signals()
        if requested is not None:  # came during the final validation: the fit is complete
            raise KeyboardInterrupt

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule,
                     exception: BaseException) -> None:
        self._release_signals()

    def _stop_requested(self, trainer: L.Trainer) -> bool:
        requested = self._requested is not None
        if trainer.world_size > 1:  # every process stops at the same step
            requested = trainer.strategy.reduce_boolean_decision(requested, all=False)
        return requested

    # -- steps --------------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A fit resumed in the middle of an epoch skips the batches trained before."""
        epoch, batches = self._position
        resumed_mid_epoch = (self._resumed and epoch == trainer.current_epoch
                             and 0 < batches < trainer.num_training_batches)
        self._resumed = False
        if not resumed_mid_epoch:
            return
        sampler = getattr(trainer.train_dataloader, "batch_sampler", None)
        if hasattr(sampler, "skip_batches"):
            sampler.skip_batches(batches)
            # Lightning's warning that the loader cannot resume mid-epoch: this one does
            warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that "
                                    "ended before the epoch ended")
        else:
            print(f"structattn: the training loader ({type(sampler).__name__}) cannot skip "
                  "batches: the resumed epoch starts again from its first batch",
                  file=sys.stderr)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        if self._random_states is not None:
            set_random_states(self._random_states)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        self._random_states = random_states()
        self._position = (trainer.current_epoch,
                          trainer.fit_loop.epoch_loop.batch_progress.current.processed)
        if self._stop_requested(trainer):
            name = signal.Signals(self._requested or signal.SIGINT).name
            path = interruption_checkpoint(trainer)
            trainer.save_checkpoint(path)
            raise FitInterrupted(path, name, trainer.current_epoch, trainer.global_step)

    # -- checkpoint ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        epoch, batches = self._position
        return {"random_states": self._random_states, "epoch": epoch, "batches": batches}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._random_states = state_dict.get("random_states")
        self._position = (state_dict.get("epoch", 0), state_dict.get("batches", 0))
        self._resumed = True


def interruption_checkpoint(trainer: L.Trainer) -> Path:
    """Where an interrupted fit writes its checkpoint: ``last.ckpt`` in the folder of the
    checkpoint callback that keeps one (else of the first checkpoint callback, else
    ``default_root_dir/checkpoints``), where ``--ckpt_path last`` finds it."""
    callbacks = trainer.checkpoint_callbacks
    keeping = [c for c in callbacks if getattr(c, "save_last", False)] or callbacks
    folder = next((c.dirpath for c in keeping if getattr(c, "dirpath", None)), None)
    return Path(folder or Path(trainer.default_root_dir) / "checkpoints") / "last.ckpt"


def random_states() -> dict[str, Any]:
    """The states of every random generator a training step may draw from, as tensors and
    plain Python values (what ``torch.load(weights_only=True)`` reads)."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    states = {"torch": torch.get_rng_state(),
              "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss),
              "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_random_states(states: dict[str, Any]) -> None:
    """Restore what :func:`random_states` returned (CUDA states only where CUDA runs)."""
    torch.set_rng_state(states["torch"])
    kind, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
