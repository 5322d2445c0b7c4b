"""What a run records of where and with what it ran, read from the process itself.

Problem: a report must say which code, libraries and machine produced each of its numbers, and
only what the runs themselves recorded: a report regenerated later on another machine must not
print that machine's versions as if the runs had used them.

Method: :func:`run_provenance` is called by the runner when a run finishes and its result is
filed with the run: the day, the project's git commit and whether its tracked files differed
from that commit (read with ``git`` from the folder this package was imported from, only when
that folder is a git checkout of the project; an installed wheel records its version instead),
the torch and Lightning versions, the threads and the device. Nothing here is an argument a
caller could set.
"""

from __future__ import annotations

import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

import torch

PACKAGE = Path(__file__).resolve().parents[1]  # lit_structattn/


def _git(*args: str) -> str | None:
    """The output of ``git args`` in the project's checkout, None where git or a checkout of
    this package is missing."""
    try:
        done = subprocess.run(["git", "-C", str(PACKAGE.parent), *args], capture_output=True,
                              text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def source_commit() -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the checkout this package runs from: its HEAD and whether a
    tracked file differs from it (untracked and ignored files, such as run folders, do not
    count); ``(None, None)`` when the package is not the ``lit_structattn`` folder of a git
    checkout (an installed wheel)."""
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != PACKAGE.parent:
        return None, None
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return commit, None if changes is None else bool(changes)


def _installed_version() -> str:
    """The version of the installed ``lit_structattn`` distribution ("unknown" without one)."""
    try:
        return metadata.version("lit_structattn")
    except metadata.PackageNotFoundError:
        return "unknown"


def run_provenance(device: str) -> dict:
    """The provenance of a run finishing now on ``device`` (the runner's summary of where the
    trainer ran): ``finished`` (the day), ``commit`` and ``dirty`` (or ``version`` of an
    installed package), ``torch``, ``lightning``, ``python``, ``threads``, ``device``."""
    import lightning

    commit, dirty = source_commit()
    return {
        "finished": time.strftime("%Y-%m-%d"),
        **({"commit": commit, "dirty": dirty} if commit else {"version": _installed_version()}),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "device": device,
    }
