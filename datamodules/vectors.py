"""Reading word-vector text files (GloVe, word2vec text, Polyglot dumped as text), shared by the
tagging encoder's initial embeddings and the NLI input vectors.

One ``token v_1 ... v_dim`` per line, fields separated by spaces or tabs, optionally after a
word2vec header ``N D``; ``.gz`` files are read compressed. A token may contain spaces (GloVe
840B): the last ``dim`` fields are the vector.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable, Iterator
from pathlib import Path

from .files import MalformedLine


def _parse_float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def read_word_vectors(
    path: str | Path, dim: int, wanted: Callable[[str], bool]
) -> Iterator[tuple[str, list[float]]]:
    """``(token, vector)`` for every line of ``path`` whose token satisfies ``wanted``, in file
    order (repeated tokens repeat). Only wanted lines have their values parsed.

    Raises:
        MalformedLine: (a ``ValueError``) naming ``file:line`` for undecodable UTF-8, a line
            with fewer than ``dim`` values, a value that is not a finite number, or a size that
            is not ``dim`` (in the header or in a line).
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    if dim <= 0:
        raise ValueError(f"the vector size must be positive, got {dim}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise MalformedLine(path, number, f"not valid UTF-8 ({error.reason})") from None
            fields = line.rstrip("\r\n").split()
            if not fields:
                continue
            if number == 1 and len(fields) == 2 and dim != 1 and all(map(_is_int, fields)):
                if int(fields[1]) != dim:
                    raise MalformedLine(path, number, f"the header says vectors of size "
                                        f"{fields[1]}, expected {dim}")
                continue
            found = len(fields) - 1
            if found < dim:
                raise MalformedLine(path, number, f"expected a token and {dim} values, found "
                                    f"{found} values (malformed line or dimension mismatch)")
            if found > dim and all(_parse_float(f) is not None for f in fields[1:found - dim + 1]):
                raise MalformedLine(path, number,
                                    f"found {found} values, expected {dim} (dimension mismatch)")
            token = " ".join(fields[: len(fields) - dim])
            if not wanted(token):
                continue
            texts = fields[len(fields) - dim:]
            values = [_parse_float(f) for f in texts]
            if any(v is None for v in values):
                bad = texts[values.index(None)]
                raise MalformedLine(path, number, f"{bad!r} is not a finite number")
            yield token, values
