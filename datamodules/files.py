"""Where datasets live, checks that the expected files are there, and text-file reading.

- :func:`data_root`: the folder holding one sub-folder per dataset (``$STRUCTATTN_DATA``, default
  ``<repository>/../shared/data``).
- :func:`cache_root`: where derived files (BPE models, trained parsers) are kept
  (``$STRUCTATTN_CACHE``, default ``~/.cache/structattn``).
- :func:`atomic_path`: write a cache file so that a concurrent reader sees all of it or none.
- :func:`require_files`: fail early with a message that lists the expected files, the folder,
  where such data comes from and how to point the DataModule at it (:func:`how_to_give_data`).
- :func:`open_text`: plain or gzip-compressed text, UTF-8 by default or the codec named; a byte
  that does not decode is a :class:`MalformedLine` naming the file, line and byte offset (no
  silent fallback to another encoding: a latin-1 file, such as the original CoNLL-2002
  distribution, is read with ``encoding="latin-1"`` named explicitly).
- :class:`UnreadableFile`: a data file this user may not read, named with what to do.
- :func:`check_separator`: the rule for blank lines in CoNLL-style files (an empty line ends a
  sentence; a line of only whitespace inside a sentence is refused, not taken as one).
- :func:`check_encoding`: an encoding argument checked at construction.
- :func:`require_records`: the check every reader applies to what it read from a file: an empty
  file (or one with nothing but skipped lines) is an :class:`EmptyDataFile` naming the file.
- :class:`MalformedLine`: the error every reader raises for a bad line, naming ``file:line``.
"""

from __future__ import annotations

import codecs
import gzip
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO, TypeVar

T = TypeVar("T")

DATA_ENV_VAR = "STRUCTATTN_DATA"
CACHE_ENV_VAR = "STRUCTATTN_CACHE"
_GZIP_MAGIC = b"\x1f\x8b"


def data_root() -> Path:
    """The folder of the datasets: ``$STRUCTATTN_DATA`` if set (and non-empty); else, when the
    package runs from a source checkout, the ``shared/data`` folder beside it
    (``<repo>/../shared/data``); else (a pip install) ``data`` in :func:`cache_root`. Never a
    folder relative to ``site-packages``. It may not exist."""
    value = os.environ.get(DATA_ENV_VAR, "").strip()
    if value:
        return Path(value).expanduser()
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return checkout.parent / "shared" / "data"
    return cache_root() / "data"


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
    lists the expected files, the folder, what is missing, ``source_hint`` (where such data
    comes from) and :func:`how_to_give_data`.
    """
    names = list(names)
    expected = ", ".join(names)
    where = f"{source_hint} {how_to_give_data()}".strip()
    if data_dir is None:
        raise ValueError(f"no data folder given; expected a folder with {expected}. {where}")
    folder = Path(data_dir).expanduser()
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise FileNotFoundError(
            f"data folder {folder} {what}; expected a folder with {expected}. {where}"
        )
    if not any(folder.iterdir()):
        raise FileNotFoundError(
            f"data folder {folder} is empty; expected {expected} in it. {where}"
        )
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"data folder {folder} lacks {', '.join(missing)}; expected {expected} in it. {where}"
        )
    return folder


def how_to_give_data() -> str:
    """The sentence every missing-data error ends with: the two ways to point a DataModule at
    its files, ``--data.init_args.data_dir`` (this dataset's folder) and ``$STRUCTATTN_DATA``
    (the folder of every dataset's folder, :func:`data_root`), with the folder read now."""
    return (f"Give this dataset's folder with --data.init_args.data_dir DIR, or set "
            f"{DATA_ENV_VAR} to the folder holding the datasets' folders (now {data_root()}).")


def check_encoding(encoding: str) -> str:
    """``encoding`` if it names a Python codec, else ``ValueError`` (raised where a DataModule is
    built, not when its files are first read)."""
    if encoding == "auto":
        raise ValueError("encoding='auto' (UTF-8 with a silent latin-1 fallback) is no longer "
                         "supported: files are read as UTF-8 unless another encoding is named, "
                         "e.g. encoding='latin-1' for the original CoNLL-2002 distribution")
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise ValueError(f"unknown encoding {encoding!r} (a Python codec name such as 'utf-8' "
                         "or 'latin-1')") from None
    return encoding


def open_text(path: str | os.PathLike, encoding: str = "utf-8") -> TextIO:
    """Open a text file for reading, gzip-compressed or not (told by its first bytes).

    ``encoding`` is any Python codec (default UTF-8); decoding is strict: a byte sequence that is
    not valid in ``encoding`` raises :class:`MalformedLine` naming the file, the line and the
    byte offset (of the uncompressed text), with the advice to name the file's encoding. Newlines
    are universal (``\\r\\n`` reads as ``\\n``). Use it as a context manager. Raises
    :class:`UnreadableFile` when this user may not read ``path``.
    """
    path = Path(path)
    check_encoding(encoding)
    try:
        with path.open("rb") as raw:
            compressed = raw.read(2) == _GZIP_MAGIC
    except PermissionError:
        raise UnreadableFile(path) from None
    if compressed:
        handle = gzip.open(path, "rt", encoding=encoding, newline=None)
    else:
        handle = path.open("r", encoding=encoding, newline=None)
    return _CheckedText(handle, path, encoding, compressed)  # type: ignore[return-value]


class _CheckedText:
    """A text file whose decoding errors become :class:`MalformedLine` with file, line and byte
    offset (found by decoding the raw bytes again, only when an error happened)."""

    def __init__(self, handle: TextIO, path: Path, encoding: str, compressed: bool) -> None:
        self._handle, self._path = handle, path
        self._encoding, self._compressed = encoding, compressed

    def __enter__(self) -> _CheckedText:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._handle.close()

    def __iter__(self) -> _CheckedText:
        return self

    def __next__(self) -> str:
        try:
            return next(self._handle)
        except UnicodeDecodeError as error:
            raise self._located(error) from None

    def read(self, size: int = -1) -> str:
        try:
            return self._handle.read(size)
        except UnicodeDecodeError as error:
            raise self._located(error) from None

    def readline(self, size: int = -1) -> str:
        try:
            return self._handle.readline(size)
        except UnicodeDecodeError as error:
            raise self._located(error) from None

    def _located(self, error: UnicodeDecodeError) -> MalformedLine:
        with (gzip.open if self._compressed else open)(self._path, "rb") as raw:
            data = raw.read()
        try:
            data.decode(self._encoding)
        except UnicodeDecodeError as found:
            error = found
            offset = found.start
        else:  # not reproducible on the whole file: report what the stream saw
            offset = -1
        if offset < 0:
            return MalformedLine(self._path, 1, f"not valid {self._encoding}: {error.reason}")
        line = data.count(b"\n", 0, offset) + 1
        where = "uncompressed byte offset" if self._compressed else "byte offset"
        return MalformedLine(
            self._path, line,
            f"not valid {self._encoding}: byte 0x{data[offset]:02x} at {where} {offset} "
            f"({error.reason}). The file is read as {self._encoding}; if it is in another "
            "encoding, name it (encoding: latin-1 in the data config, or encoding='latin-1' "
            "for the DataModule); if it should be UTF-8, the file is damaged")


class EmptyDataFile(ValueError):
    """A data file with nothing to read (empty, or only blank or skipped lines); the message
    names the file. Attributes: ``path``, ``what`` (e.g. ``"sentences"``) and ``detail`` (why
    there is nothing, when it is not simply an empty file)."""

    def __init__(self, path: str | os.PathLike, what: str, detail: str = "") -> None:
        self.path, self.what, self.detail = Path(path), what, detail
        why = detail or "the file is empty or holds only blank or skipped lines"
        super().__init__(f"{self.path}: no {what} ({why}). Every split read from a file must "
                         "hold data: an empty training split cannot train, an empty "
                         "validation split leaves the monitored metric and the best "
                         "checkpoint undefined")

    def __reduce__(self):  # picklable across DataLoader workers / DDP processes
        return type(self), (self.path, self.what, self.detail)


def require_records(records: Sequence[T], path: str | os.PathLike, what: str,
                    detail: str = "") -> Sequence[T]:
    """``records`` (what a reader got from ``path``) if there is at least one, else
    :class:`EmptyDataFile` naming ``path``. Every reader of the project calls it."""
    if not records:
        raise EmptyDataFile(path, what, detail)
    return records


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


class UnreadableFile(ValueError):
    """A data file that this user may not read (``PermissionError``); the message names it and
    says what to do. Attribute: ``path``."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        super().__init__(f"{self.path}: permission denied: this user may not read the file. "
                         "Make it readable (chmod a+r, or ask its owner), or copy the data to "
                         "a folder of yours and point data_dir there")

    def __reduce__(self):  # picklable across DataLoader workers / DDP processes
        return type(self), (self.path,)


def check_separator(path: str | os.PathLike, number: int, line: str, in_sentence: bool) -> None:
    """The blank-line rule of CoNLL-style files, for line ``number`` of ``path``: an empty line
    ends a sentence, and so does a line of only whitespace between sentences; inside a sentence
    (``in_sentence``) such a line is a :class:`MalformedLine`, not a silent split in two (none
    of the shared datasets has one)."""
    if in_sentence and line.strip("\r\n") and not line.strip():
        raise MalformedLine(path, number, "a line of only whitespace inside a sentence; "
                            "sentences are separated by empty lines (if the sentence ends "
                            "here, make the line empty; if it goes on, delete the line)")
