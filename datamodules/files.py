"""Where datasets live, checks that the expected files are there, and text-file reading.

- :func:`data_root`: the folder holding one sub-folder per dataset (``$STRUCTATTN_DATA``, default
  ``<repository>/../shared/data``).
- :func:`cache_root`: where derived files (BPE models, trained parsers) are kept
  (``$STRUCTATTN_CACHE``, default ``~/.cache/structattn``).
- :func:`atomic_path`: write a cache file so that a concurrent reader sees all of it or none.
- :func:`require_files`: fail early with a message that lists the expected files, the folder and
  where such data comes from.
- :func:`open_text`: plain or gzip-compressed text, UTF-8 by default, ``"auto"`` for UTF-8 with a
  latin-1 fallback (the original CoNLL-2002 files are latin-1).
- :class:`MalformedLine`: the error every reader raises for a bad line, naming ``file:line``.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

DATA_ENV_VAR = "STRUCTATTN_DATA"
CACHE_ENV_VAR = "STRUCTATTN_CACHE"
_GZIP_MAGIC = b"\x1f\x8b"


def data_root() -> Path:
    """The folder of the shared datasets: ``$STRUCTATTN_DATA`` if set (and non-empty), else the
    ``shared/data`` folder next to the repository (``<repo>/../shared/data``). It may not exist."""
    value = os.environ.get(DATA_ENV_VAR, "").strip()
    if value:
        return Path(value).expanduser()
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def cache_root() -> Path:
    """The folder of derived files: ``$STRUCTATTN_CACHE`` if set (and non-empty), else
    ``~/.cache/structattn``. It may not exist."""
    value = os.environ.get(CACHE_ENV_VAR, "").strip()
    if value:
        return Path(value).expanduser()
    return Path.home() / ".cache" / "structattn"


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary sibling of ``path``, unique to this process, to write in place of ``path``;
    when the block ends without an error it replaces ``path`` in one step (so processes that
    share a cache, e.g. DDP ranks or parallel runs, never read half a file), else it is removed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        yield partial
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def require_files(
    data_dir: str | os.PathLike | None, names: Iterable[str], source_hint: str
) -> Path:
    """Check that ``data_dir`` is an existing, non-empty folder holding every file in ``names``.

    Returns ``data_dir`` as a ``Path``. Raises ``ValueError`` if ``data_dir`` is None and
    ``FileNotFoundError`` if the folder is missing, empty or lacks some of the files; the message
    lists the expected files, the folder, what is missing and ``source_hint`` (where such data
    comes from).
    """
    names = list(names)
    expected = ", ".join(names)
    if data_dir is None:
        raise ValueError(f"no data folder given; expected a folder with {expected}. {source_hint}")
    folder = Path(data_dir).expanduser()
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise FileNotFoundError(
            f"data folder {folder} {what}; expected a folder with {expected}. {source_hint}"
        )
    if not any(folder.iterdir()):
        raise FileNotFoundError(
            f"data folder {folder} is empty; expected {expected} in it. {source_hint}"
        )
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"data folder {folder} lacks {', '.join(missing)}; expected {expected} in it. "
            f"{source_hint}"
        )
    return folder


def open_text(path: str | os.PathLike, encoding: str = "utf-8") -> TextIO:
    """Open a text file for reading, gzip-compressed or not (told by its first bytes).

    ``encoding`` is any Python codec, or ``"auto"``: UTF-8 when the whole file decodes as UTF-8,
    latin-1 otherwise (the file is then read into memory once to decide). Newlines are universal
    (``\\r\\n`` reads as ``\\n``). Use it as a context manager.
    """
    path = Path(path)
    with path.open("rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
    if encoding == "auto":
        opener = gzip.open if compressed else open
        with opener(path, "rb") as raw:
            data = raw.read()
        return io.StringIO(_decode_auto(data), newline=None)
    if compressed:
        return gzip.open(path, "rt", encoding=encoding, newline=None)
    return path.open("r", encoding=encoding, newline=None)


def detect_encoding(path: str | os.PathLike) -> str:
    """``"utf-8"`` if the (possibly gzip-compressed) file decodes as UTF-8, else ``"latin-1"``."""
    path = Path(path)
    with path.open("rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
    with (gzip.open if compressed else open)(path, "rb") as raw:
        data = raw.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "latin-1"
    return "utf-8"


def _decode_auto(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


class MalformedLine(ValueError):
    """A line of a data file that cannot be read; the message is ``"{file}:{line}: {problem}"``.

    Attributes: ``path`` (``Path``), ``line`` (1-based line number) and ``problem`` (text).
    """

    def __init__(self, path: str | os.PathLike, line: int, problem: str) -> None:
        self.path = Path(path)
        self.line = line
        self.problem = problem
        super().__init__(f"{self.path}:{line}: {problem}")

    def __reduce__(self):  # picklable across DataLoader workers / DDP processes
        return type(self), (self.path, self.line, self.problem)
