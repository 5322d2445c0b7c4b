"""A run never writes into another run's folder.

Lightning numbers the runs of a root folder ``version_0, version_1, ...`` by listing the
folders that exist when a logger first needs its own: two runs started together on one root
both see none and both write ``version_0`` (one's best checkpoint, the other's last, one
``config.yaml``). Here:

* :func:`claim_version_folders`: every logger that numbers its runs (TensorBoard, CSV) and was
  given no version takes the first free number by *creating* its folder (``os.mkdir`` either
  creates a folder or fails: of two runs, exactly one gets each number), on the main process
  only (the others write no logs; Lightning broadcasts the main process's folders).
* :class:`RunFolderLock`: a run without such a logger writes its checkpoints and
  ``config.yaml`` into ``default_root_dir`` itself; it holds a lock there while it runs, and a
  second run on the same folder is refused with one line (:class:`FolderBusy`).
* :func:`folder_lock`: the lock itself (an advisory ``flock`` on a file in the folder, released
  when the holder ends, however it ends); the reproduction runner takes one per run, so a
  second ``structattn reproduce`` of the same row and seed waits for the first and then finds
  its result.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

FIT_LOCK = ".structattn-run.lock"


class FolderBusy(ValueError):
    """A folder another live process holds the lock of (the message names it and that
    process)."""


def claim_version_folders(trainer: L.Trainer) -> None:
    """Give each numbering logger of ``trainer`` without a version (TensorBoard, CSV) the
    first ``version_<n>`` folder under its ``save_dir/name`` that this process could create
    (local folders; a remote one keeps Lightning's numbering). Only the main process claims
    (``rank_zero_only.rank``, known from the environment before the processes are set up)."""
    if rank_zero_only.rank != 0:
        return
    numbering = [lg for lg in trainer.loggers if isinstance(lg, (TensorBoardLogger, CSVLogger))]
    for logger in numbering:
        if logger._version is None and "://" not in str(logger.root_dir):
            logger._version = _create_next_version(Path(logger.root_dir))


def _create_next_version(root: Path) -> int:
    root.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name.removeprefix("version_")) for p in root.glob("version_*")
             if p.name.removeprefix("version_").isdigit()]
    version = max(taken, default=-1) + 1
    while True:
        try:
            (root / f"version_{version}").mkdir()
            return version
        except FileExistsError:  # another run created it since we listed
            version += 1


@contextmanager
def folder_lock(folder: Path, name: str, wait: bool, what: str = "run") -> Iterator[None]:
    """Hold the exclusive lock ``folder/name`` for the block (creating ``folder``).

    Args:
        wait: when another process holds it, say so on stderr and wait for it; else raise.
        what: how the messages call what the lock guards.

    Raises:
        FolderBusy: (``wait=False``) another process holds the lock.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            if not wait:
                raise FolderBusy(f"{folder} is in use by another {what} ({holder}): give this "
                                 "one its own --trainer.default_root_dir") from None
            print(f"structattn: {what} in {folder} is running in another process ({holder}); "
                  "waiting for it", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _holder(handle) -> str:
    handle.seek(0)
    pid = handle.read().strip()
    return f"pid {pid}" if pid else "pid unknown"


class RunFolderLock(L.Callback):
    """Holds :func:`folder_lock` on ``default_root_dir`` from ``setup`` to ``teardown`` when
    the trainer has no numbering logger (its checkpoints and ``config.yaml`` go there); a
    second run on that folder meanwhile is refused (:class:`FolderBusy`). Put it before the
    callbacks that write at ``setup`` (LightningCLI's ``SaveConfigCallback``)."""

    def __init__(self) -> None:
        self._held = ExitStack()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        numbered = any(isinstance(lg, (TensorBoardLogger, CSVLogger)) for lg in trainer.loggers)
        if not numbered and trainer.is_global_zero:
            self._held.close()  # a trainer that runs again (fit, then test) locks once
            self._held.enter_context(
                folder_lock(Path(trainer.default_root_dir), FIT_LOCK, wait=False))

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._held.close()
