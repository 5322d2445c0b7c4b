"""Reading cache files as data, never as code.

Problem: ``torch.load(weights_only=False)`` unpickles whatever a file holds, so anyone who can
write the cache folder (or hand a user a file) runs code the moment it is read; and a file
found under a cache name may have been computed from other data or settings.

Method: the project's caches hold only plain values (tensors, ``str``, ``int``, ``float``,
``bool``, ``None``, ``list``, ``tuple``, ``dict``), what ``torch.load(weights_only=True)`` reads.
A file that needs more (a pickled class or function) is refused before anything in it runs;
a cache record also stores the key it was computed under (its data digest and settings), and a
record whose key is not the one expected is refused, not recomputed: a file under the right
name with the wrong key was not written by this code for these inputs; delete it to recompute.

Contract: :func:`load_plain` and :func:`load_record` raise only ``ValueError``, one line naming
the file and what is wrong with it (a user error: ``structattn`` prints it and exits 2).
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch

_GLOBAL = re.compile(r"GLOBAL (\S+)")


def load_plain(path: Path) -> Any:
    """What ``path`` holds, read with ``torch.load(weights_only=True)`` onto the CPU.

    Raises:
        ValueError: the file needs more than plain values (the message names the first
            object it asked for, e.g. ``posix.system``), or is not a torch file at all.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = _GLOBAL.search(str(error))
        what = found.group(1) if found else type(error).__name__
        raise ValueError(f"{path}: refused, it holds more than plain data ({what}); a cache "
                         "file holds only tensors, numbers, strings, lists and dicts. Delete "
                         "it to recompute it") from None
    except Exception as error:  # torch raises RuntimeError, KeyError, EOFError ... on garbage
        detail = ": ".join([type(error).__name__, *str(error).splitlines()[:1]])
        raise ValueError(f"{path}: not a readable torch file ({detail}); delete it to "
                         "recompute it") from None


def load_record(path: Path, key: Any) -> dict[str, Any]:
    """The cache record (a dict, :func:`load_plain`) at ``path`` whose ``"key"`` equals ``key``.

    Raises:
        ValueError: :func:`load_plain`'s refusals, or the file is not a dict with this key.
    """
    record = load_plain(path)
    stored = record.get("key") if isinstance(record, dict) else None
    if stored != key:
        raise ValueError(f"{path}: refused, it was computed from other data or settings (its "
                         f"key is {stored!r}, expected {key!r}); delete it to recompute it")
    return record
