"""Universal Dependencies POS tagging (UPOS) from CoNLL-U files, e.g. English-EWT.

CoNLL-U (https://universaldependencies.org/format.html): comment lines start with ``#``; a word
line has 10 tab-separated columns ``ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC``; a
sentence ends with an empty line. Only syntactic words (integer IDs, 1, 2, ... in order) are kept:
multiword-token ranges (``3-4``) and empty nodes (``8.1``) are skipped. The words are the FORM
column and the tags the UPOS column; for dependency parsing, :func:`read_conllu_trees` reads the
FORM and HEAD columns. Files may be gzip-compressed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import MalformedLine, check_encoding, check_separator, open_text, require_records
from .limits import LengthLimit
from .tagging import TaggedSentence, TaggingDataModule, bounded_sentence, label_names

CONLLU_COLUMNS = 10
ID, FORM, UPOS, HEAD = 0, 1, 3, 6


def read_conllu(path: str | os.PathLike, encoding: str = "utf-8",
                limit: LengthLimit | None = None) -> list[TaggedSentence]:
    """The ``(FORM, UPOS)`` sentences of a CoNLL-U file (plain or ``.gz``), each within
    ``limit`` (:func:`~.tagging.bounded_sentence`; None: unbounded).

    Raises :class:`~.files.MalformedLine` (naming ``file:line``) for a line with a
    number of tab-separated columns other than 10, an ID that is not an integer, a range
    ``a-b`` or a decimal ``a.b``, an integer ID out of sequence, an empty FORM/UPOS, a byte
    not valid in ``encoding``, or a sentence longer than ``limit`` (its first word's line);
    :class:`~.files.EmptyDataFile` for a file without sentences.
    """
    sentences = [bounded_sentence(TaggedSentence(words, tags), limit, path, line)
                 for words, tags, _, line in _iter_conllu(Path(path), encoding)]
    if limit is not None:
        limit.warn(path)
    return list(require_records(sentences, path, "sentences"))


@dataclass(frozen=True)
class DependencyTree:
    """One sentence with its gold dependency tree: ``heads[i]`` is the 1-based position of the
    head of word ``i + 1`` (0 = the root)."""

    words: tuple[str, ...]
    heads: tuple[int, ...]


def read_conllu_trees(path: str | os.PathLike, encoding: str = "utf-8") -> list[DependencyTree]:
    """The ``(FORM, HEAD)`` sentences of a CoNLL-U file (plain or ``.gz``), with the checks of
    :func:`read_conllu` and also :class:`~.files.MalformedLine` for a HEAD that is not
    an integer in ``[0, sentence length]`` or that points at the word itself."""
    trees = [DependencyTree(words, heads)
             for words, _, heads, _ in _iter_conllu(Path(path), encoding)]
    return list(require_records(trees, path, "sentences"))


def _iter_conllu(
    path: Path, encoding: str
) -> Iterator[tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...], int]]:
    """``(words, tags, heads, line of the first word)`` per sentence; HEAD is checked at the
    end of each sentence."""
    words: list[str] = []
    tags: list[str] = []
    heads: list[tuple[str, int]] = []  # (HEAD column, line number)
    with open_text(path, encoding) as lines:
        for number, line in enumerate(lines, start=1):
            check_separator(path, number, line, in_sentence=bool(words))
            line = line.rstrip("\r\n")
            if not line.strip():
                if words:
                    yield tuple(words), tuple(tags), _check_heads(path, heads), heads[0][1]
                words, tags, heads = [], [], []
                continue
            if line.startswith("#"):
                continue
            columns = line.split("\t")
            if len(columns) != CONLLU_COLUMNS:
                raise MalformedLine(path, number, f"expected {CONLLU_COLUMNS} tab-separated "
                                    f"columns, found {len(columns)}: {line[:80]!r}")
            word_id = columns[ID]
            if _is_range(word_id) or _is_empty_node(word_id):
                continue
            if not word_id.isdigit():
                raise MalformedLine(path, number, f"invalid ID {word_id!r} (expected an integer, "
                                    "a range a-b or an empty node a.b)")
            if int(word_id) != len(words) + 1:
                raise MalformedLine(path, number, f"word ID {word_id} out of sequence "
                                    f"(expected {len(words) + 1}; missing empty line?)")
            form, upos = columns[FORM], columns[UPOS]
            if not form or not upos or upos == "_":
                raise MalformedLine(path, number, f"empty FORM or UPOS in {line[:80]!r}")
            words.append(form)
            tags.append(upos)
            heads.append((columns[HEAD], number))
    if words:
        yield tuple(words), tuple(tags), _check_heads(path, heads), heads[0][1]


def _check_heads(path: Path, heads: list[tuple[str, int]]) -> tuple[int, ...]:
    checked = []
    for position, (head, number) in enumerate(heads, start=1):
        if not head.isdigit() or int(head) > len(heads) or int(head) == position:
            raise MalformedLine(path, number, f"invalid HEAD {head!r} for word {position} of a "
                                f"{len(heads)}-word sentence")
        checked.append(int(head))
    return tuple(checked)


def _is_range(word_id: str) -> bool:
    low, sep, high = word_id.partition("-")
    return bool(sep) and low.isdigit() and high.isdigit()


def _is_empty_node(word_id: str) -> bool:
    major, sep, minor = word_id.partition(".")
    return bool(sep) and major.isdigit() and minor.isdigit()


class UDPOSDataModule(TaggingDataModule):
    """UPOS tagging on a Universal Dependencies treebank (default: English-EWT, whose folder
    under :func:`~.files.data_root` is ``ud_english_ewt``).

    Args:
        train_file, val_file, test_file: CoNLL-U file names in ``data_dir`` (plain or ``.gz``).
        encoding: of the files (CoNLL-U is UTF-8, the default); strict, see
            :func:`~.files.open_text`.
        hub_name, hub_config: ``"universal-dependencies/universal_dependencies"``,
            ``"en_ewt"`` (any treebank config), read from its parquet export (the old name
            ``universal_dependencies`` is a loading script, refused by ``datasets`` >= 4; see
            :mod:`.hub`); columns ``tokens`` and ``upos`` (ClassLabel ids or
            strings). Used only when ``data_dir`` is None.
        Others: see :class:`~.tagging.TaggingDataModule`.

    Batches: ``words [B, T]``, ``prefixes [B, T, 4]``, ``suffixes [B, T, 4]``, ``tags [B, T]``
    (UPOS ids, 0 = padding), ``lengths [B]``, ``index [B]``.
    """

    tokenizer = "ud"  # UD English-EWT splits hyphens too (15-year -> 15 - year)
    default_folder = "ud_english_ewt"
    source_hint = ("Universal Dependencies treebanks come from "
                   "https://universaldependencies.org (e.g. github.com/UniversalDependencies/"
                   "UD_English-EWT: en_ewt-ud-{train,dev,test}.conllu).")

    def __init__(
        self,
        data_dir: str | None = None,
        train_file: str = "en_ewt-ud-train.conllu.gz",
        val_file: str = "en_ewt-ud-dev.conllu.gz",
        test_file: str = "en_ewt-ud-test.conllu.gz",
        encoding: str = "utf-8",
        hub_name: str | None = None,
        hub_config: str | None = "en_ewt",
        **kwargs,
    ) -> None:
        check_encoding(encoding)
        super().__init__(data_dir=data_dir, hub_name=hub_name, hub_config=hub_config, **kwargs)

    def _files(self) -> dict[str, str]:
        h = self.hparams
        return {"train": h.train_file, "val": h.val_file, "test": h.test_file}

    def expected_files(self) -> list[str]:
        return list(self._files().values())

    def read_local(self, folder: Path, split: str) -> list[TaggedSentence]:
        return read_conllu(folder / self._files()[split], self.hparams.encoding, self.limit)

    def from_hub(self, rows: Any, features: Any) -> list[TaggedSentence]:
        """Rows with ``tokens`` and ``upos`` (class ids or strings); ``_`` tags (multiword
        tokens, if the hub copy keeps them) are dropped with their token."""
        names = label_names(features, "upos")
        sentences = []
        for row in rows:
            pairs = [(str(w), names[t] if names is not None else str(t))
                     for w, t in zip(row["tokens"], row["upos"], strict=True)]
            pairs = [(w, t) for w, t in pairs if t != "_"]
            if pairs:
                words, tags = zip(*pairs, strict=True)
                sentences.append(TaggedSentence(words, tags))
        return sentences
