"""Reading word-vector text files (GloVe, word2vec text, Polyglot dumped as text), shared by the
taggers' initial word embeddings (:func:`load_pretrained_vectors`, read by the tagging
DataModules) and the NLI input vectors.

One ``token v_1 ... v_dim`` per line, fields separated by spaces or tabs, optionally after a
word2vec header ``N D``; ``.gz`` files are read compressed. A token may contain spaces (GloVe
840B): the last ``dim`` fields are the vector.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from torch import Tensor

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


def load_pretrained_vectors(
    path: str | Path,
    vocab_tokens: Sequence[str],
    dim: int,
    *,
    lowercase_fallback: bool = True,
    padding_idx: int | None = 0,
    seed: int = 0,
) -> tuple[Tensor, int]:
    """Initial word-embedding matrix from a text file of word vectors.

    Formats: those of :func:`read_word_vectors` (GloVe, word2vec text, Polyglot vectors dumped
    as text; ``.gz`` or not). The first occurrence of a token wins.

    Args:
        path: the vector file.
        vocab_tokens: the vocabulary, ``vocab_tokens[i]`` is the token of id ``i``.
        dim: the expected vector size (must match the file).
        lowercase_fallback: a token not in the file takes the vector of its lowercased form.
        padding_idx: this row is set to 0 (``None``: no padding row).
        seed: seeds the random rows of tokens not found, drawn from ``N(0, sigma^2)`` with sigma
            the standard deviation of the found vectors' entries (1 when none is found).

    Returns:
        ``(matrix [len(vocab_tokens), dim] float32, number of vocabulary tokens found)``
        (the padding row is not counted).

    Raises:
        MalformedLine: (a ``ValueError``) ``file:line`` of a malformed line (too few fields, a
            value that is not a finite number, undecodable UTF-8) or of a dimension mismatch.
        FileNotFoundError: ``path`` does not exist.
    """
    index: dict[str, list[int]] = {}
    for i, token in enumerate(vocab_tokens):
        if i != padding_idx:
            index.setdefault(token, []).append(i)
    lowered: dict[str, list[int]] = {}
    if lowercase_fallback:
        for token, ids in index.items():
            if token.lower() != token:
                lowered.setdefault(token.lower(), []).extend(ids)

    exact: dict[int, list[float]] = {}
    fallback: dict[int, list[float]] = {}
    for token, values in read_word_vectors(path, dim, lambda t: t in index or t in lowered):
        for i in index.get(token, ()):
            exact.setdefault(i, values)
        for i in lowered.get(token, ()):
            fallback.setdefault(i, values)

    vectors = {**fallback, **exact}
    known = torch.tensor(list(vectors.values()), dtype=torch.float32).reshape(len(vectors), dim)
    sigma = float(known.std()) if known.numel() > 1 else 1.0
    generator = torch.Generator().manual_seed(seed)
    matrix = torch.randn(len(vocab_tokens), dim, generator=generator) * sigma
    matrix[torch.tensor(list(vectors), dtype=torch.long)] = known
    if padding_idx is not None and 0 <= padding_idx < len(vocab_tokens):
        matrix[padding_idx] = 0
    return matrix, len(vectors)
