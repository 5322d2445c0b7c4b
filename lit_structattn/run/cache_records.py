"""Reading cache records as data, never as code, and only the ones computed for these inputs.

Problem: ``torch.load(weights_only=False)`` unpickles whatever a file holds, so anyone who can
write the cache folder runs code the moment a cache file is read; and a file found under a cache
name may have been computed from other data or settings.

Method: the project's cache records (the NLI parser, the fertility predictor) are dicts of plain
values (tensors, ``str``, ``int``, ``float``, ``bool``, ``None``, ``list``, ``dict``) read by
:func:`~lit_structattn.run.checkpoints.read_checkpoint` (``torch.load(weights_only=True)``): a file
that needs more (a pickled class or function) is refused before anything in it runs. Each record
also stores under ``"key"`` what it was computed from (its data digest and settings); a record
whose key is not the one expected is refused, not recomputed: a file under the right name with
the wrong key was not written by this code for these inputs; delete it to recompute.

Contract: :func:`load_record` raises only ``ValueError``, one line naming the file and what is
wrong with it (a user error: ``structattn`` prints it and exits 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .checkpoints import read_checkpoint

CACHE_HINT = "a cache file holds only plain data: delete it to recompute it"


def load_record(path: Path, key: Any) -> dict[str, Any]:
    """The cache record (a dict) at ``path`` whose ``"key"`` equals ``key``.

    Raises:
        ValueError: the file holds Python objects beyond plain data, is not a torch file, or is
            not a dict with this key.
    """
    record = read_checkpoint(path, hint=CACHE_HINT)
    stored = record.get("key") if isinstance(record, dict) else None
    if stored != key:
        raise ValueError(f"{path}: refused, it was computed from other data or settings (its "
                         f"key is {stored!r}, expected {key!r}); delete it to recompute it")
    return record
