"""Checkpoint files that survive interruption: written whole, found intact.

* :class:`AtomicCheckpointIO` writes a checkpoint to a temporary file in its own folder and
  renames it into place, so a process killed while writing leaves the previous file intact
  (never a truncated ``last.ckpt``).
* :func:`resumable_checkpoint` is the newest complete checkpoint of a run folder: a ``last.ckpt``
  that is empty or cut short is skipped, with a one-line notice, for the newest intact one.
* :func:`resolve_checkpoint` is what ``--ckpt_path last`` and ``--ckpt_path best`` stand for.
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, with local files written whole: into ``.NAME.PID.tmp``
    beside the target, flushed to disk, then renamed over it (``os.replace`` is atomic within
    a filesystem). Remote paths (``s3://`` ...) go through Lightning's own writer."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        if "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(temporary, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)


def is_intact(path: Path) -> bool:
    """Whether ``path`` is a complete checkpoint: a zip archive (torch's format) whose every
    member reads back with its checksum."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except (OSError, zipfile.BadZipFile):
        return False


def resumable_checkpoint(root: Path) -> Path | None:
    """The checkpoint a run in ``root`` resumes from: its newest ``last.ckpt``, or when that is
    empty or cut short (the process died while writing it, before atomic writes) the newest
    intact checkpoint of any name, with a one-line notice on stderr. None when ``root`` has no
    checkpoint at all."""
    lasts = _newest_first(root.rglob("last.ckpt"))
    if not lasts:
        return None
    if is_intact(lasts[0]):
        return lasts[0]
    intact = next((path for path in _newest_first(root.rglob("*.ckpt")) if is_intact(path)),
                  None)
    print(f"structattn: {lasts[0]} is {'empty' if _empty(lasts[0]) else 'incomplete'}; "
          + (f"resuming from {intact}" if intact else "no intact checkpoint beside it"),
          file=sys.stderr)
    return intact


def resolve_checkpoint(alias: str, root: Path) -> str:
    """The path that ``last`` (:func:`resumable_checkpoint`) or ``best`` stands for under the
    run folder ``root``.

    Raises:
        ValueError: no intact checkpoint under ``root``, or (``best``) the newest one records
            no best checkpoint that still exists.
    """
    found = resumable_checkpoint(root)
    if found is None:
        raise ValueError(
            f"--ckpt_path {alias}: no intact last.ckpt under {root.resolve()}; give the run's "
            "folder as --trainer.default_root_dir (or a checkpoint file as --ckpt_path)"
        )
    if alias == "last":
        return str(found)
    states = torch.load(found, map_location="cpu", weights_only=False).get("callbacks", {})
    best = [  # from the checkpoint callbacks that monitor a metric
        s.get("best_model_path") for k, s in states.items()
        if k.startswith("ModelCheckpoint") and "'monitor': None" not in k
    ]
    best = [path for path in best if path and Path(path).is_file()]
    if not best:
        raise ValueError(f"--ckpt_path best: {found} records no best checkpoint that exists")
    return best[0]


def _newest_first(paths) -> list[Path]:
    return sorted(paths, key=lambda path: path.stat().st_mtime, reverse=True)


def _empty(path: Path) -> bool:
    return path.stat().st_size == 0
