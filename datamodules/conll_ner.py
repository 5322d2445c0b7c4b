"""Named-entity recognition on CoNLL-2003 English and CoNLL-2002 Spanish.

Format: one token per line, whitespace-separated columns, the word first and the NER tag last
(English ``WORD POS CHUNK NER``, Spanish ``WORD [POS] NER``); sentences end with an empty line.
``-DOCSTART-`` lines are skipped wherever they appear (they also end a sentence). Every token
line of a file must have the same number of columns (at least 2), and a tag must be ``O`` or
``B-TYPE`` / ``I-TYPE``. Tags are converted to IOB2 (:func:`iob1_to_iob2`: a chunk's first token
is always ``B-``); the English files are IOB1, the Spanish ones IOB2 already (unchanged, except
for the rare ``I-`` that starts a chunk).

Files: English ``eng.train`` / ``eng.testa`` (dev) / ``eng.testb`` (test) in folder
``conll2003_en``; Spanish ``esp.train`` / ``esp.testa`` / ``esp.testb`` in ``conll2002_es``.
Encoding: the NLTK copy of CoNLL-2002 (the shared one) and CoNLL-2003 are UTF-8, the default;
the original CoNLL-2002 distribution is latin-1: read it with ``encoding="latin-1"`` (``encoding:
latin-1`` under ``data.init_args`` in a config). Decoding is strict: a byte that is not valid in
the encoding is a :class:`~.files.MalformedLine` naming file, line and byte offset,
never a silent re-read in another encoding. An empty file is an
:class:`~.files.EmptyDataFile` naming it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .files import MalformedLine, check_encoding, check_separator, open_text, require_records
from .limits import LengthLimit
from .tagging import (
    TaggedSentence,
    TaggingDataModule,
    bounded_sentence,
    label_names,
    sentences_from_columns,
)

DOCSTART = "-DOCSTART-"

LANGUAGES = {
    "en": {
        "folder": "conll2003_en",
        "files": ("eng.train", "eng.testa", "eng.testb"),
        "hint": "CoNLL-2003 English (Tjong Kim Sang & De Meulder 2003) is built from the "
                "Reuters RCV1 corpus with the scripts of https://www.clips.uantwerpen.be/"
                "conll2003/ner/ (files eng.train, eng.testa, eng.testb).",
    },
    "es": {
        "folder": "conll2002_es",
        "files": ("esp.train", "esp.testa", "esp.testb"),
        "hint": "CoNLL-2002 Spanish (Tjong Kim Sang 2002) is distributed at "
                "https://www.clips.uantwerpen.be/conll2002/ner/ and in NLTK's conll2002 corpus "
                "(files esp.train, esp.testa, esp.testb).",
    },
}


def check_tag(tag: str) -> str | None:
    """None if ``tag`` is ``O`` or ``B-TYPE`` / ``I-TYPE``, else what is wrong with it."""
    if tag == "O":
        return None
    prefix, sep, kind = tag.partition("-")
    if not sep or prefix not in ("B", "I"):
        return f"invalid tag {tag!r} (expected O, B-TYPE or I-TYPE)"
    if not kind:
        return f"invalid tag {tag!r} (no entity type after {prefix}-)"
    return None


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1 (or IOB2) tags -> IOB2: an ``I-X`` that starts a chunk (after ``O``, at the start,
    or after a tag of another type) becomes ``B-X``. IOB2 input comes back unchanged."""
    converted = []
    previous = "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        converted.append(tag)
        previous = tag
    return converted


def read_conll_ner(path: str | os.PathLike, encoding: str = "utf-8",
                   limit: LengthLimit | None = None) -> list[TaggedSentence]:
    """The ``(word, NER tag)`` sentences of a CoNLL-2002/2003 file, tags converted to IOB2, each
    within ``limit`` (:func:`~.tagging.bounded_sentence`; None: unbounded).

    Raises :class:`~.files.MalformedLine` (naming ``file:line``) for a token line with
    fewer than 2 columns or with a different number of columns than the file's first token line,
    for an invalid tag or a byte not valid in ``encoding``, and for a sentence longer than
    ``limit`` (its first line); :class:`~.files.EmptyDataFile` for a file without
    sentences.
    """
    sentences = [bounded_sentence(sentence, limit, path, line)
                 for line, sentence in _iter_conll_ner(Path(path), encoding)]
    if limit is not None:
        limit.warn(path)
    return list(require_records(sentences, path, "sentences"))


def _iter_conll_ner(path: Path, encoding: str) -> Iterator[tuple[int, TaggedSentence]]:
    """``(first line, sentence)`` per sentence of the file."""
    words: list[str] = []
    tags: list[str] = []
    width = first = None
    with open_text(path, encoding) as lines:
        for number, line in enumerate(lines, start=1):
            check_separator(path, number, line, in_sentence=bool(words))
            columns = line.split()
            if not columns or columns[0] == DOCSTART:
                if words:
                    yield first, TaggedSentence(tuple(words), tuple(iob1_to_iob2(tags)))
                words, tags = [], []
                continue
            if len(columns) < 2:
                raise MalformedLine(path, number, f"expected a word and a tag, found "
                                    f"{len(columns)} column: {line.strip()[:80]!r}")
            if width is None:
                width = len(columns)
            elif len(columns) != width:
                raise MalformedLine(path, number, f"expected {width} columns as on the first "
                                    f"token line, found {len(columns)}: {line.strip()[:80]!r}")
            problem = check_tag(columns[-1])
            if problem is not None:
                raise MalformedLine(path, number, problem)
            if not words:
                first = number
            words.append(columns[0])
            tags.append(columns[-1])
    if words:
        yield first, TaggedSentence(tuple(words), tuple(iob1_to_iob2(tags)))


class CoNLLNERDataModule(TaggingDataModule):
    """CoNLL-2003 English (``language="en"``) or CoNLL-2002 Spanish (``"es"``) NER, IOB2 tags.

    Args:
        language: ``"en"`` or ``"es"``; chooses the default file names and folder (under
            :func:`~.files.data_root`) when they are not given.
        train_file, val_file, test_file: file names in ``data_dir`` (default per language:
            ``*.train``, ``*.testa``, ``*.testb``); plain or gzip-compressed.
        encoding: the files' codec, ``"utf-8"`` by default (CoNLL-2003 and NLTK's CoNLL-2002,
            the shared copies); ``"latin-1"`` for the original CoNLL-2002 distribution. Never
            guessed: a byte that does not decode is an error naming file, line and offset.
        hub_name, hub_config: ``"eriktks/conll2003"`` (no config) or ``"eriktks/conll2002"``,
            ``"es"``, read from their parquet exports (the old names ``conll2003`` and
            ``conll2002`` are loading scripts, refused by ``datasets`` >= 4; see
            :mod:`.hub`); columns ``tokens`` and ``ner_tags`` (ClassLabel ids or
            strings). Used only when ``data_dir`` is None.
        max_train_length: as in :class:`~.tagging.TaggingDataModule` (default 50 as
            in the paper; pass None to keep all, as ``configs/easy_first/ner_es.yaml`` does for
            Spanish, which has many long training sentences).
        Others: see :class:`~.tagging.TaggingDataModule`.

    Batches: ``words [B, T]``, ``prefixes [B, T, 4]``, ``suffixes [B, T, 4]``, ``tags [B, T]``
    (IOB2 tag ids, 0 = padding), ``lengths [B]``, ``index [B]``.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        language: str = "en",
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        encoding: str = "utf-8",
        hub_name: str | None = None,
        **kwargs,
    ) -> None:
        if language not in LANGUAGES:
            raise ValueError(f"language must be one of {sorted(LANGUAGES)}, got {language!r}")
        check_encoding(encoding)
        super().__init__(data_dir=data_dir, hub_name=hub_name, **kwargs)
        spec = LANGUAGES[language]
        self.default_folder = spec["folder"]
        self.source_hint = spec["hint"]

    def _files(self) -> dict[str, str]:
        h = self.hparams
        defaults = LANGUAGES[h.language]["files"]
        given = (h.train_file, h.val_file, h.test_file)
        return {split: name or default
                for split, name, default in zip(("train", "val", "test"), given, defaults,
                                                strict=True)}

    def expected_files(self) -> list[str]:
        return list(self._files().values())

    def read_local(self, folder: Path, split: str) -> list[TaggedSentence]:
        return read_conll_ner(folder / self._files()[split], self.hparams.encoding, self.limit)

    def from_hub(self, rows: Any, features: Any) -> list[TaggedSentence]:
        """Rows with ``tokens`` and ``ner_tags`` (class ids or strings), tags made IOB2."""
        names = label_names(features, "ner_tags")
        return sentences_from_columns(rows, "tokens", "ner_tags", names, convert=iob1_to_iob2)
