"""Morphological inflection (Durrett & DeNero 2013; Shankar et al. 2018, §4): generate the
inflected form of a German noun or verb from its lemma and feature bundle, character by
character, with splits by lemma as shipped in ``../shared/data/wiktionary_morphology_de``.

Files: ``inflections_de_{noun,verb}.csv`` (``inflected_form,lemma,feature_bundle`` per line,
bundles like ``case=genitive:number=singular``) and ``base_forms_de_{noun,verb}_{train,dev,
test}.txt`` (one lemma per line). Source = the bundle's ``attr=value`` symbols followed by the
lemma's characters; target = the inflected form's characters.

Bounded cost (:mod:`.limits`): a source (symbols) or inflected form (characters) of
more than ``max_tokens`` is refused naming its ``file:line``, and a raw input of more source
symbols naming ``<source>:<line>`` (never cut: a cut lemma is another word).

Batches (the encoder-decoder layout, padding id 0)::

    src [B, S], src_lengths [B], tgt_in [B, T], tgt_out [B, T], tgt_lengths [B], index [B]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from lit_structattn.common.checks import check_choice
from lit_structattn.common.constants import BOS_ID, EOS_ID, SEQUENCE_SPECIALS

from .batching import EncodedItems, seq2seq_batch
from .files import MalformedLine, data_root, how_to_give_data, open_text, require_records
from .limits import LengthLimit
from .splits import SplitDataModule
from .vocabulary import SharedVocabularySizes, SymbolSourceCodec, Vocabulary

POS = ("noun", "verb")
SPLIT_FILES = {"train": "train", "val": "dev", "test": "test"}
#: what a missing file of this dataset is, and where the data comes from
MISSING_FILES = ("expected the Wiktionary morphology 1.1 files (inflections_de_*.csv, "
                 "base_forms_de_*_*.txt) of Durrett & DeNero (NAACL 2013), released as "
                 "wiktionary-morphology-1.1.tgz.")
#: the default ``max_tokens``: symbols of a source, characters of a form (the shipped tables: at
#: most 36 source symbols and 35 characters)
MAX_TOKENS = 100


def read_inflections(path: Path, limit: LengthLimit | None = None
                     ) -> list[tuple[str, str, str]]:
    """``(inflected form, lemma, feature bundle)`` per line of an inflection CSV.

    Raises:
        MalformedLine: a line without exactly three non-empty comma-separated fields, or whose
            source symbols (:func:`source_symbols`) or form are longer than ``limit`` (None:
            unbounded; an ``"error"`` limit: a row is never cut).
        EmptyDataFile: a file without lines.
    """
    rows = []
    with open_text(path) as lines:
        for number, line in enumerate(lines, start=1):
            fields = line.rstrip("\n").split(",")
            if len(fields) != 3 or not all(fields):
                raise MalformedLine(path, number, "expected inflected_form,lemma,feature_bundle")
            if limit is not None:
                limit.cut((source_symbols(fields[1], fields[2]), fields[0]), "inflection", path,
                          number)
            rows.append((fields[0], fields[1], fields[2]))
    return list(require_records(rows, path, "inflections"))


def source_symbols(lemma: str, bundle: str) -> list[str]:
    """The model's input: the bundle's ``attr=value`` symbols, then the lemma's characters."""
    return [*bundle.split(":"), *lemma]


class InflectionCodec(SymbolSourceCodec):
    """Raw lemmas and feature bundles for a trained model
    (:class:`~lit_structattn.common.codec.TextCodec`)."""

    format = "one lemma,feature_bundle per line: Haus,case=genitive:number=singular"
    max_tokens = MAX_TOKENS

    def symbols(self, line: str) -> list[str]:
        """The bundle's symbols, then the lemma's characters (:func:`source_symbols`);
        ``ValueError`` unless the line is ``lemma,feature_bundle``, both non-empty."""
        fields = line.split(",")
        if len(fields) != 2 or not all(f.strip() for f in fields):
            raise ValueError("expected lemma,feature_bundle")
        return source_symbols(fields[0].strip(), fields[1].strip())


class InflectionDataset(EncodedItems):
    """Encoded examples of one split: item ``i`` is ``(src ids, tgt ids, i)``; ``examples``
    keeps ``(form, lemma, bundle)``."""

    def __init__(self, examples: Sequence[tuple[str, str, str]], vocab: Vocabulary) -> None:
        self.examples = list(examples)
        self.items = [(vocab.encode(source_symbols(lemma, bundle)), vocab.encode(form), i)
                      for i, (form, lemma, bundle) in enumerate(self.examples)]


def collate_inflections(items: Sequence[tuple[list[int], list[int], int]]
                        ) -> dict[str, torch.Tensor]:
    """Pad dataset items into a batch (see the module docstring)."""
    src, tgt, index = zip(*items, strict=True)
    return seq2seq_batch(src, tgt, BOS_ID, EOS_ID, index=index)


class InflectionDataModule(SharedVocabularySizes, SplitDataModule):
    """German noun or verb inflection as character batches.

    Args:
        data_dir: the folder of the Wiktionary files; default
            ``<data_root>/wiktionary_morphology_de``.
        pos: ``noun`` (de-N) or ``verb`` (de-V).
        max_tokens: the most source symbols (and form characters) of an example of any split
            or raw input; a longer one is refused (see the module docstring).
        **loader: the loader options (``batch_size``, ``seed``, ...) of
            :class:`~.splits.SplitDataModule`.

    After :meth:`setup`: ``vocab`` (from the training split) and ``datasets``.
    """

    def __init__(
        self, data_dir: str | None = None, pos: str = "noun", max_tokens: int = MAX_TOKENS,
        **loader,
    ) -> None:
        super().__init__(**loader)
        check_choice("pos", pos, POS)
        self.limit = LengthLimit(max_tokens, unit="symbols", truncatable=False)
        self.vocab: Vocabulary | None = None
        self.datasets: dict[str, InflectionDataset] = {}

    def folder(self) -> Path:
        data_dir = self.hparams.data_dir
        return Path(data_dir).expanduser() if data_dir else data_root() / "wiktionary_morphology_de"

    def _lemma_file(self, split: str) -> Path:
        return self.folder() / f"base_forms_de_{self.hparams.pos}_{SPLIT_FILES[split]}.txt"

    def _lemmas(self, split: str) -> set[str]:
        path = self._lemma_file(split)
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: {MISSING_FILES} {how_to_give_data()}")
        with open_text(path) as lines:
            lemmas = {line.strip() for line in lines if line.strip()}
        require_records(list(lemmas), path, "lemmas")
        return lemmas

    def setup(self, stage: str | None = None) -> None:
        """Read the inflection table and split it by lemma (once; later calls no-op)."""
        if self.datasets:
            return
        table = self.folder() / f"inflections_de_{self.hparams.pos}.csv"
        if not table.is_file():
            raise FileNotFoundError(f"{table} is missing: {MISSING_FILES} {how_to_give_data()}")
        rows = read_inflections(table, self.limit)
        splits = {split: [row for row in rows if row[1] in lemmas]
                  for split, lemmas in ((s, self._lemmas(s)) for s in SPLIT_FILES)}
        for split, examples in splits.items():
            require_records(examples, self._lemma_file(split), f"{split} inflections",
                            f"none of its lemmas has a row in {table.name}")
        symbols = (symbol for form, lemma, bundle in splits["train"]
                   for symbol in (*source_symbols(lemma, bundle), *form))
        self.vocab = Vocabulary(symbols, specials=SEQUENCE_SPECIALS)
        self.datasets = {split: InflectionDataset(examples, self.vocab)
                         for split, examples in splits.items()}

    collate = staticmethod(collate_inflections)  # batches of the length-bucketed loaders

    def text_codec(self) -> InflectionCodec:
        """What a trained model keeps to read raw lemmas (its checkpoint saves it)."""
        return InflectionCodec(self.set_up().vocab, self.limit)
