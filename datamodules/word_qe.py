"""Word-level quality estimation (WMT16/17 style, OpenKiwi file layout).

A split ``P`` is four line-aligned files in one folder (UTF-8, tokens separated by spaces):
``P.src`` (source sentence), ``P.mt`` (machine translation), ``P.tags`` (one ``OK``/``BAD`` tag
per MT word, no gap tags) and ``P.align`` (``i-j`` pairs: source word i is aligned to MT word j,
both 0-based). The words tagged are the MT words; every MT word also gets the source words
aligned to it (``aligned [B, T, A]`` in the batch, ids in :attr:`WordQEDataModule.source_vocab`).

Default splits: ``train``, ``dev`` and ``test``. When the test split has no tags file (as in the
shared WMT17 en-de sample, whose test tags are withheld), the **test split (and predict) serve
the dev split** with a warning; pass ``test_prefix="dev"`` to say so explicitly.

A trained model reads raw examples (:class:`QECodec`) one per line, the three columns of a split
tab-separated: ``MT sentence<TAB>source sentence<TAB>alignment``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

from lit_structattn.common.constants import PAD

from .files import MalformedLine, check_encoding, open_text, require_files, require_records
from .limits import LengthLimit
from .tagging import (
    SentenceEncoder,
    TaggedSentence,
    TaggingCodec,
    TaggingDataModule,
    bounded_sentence,
    label_names,
    raw_words,
    untagged,
)
from .vocabulary import Vocabulary

QE_TAGS = ("OK", "BAD")
_PAIR = re.compile(r"^(\d+)-(\d+)$")
EXTENSIONS = ("src", "mt", "tags", "align")


def read_word_qe(prefix: str | os.PathLike, encoding: str = "utf-8",
                 limit: LengthLimit | None = None) -> list[TaggedSentence]:
    """The sentences of one split from ``{prefix}.src/.mt/.tags/.align``, each within
    ``limit`` (MT and source words, :func:`~.tagging.bounded_sentence`; None:
    unbounded).

    Raises :class:`~.files.MalformedLine` (naming ``file:line``) if the files have
    different numbers of lines, a sentence is empty, the tag count differs from the MT word count,
    a tag is not OK/BAD, or an alignment pair is not ``i-j`` with ``i`` < source length and
    ``j`` < MT length, a byte is not valid in ``encoding``, or a sentence is longer than
    ``limit`` (named in the ``.mt`` file);
    :class:`~.files.EmptyDataFile` (naming the ``.mt`` file) for a split without
    sentences.
    """
    prefix = Path(prefix)
    paths = {ext: prefix.with_name(f"{prefix.name}.{ext}") for ext in EXTENSIONS}
    lines = {}
    for ext, path in paths.items():
        with open_text(path, encoding) as handle:
            lines[ext] = handle.read().split("\n")
        if lines[ext] and lines[ext][-1] == "":  # the final newline
            lines[ext].pop()
    count = len(lines["mt"])
    for ext in EXTENSIONS:
        if len(lines[ext]) != count:
            shorter = ext if len(lines[ext]) < count else "mt"
            raise MalformedLine(paths[shorter], min(len(lines[ext]), count) + 1,
                                f"{paths[ext].name} has {len(lines[ext])} lines but "
                                f"{paths['mt'].name} has {count}; the files must be line-aligned")
    require_records(lines["mt"], paths["mt"], "sentences",
                    f"the files {prefix.name}.{{{','.join(EXTENSIONS)}}} are empty")
    sentences = []
    for index in range(count):
        number = index + 1
        source = lines["src"][index].split()
        mt = lines["mt"][index].split()
        tags = lines["tags"][index].split()
        if not source or not mt:
            which = "src" if not source else "mt"
            raise MalformedLine(paths[which], number, "empty sentence")
        if len(tags) != len(mt):
            raise MalformedLine(paths["tags"], number, f"{len(tags)} tags for {len(mt)} MT words "
                                f"(one OK/BAD tag per MT word, no gap tags)")
        for tag in tags:
            if tag not in QE_TAGS:
                raise MalformedLine(paths["tags"], number, f"invalid tag {tag!r} (OK or BAD)")
        try:
            alignment = checked_alignment(parse_alignment(lines["align"][index]), len(source),
                                          len(mt))
        except ValueError as error:
            raise MalformedLine(paths["align"], number, str(error)) from None
        sentences.append(bounded_sentence(
            TaggedSentence(tuple(mt), tuple(tags), tuple(source), alignment), limit,
            paths["mt"], number))
    if limit is not None:
        limit.warn(paths["mt"])
    return sentences


def parse_alignment(text: str) -> list[tuple[int, int]]:
    """The ``(source i, MT j)`` pairs of an alignment line (``i-j`` pairs separated by spaces);
    ``ValueError`` naming a pair that is not ``i-j``."""
    pairs = []
    for pair in text.split():
        match = _PAIR.match(pair)
        if match is None:
            raise ValueError(f"invalid alignment {pair!r} (expected source-MT, e.g. 3-4)")
        pairs.append((int(match.group(1)), int(match.group(2))))
    return pairs


def checked_alignment(pairs: Iterable[tuple[int, int]], source_length: int, mt_length: int
                      ) -> tuple[tuple[int, int], ...]:
    """``pairs`` sorted, without duplicates; ``ValueError`` naming a pair outside the
    sentences (0-based: ``i < source_length``, ``j < mt_length``)."""
    for i, j in pairs:
        if not (0 <= i < source_length and 0 <= j < mt_length):
            raise ValueError(f"alignment {i}-{j} out of range ({source_length} source words, "
                             f"{mt_length} MT words, 0-based)")
    return tuple(sorted(set(pairs)))


class QECodec(TaggingCodec):
    """Raw word-level QE examples for a trained QE tagger: the tagger's codec
    (:class:`~.tagging.TaggingCodec`) with the source vocabulary. An example is an
    MT sentence (the words tagged OK/BAD), its source sentence and their alignment; the batch
    adds ``aligned [B, T, A]``, ``source [B, S]`` and ``source_lengths [B]`` as the
    DataModule's do. Blank lines are skipped."""

    format = ("one MT sentence<TAB>source sentence<TAB>alignment per line (alignment: "
              "source-MT word pairs i-j, 0-based): "
              "das Haus ist klein<TAB>the house is small<TAB>0-0 1-1 2-2 3-3")

    def __init__(self, vocab: Vocabulary, affix_vocab: Vocabulary, tag_vocab: Vocabulary,
                 source_vocab: Vocabulary, limit: LengthLimit | None = None) -> None:
        # the alignment counts the words as given: QE input is never tokenised again
        super().__init__(vocab, affix_vocab, tag_vocab, limit, tokenizer="whitespace")
        self.encoder.source_vocab = source_vocab

    def vocabularies(self) -> dict[str, Vocabulary]:
        return {**super().vocabularies(), "source_vocab": self.encoder.source_vocab}

    def example(self, words: str | Sequence[str], source: str | Sequence[str] | None = None,
                alignment: str | Iterable[tuple[int, int]] | None = None) -> TaggedSentence:
        """An MT sentence with its ``source`` sentence (each a string split on whitespace, or
        its words) and their ``alignment`` (an alignment line ``"0-0 1-2"``, or
        ``(source i, MT j)`` pairs, 0-based) as an untagged :class:`TaggedSentence` within
        ``limit``; ``ValueError`` if one is missing or empty, a pair is malformed or out of
        range, or a sentence is too long."""
        if source is None or alignment is None:
            raise ValueError("a word-level QE model reads every MT sentence with its source "
                             "sentence and their alignment")
        mt, source = raw_words(words, "MT sentence"), raw_words(source, "source sentence")
        if isinstance(alignment, str):
            alignment = parse_alignment(alignment)
        sentence = untagged(mt, source, checked_alignment(alignment, len(source), len(mt)))
        return bounded_sentence(sentence, self.limit)

    def fields(self, line: str) -> tuple[str, ...]:
        """The MT sentence, source sentence and alignment of a line; ``ValueError`` unless it
        has exactly three tab-separated fields."""
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError(f"expected MT sentence<TAB>source sentence<TAB>alignment, found "
                             f"{len(fields)} tab-separated field{'s' * (len(fields) != 1)}")
        return tuple(fields)


class WordQEDataModule(TaggingDataModule):
    """Word-level QE: OK/BAD tags over MT words, with source words and alignments.

    Args:
        data_dir: the folder of ``{prefix}.{src,mt,tags,align}`` (default: the shared
            ``wmt_qe_word_en_de_sample`` folder under :func:`~.files.data_root`).
        train_prefix, val_prefix, test_prefix: file-name stems of the splits. A test split
            without a ``.tags`` file is replaced by the validation split (with a warning).
        encoding: of the files (default UTF-8; strict, see :func:`~.files.open_text`).
        hub_name, hub_config: ``"wmt/wmt20_mlqe_task2"``, ``"en-de"``, read from its parquet
            export (its ``main`` is a loading script, refused by ``datasets`` >= 4; see
            :mod:`.hub`); columns ``translation`` {src, tgt}, ``mt_tags``
            (ClassLabel ``BAD``/``OK``, with or without gap tags), ``alignments``. Used only
            when ``data_dir`` is None.
        max_train_length: counts MT words.
        Others: see :class:`~.tagging.TaggingDataModule`. The BAD weight of the loss
        is the task's (``tag_weights`` of :class:`~lit_structattn.tasks.TaggingTask`), not the
        data's.

    After :meth:`setup` also ``source_vocab`` (source words of the training split, same
    ``min_count``; its size is ``source_vocab_size``) and ``test_is_val`` (True when the test
    split serves the validation data).
    Batches: ``words [B, T]``, ``prefixes [B, T, 4]``, ``suffixes [B, T, 4]`` (MT words),
    ``tags [B, T]`` (ids of ``<pad>``/``BAD``/``OK`` in ``tag_vocab``), ``lengths [B]``,
    ``index [B]``, ``aligned [B, T, A]``, ``source [B, S]``, ``source_lengths [B]``.
    """

    default_folder = "wmt_qe_word_en_de_sample"
    source_hint = ("Word-level QE data (WMT16/WMT17 en-de: src, mt, tags, alignments) comes "
                   "from the WMT quality-estimation shared tasks (https://www.statmt.org/wmt16/"
                   "quality-estimation-task.html); OpenKiwi's layout is "
                   "{split}.{src,mt,tags,align}.")

    def __init__(
        self,
        data_dir: str | None = None,
        train_prefix: str = "train",
        val_prefix: str = "dev",
        test_prefix: str = "test",
        encoding: str = "utf-8",
        hub_name: str | None = None,
        **kwargs,
    ) -> None:
        check_encoding(encoding)
        super().__init__(data_dir=data_dir, hub_name=hub_name, **kwargs)
        self.source_vocab: Vocabulary | None = None
        self.test_is_val = False

    def _prefixes(self) -> dict[str, str]:
        h = self.hparams
        return {"train": h.train_prefix, "val": h.val_prefix, "test": h.test_prefix}

    def expected_files(self) -> list[str]:
        prefixes = self._prefixes()
        names = [f"{prefixes[s]}.{ext}" for s in ("train", "val") for ext in EXTENSIONS]
        return list(dict.fromkeys(names))

    def read_local(self, folder: Path, split: str) -> list[TaggedSentence]:
        prefix = self._prefixes()[split]
        if split == "test":
            if not (folder / f"{prefix}.tags").is_file():
                return self._test_from_val(f"{folder / prefix}.tags does not exist")
            require_files(folder, [f"{prefix}.{ext}" for ext in EXTENSIONS], self.source_hint)
        return read_word_qe(folder / prefix, self.hparams.encoding, self.limit)

    def _test_from_val(self, why: str) -> list[TaggedSentence]:
        rank_zero_warn(f"{type(self).__name__}: the test split has no tags ({why}); the test "
                       "split serves the validation data.")
        self.test_is_val = True
        return self.read_split("val")

    def from_hub(self, rows: Any, features: Any) -> list[TaggedSentence]:
        """Rows with ``translation`` ({source language: str, target language: str}, languages
        from ``hub_config`` ``"src-tgt"``), ``mt_tags`` (N word tags or 2N+1 with gaps) and
        ``alignments`` ([[i, j], ...]). A split without tags serves the validation data."""
        config = self.hparams.hub_config or ""
        source_lang, _, target_lang = config.partition("-")
        if not target_lang:
            raise ValueError(f"hub_config must name the language pair as 'src-tgt', got {config!r}")
        names = label_names(features, "mt_tags")
        sentences = []
        for row in rows:
            source = tuple(row["translation"][source_lang].split())
            mt = tuple(row["translation"][target_lang].split())
            tags = [names[t] if names is not None else str(t) for t in row["mt_tags"]]
            if not tags:
                return self._test_from_val("the hub split has no mt_tags")
            if len(tags) == 2 * len(mt) + 1:
                tags = tags[1::2]
            alignment = tuple(sorted({(int(i), int(j)) for i, j in row["alignments"]}))
            sentences.append(TaggedSentence(mt, tuple(tags), source, alignment))
        return sentences

    def build_encoder(self, sentences: dict[str, list[TaggedSentence]]) -> SentenceEncoder:
        encoder = super().build_encoder(sentences)
        # BAD 1, OK 2
        self.tag_vocab = encoder.tag_vocab = Vocabulary(sorted(QE_TAGS), specials=(PAD,))
        source_words = [w for s in sentences["train"] for w in s.source]
        self.source_vocab = Vocabulary.build(source_words, self.hparams.min_count)
        encoder.source_vocab = self.source_vocab
        return encoder

    def text_codec(self) -> QECodec:
        """What a trained QE tagger keeps to read raw examples (its checkpoint saves it)."""
        self.set_up()
        return QECodec(self.vocab, self.affix_vocab, self.tag_vocab, self.source_vocab,
                       self.limit)

    @property
    def source_vocab_size(self) -> int:
        """The size of ``source_vocab``: the tagger's aligned-source-word embeddings (linked by
        the CLI like the sizes of :class:`~.tagging.TaggingDataModule`)."""
        return len(self.set_up().source_vocab)
