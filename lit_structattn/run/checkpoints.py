"""Checkpoint files that survive interruption and cannot run code: written whole, found intact,
read as data.

* :func:`read_checkpoint` is how the project reads a checkpoint: with
  ``torch.load(weights_only=True)``, which unpickles tensors and plain Python values only. A
  file that asks for any other Python object (a pickled ``os.system`` call, or a model object
  kept in the hyper-parameters by an old task built in Python) is refused with one line naming
  the file and the objects it asks for (:class:`UnsafeCheckpoint`); a file that is not a
  complete checkpoint is refused likewise (:class:`UnreadableCheckpoint`). ``trusted=True`` is
  the deliberate opt-in for legacy files from a trusted source: a full unpickling.
* :class:`AtomicCheckpointIO` writes a checkpoint to a temporary file in its own folder and
  renames it into place, so a process killed while writing leaves the previous file intact
  (never a truncated ``last.ckpt``).
* :func:`resumable_checkpoint` is the newest complete checkpoint of a run folder: a ``last.ckpt``
  that is empty or cut short is skipped, with a one-line notice, for the newest intact one.
* :func:`resolve_checkpoint` is what ``--ckpt_path last`` and ``--ckpt_path best`` stand for.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import sys
import zipfile
from pathlib import Path
from typing import IO, Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


class UnreadableCheckpoint(ValueError):
    """A file given as a checkpoint that is not one: truncated, or not written by ``torch.save``."""


class UnsafeCheckpoint(ValueError):
    """A checkpoint that holds Python objects other than tensors and plain values: loading it
    would run code of the file's choosing."""


TRUST_HINT = ("load only checkpoints you trust, then with load_task(path, trusted=True) or "
              "structattn predict --trust_checkpoint")


def read_checkpoint(source: str | os.PathLike | IO[bytes], name: str | None = None,
                    trusted: bool = False, hint: str = TRUST_HINT) -> dict[str, Any]:
    """The checkpoint in ``source`` (a path or a binary file object) as a dict, its tensors on
    the CPU, unpickled as data only (``weights_only=True``) unless ``trusted``.

    Args:
        source: the checkpoint file, or its bytes as a file object.
        name: how errors name the file (default: ``source`` when it is a path).
        trusted: unpickle in full (any Python object, any code it calls): only for legacy
            checkpoints from a source you trust.
        hint: what the refusal of a file holding Python objects advises (a cache file:
            delete it to recompute it).

    Raises:
        UnsafeCheckpoint: the file holds Python objects beyond tensors and plain values.
        UnreadableCheckpoint: the file is not a complete checkpoint.
    """
    name = name or str(source)
    data = source if hasattr(source, "read") else open(source, "rb")  # noqa: SIM115
    try:
        return torch.load(data, map_location="cpu", weights_only=not trusted)
    except pickle.UnpicklingError as error:
        refused = "Weights only load failed" in str(error)
        objects = _python_objects(data, str(error)) if refused else []
        if objects:
            raise UnsafeCheckpoint(
                f"{name}: refused: the checkpoint holds Python objects that could run code "
                f"when loaded ({', '.join(objects)}); {hint}") from None
        raise UnreadableCheckpoint(_not_a_checkpoint(name, error)) from None
    except (RuntimeError, OSError, EOFError, KeyError, ValueError) as error:
        raise UnreadableCheckpoint(_not_a_checkpoint(name, error)) from None
    finally:
        if data is not source:
            data.close()


def _python_objects(data: IO[bytes], message: str) -> list[str]:
    """The Python objects (``module.name``) beyond plain data that the checkpoint in ``data``
    asks for (``message``: torch's refusal); empty when it is not a checkpoint at all."""
    data.seek(0)
    try:
        return torch.serialization.get_unsafe_globals_in_checkpoint(data)
    except (ValueError, RuntimeError):
        return []
    except AttributeError:  # torch < 2.5: the first object, from the refusal's text
        return re.findall(r"GLOBAL (\S+)", message)[:1]


def _not_a_checkpoint(name: str, error: BaseException) -> str:
    cause = str(error).strip().splitlines()[0].split(". ")[0]
    return (f"{name}: not a checkpoint: truncated, or not written by torch.save "
            f"({type(error).__name__}: {cause})")


def checkpoint_bytes(path: str | os.PathLike, trusted: bool = False) -> tuple[dict, io.BytesIO]:
    """The checkpoint at ``path`` read once: as :func:`read_checkpoint` gives it, and as its
    bytes, for a loader that reads the same file again (Lightning's ``load_from_checkpoint``)
    to read exactly what was checked."""
    buffer = io.BytesIO(Path(path).read_bytes())
    checkpoint = read_checkpoint(buffer, str(path), trusted)
    buffer.seek(0)
    return checkpoint, buffer


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
        UnsafeCheckpoint: (``best``) the newest checkpoint is not plain data.
    """
    found = resumable_checkpoint(root)
    if found is None:
        raise ValueError(
            f"--ckpt_path {alias}: no intact last.ckpt under {root.resolve()}; give the run's "
            "folder as --trainer.default_root_dir (or a checkpoint file as --ckpt_path)"
        )
    if alias == "last":
        return str(found)
    states = read_checkpoint(found).get("callbacks", {})
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
