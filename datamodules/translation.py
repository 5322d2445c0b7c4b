"""Parallel corpora for the encoder-decoder (Malaviya et al. 2018): reading line-aligned files,
length filtering of the training pairs, GUIDED fertilities, length-bucketed batches and
detokenized output for evaluation. The tokenization and the joint BPE model (trained once per
corpus and cached) are :mod:`.subwords`; eflomal's links and their cache
:mod:`.alignment`.

Files: ``{prefix}.{lang}`` or ``{prefix}.{lang}.gz`` per split, line-aligned (line i of the
source file translates line i of the target file), e.g. Multi30k's ``train.de.gz`` /
``train.en.gz``, ``val.*`` and ``test_2016_flickr.*`` in ``../shared/data/multi30k_en_de``.

Batches (the same layout as the tree-transduction batches, padding id 0)::

    src          [B, S]  source subword ids (no <bos>/<eos>), or with ``source_units=
                         "characters"`` the ids of the source's characters (Kim et al.'s
                         character-to-word setting; the target stays subwords)
    src_lengths  [B]
    tgt_in       [B, T]  <bos> + target subword ids (word ids with ``target_units="words"``)
    tgt_out      [B, T]  target subword ids + <eos>
    tgt_lengths  [B]     target length + 1 (counting <eos>)
    index        [B]     position of each pair in its split (evaluation batches are sorted)
    fertility    [B, S]  (``fertility_strategy`` guided/predicted) each source token's fertility

Fertilities (Malaviya et al. 2018, §4) come from eflomal's source-to-target links between the
training subwords, computed once and cached beside the BPE model: ``guided`` gives each source
subword type the most target subwords one of its tokens was linked to (at least 1, no slack).
``predicted`` fertilities come from a model the data does not train: the application trains a
fertility predictor on :meth:`TranslationDataModule.fertility_training_data` (the training
sources and their links), caches it at :meth:`TranslationDataModule.derived_file` and gives its
predictions back with :meth:`TranslationDataModule.set_fertilities` (``TranslationTask`` does
this in its ``prepare_data`` and ``setup`` hooks; see :mod:`lit_structattn.prepare.fertility`);
until then the loaders refuse to serve batches. With ``constant`` there is no ``fertility``
key: the model applies its constant. The links and the predictor are keyed by what they are
computed from, the BPE model and a digest of the filtered training split
(:meth:`TranslationDataModule.derived_file`); those cached under the older names
(``<bpe model>.max<L>.<kind>``) are not read: they are computed again under the new names.

Bounded cost (:mod:`.limits`): the training split is filtered by ``max_length`` /
``max_source_length`` (the paper's filtering, unchanged); a validation or test pair, or a raw
source sentence given to a trained model, whose source or target has more than ``max_tokens``
units (subwords, or characters) is refused naming its ``file:line``, or with
``length_policy="truncate"`` cut (its reference text for BLEU stays whole).

A trained model reads raw source sentences through :class:`TranslationCodec`
(:meth:`TranslationDataModule.text_codec`, kept in every checkpoint): the BPE model itself, the
languages, the source and target units, the sink and the fertilities (the GUIDED table, or the
PREDICTED fertility predictor, which the task runs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils.data import DataLoader

from lit_structattn.common.checks import check_choice
from lit_structattn.common.constants import BOS_ID, EOS_ID
from lit_structattn.common.optional import optional_import

from .alignment import Links, cached_links
from .batching import EncodedItems, seq2seq_batch
from .fertility import guided_fertility_table, lookup_fertilities
from .files import (
    MalformedLine,
    cache_root,
    data_root,
    how_to_give_data,
    open_text,
    require_records,
)
from .hub import load_hub_dataset
from .limits import BoundedCodec, LengthLimit, limit_from_state
from .splits import SplitDataModule
from .subwords import SINK_ID, Subwords, TargetWords, cached_subwords

SPLITS = ("train", "val", "test")
FERTILITIES = ("constant", "guided", "predicted")
SOURCE_UNITS = ("subwords", "characters")
TARGET_UNITS = ("subwords", "words")
#: the default ``max_tokens`` (units of a source or target outside training); the longest
#: validation or test sentence of the shipped Multi30k has 198 characters (so as many units at
#: most, plus a word-start mark)
MAX_TOKENS = 400


def read_parallel(src_file: Path, tgt_file: Path) -> list[tuple[str, str]]:
    """The line-aligned pairs of two (plain or gzip) UTF-8 files (:func:`numbered_pairs`
    without the line numbers)."""
    return [pair for _, pair in numbered_pairs(src_file, tgt_file)]


def numbered_pairs(src_file: Path, tgt_file: Path) -> list[tuple[int, tuple[str, str]]]:
    """``(line number, (source, target))`` of every non-blank line pair of two line-aligned
    (plain or gzip) UTF-8 files, numbered from 1.

    Raises:
        MalformedLine: the files differ in length (the first line one of them lacks is named)
            or a line is empty on one side only, or a byte is not valid UTF-8.
        EmptyDataFile: no sentence pair (both files empty or blank).
    """
    with open_text(src_file) as f:
        src = f.read().split("\n")
    with open_text(tgt_file) as f:
        tgt = f.read().split("\n")
    for lines in (src, tgt):
        if lines and lines[-1] == "":
            lines.pop()
    if len(src) != len(tgt):
        shorter = src_file if len(src) < len(tgt) else tgt_file
        raise MalformedLine(shorter, min(len(src), len(tgt)) + 1,
                            f"missing: {src_file.name} has {len(src)} lines, {tgt_file.name} "
                            f"has {len(tgt)}; the files must be line-aligned")
    for number, (s, t) in enumerate(zip(src, tgt, strict=True), start=1):
        if bool(s.strip()) != bool(t.strip()):
            empty = src_file if not s.strip() else tgt_file
            raise MalformedLine(empty, number, "empty line opposite a non-empty one")
    pairs = [(number, (s.strip(), t.strip()))
             for number, (s, t) in enumerate(zip(src, tgt, strict=True), start=1) if s.strip()]
    return list(require_records(pairs, src_file, "sentence pairs",
                                f"{src_file.name} and {tgt_file.name} hold no non-blank line"))


def split_digest(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], model: str) -> str:
    """The sha256 (hex) of encoded pairs (source ids without the sink, target ids, in order)
    and of ``model``, the name of the subword model that gave the ids (which holds the digest
    of its own training text)."""
    digest = hashlib.sha256(f"{model}\n".encode())
    for source, target in pairs:
        digest.update(f"{' '.join(map(str, source))}\t{' '.join(map(str, target))}\n".encode())
    return digest.hexdigest()


Item = tuple[list[int], list[int], int, list[float] | None]


class TranslationDataset(EncodedItems):
    """Encoded pairs of one split: item ``i`` is ``(src ids, tgt ids, i, fertilities or None)``;
    ``pairs`` keeps the raw text (the references for BLEU)."""

    def __init__(
        self, pairs: Sequence[tuple[str, str]], items: Sequence[tuple[list, list]],
        fertilities: Sequence[list[float]] | None = None,
    ):
        self.pairs = list(pairs)
        fertilities = fertilities or [None] * len(items)
        self.items = [(src, tgt, i, fertility)
                      for i, ((src, tgt), fertility) in enumerate(zip(items, fertilities,
                                                                      strict=True))]


def collate_pairs(items: Sequence[Item]) -> dict[str, torch.Tensor]:
    """Pad dataset items into a batch (see the module docstring)."""
    src, tgt, index, fertility = zip(*items, strict=True)
    batch = seq2seq_batch(src, tgt, BOS_ID, EOS_ID, index=index)
    if fertility[0] is not None:
        padded = torch.zeros(batch["src"].shape)
        for row, values in enumerate(fertility):
            padded[row, : len(values)] = torch.tensor(values)
        batch["fertility"] = padded
    return batch


class SourceSentence(NamedTuple):
    """A raw source sentence as :class:`TranslationCodec` reads it: its ``text``, its source
    ``ids`` (subwords or characters, then ``<sink>`` if the model has one) and its GUIDED
    ``fertility`` (one per id; None for the other strategies)."""

    text: str
    ids: list[int]
    fertility: list[float] | None


class TranslationCodec(BoundedCodec):
    """Raw source sentences for a trained translation model, and its outputs back into text
    (:class:`~lit_structattn.common.codec.TextCodec`): what the data built in ``setup``, with no
    file and no cache folder.

    Args:
        subwords: the joint BPE model and the Moses languages (with the target word vocabulary
            for ``target_units="words"``).
        source_units: ``subwords`` or ``characters``.
        sink: whether every source ends with ``<sink>``.
        fertility_strategy: ``constant``, ``guided`` or ``predicted``.
        fertility_table: GUIDED: the fertility of every source subword seen in training
            (:func:`~.fertility.guided_fertility_table`); unseen ones get 1.
        predictor: PREDICTED: the fertility predictor as plain values (``sizes`` and
            ``weights``, :func:`lit_structattn.prepare.fertility.predictor_state`). The data
            runs no model: the task rebuilds it and adds the ``fertility`` of raw batches
            (:meth:`~lit_structattn.tasks.TranslationTask.with_fertility`).
        limit: the most source units of a sentence (default :data:`MAX_TOKENS`, refused),
            kept in :meth:`state`.

    Batches: the layout of :func:`collate_pairs` with empty targets (``tgt_in`` = ``<bos>``,
    ``tgt_out`` = ``<eos>``) and ``index`` the sentence's position; ``fertility [B, S]`` with
    GUIDED fertilities. Blank lines are skipped; unseen subwords and characters are ``<unk>``.
    """

    format = "one source sentence per line, raw (untokenized) text: Der Hund läuft im Park."

    def __init__(self, subwords: Subwords, source_units: str = "subwords", sink: bool = False,
                 fertility_strategy: str = "constant",
                 fertility_table: dict[str, int] | None = None,
                 predictor: dict[str, Any] | None = None, limit: LengthLimit | None = None
                 ) -> None:
        check_choice("source_units", source_units, SOURCE_UNITS)
        check_choice("fertility_strategy", fertility_strategy, FERTILITIES)
        needed = {"guided": ("fertility_table", fertility_table),
                  "predicted": ("predictor", predictor)}.get(fertility_strategy)
        if needed is not None and needed[1] is None:
            raise ValueError(f"fertility_strategy={fertility_strategy!r} needs the {needed[0]}")
        self.subwords, self.source_units, self.sink = subwords, source_units, sink
        self.fertility_strategy = fertility_strategy
        self.fertility_table, self.predictor = fertility_table, predictor
        self.limit = limit or LengthLimit(MAX_TOKENS, unit="units")

    def state(self) -> dict[str, Any]:
        """The BPE model's bytes (``sentencepiece``, a uint8 tensor), the languages, the
        target words (None for subword targets), the units, the sink, the fertilities and the
        limit."""
        proto = self.subwords.processor.serialized_model_proto()
        words = self.subwords.target_words
        return {"sentencepiece": torch.frombuffer(bytearray(proto), dtype=torch.uint8),
                "src_lang": self.subwords.src_lang, "tgt_lang": self.subwords.tgt_lang,
                "target_words": None if words is None else words.state()["tokens"],
                "source_units": self.source_units, "sink": self.sink,
                "fertility_strategy": self.fertility_strategy,
                "fertility_table": self.fertility_table, "predictor": self.predictor,
                **self.limit.state()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TranslationCodec:
        subwords = Subwords(state["sentencepiece"].cpu().numpy().tobytes(), state["src_lang"],
                            state["tgt_lang"])
        if state["target_words"] is not None:
            subwords.target_words = TargetWords(state["target_words"], state["tgt_lang"])
        return cls(subwords, state["source_units"], state["sink"], state["fertility_strategy"],
                   state["fertility_table"], state["predictor"],
                   limit_from_state(state, MAX_TOKENS, "units"))

    def read(self, line: str) -> SourceSentence:
        """A non-blank line as a :class:`SourceSentence` within ``limit``; ``ValueError`` for a
        line that tokenizes to nothing (control characters only) or to too many units."""
        text = line.strip()
        ids = self.subwords.encode_source(text, self.source_units)
        if not ids:
            raise ValueError("nothing to translate: the line has no word once tokenized "
                             "(control characters only?)")
        ids = self.limit.cut((ids,), "source sentence")[0]
        fertility = None
        if self.fertility_strategy == "guided":
            fertility = lookup_fertilities([self.subwords.pieces(ids)],
                                           self.fertility_table)[0] + [1.0] * self.sink
        return SourceSentence(text, ids + [SINK_ID] * self.sink, fertility)

    def batch(self, examples: Sequence[SourceSentence]) -> dict[str, torch.Tensor]:
        """The :func:`collate_pairs` batch of ``examples`` (see the class docstring)."""
        return collate_pairs([(sentence.ids, [], i, sentence.fertility)
                              for i, sentence in enumerate(examples)])


class TranslationDataModule(SplitDataModule):
    """A parallel corpus as subword batches (see the module docstring).

    Args:
        data_dir: the corpus folder; default ``<data_root>/multi30k_en_de`` (unless
            ``hub_name`` is given).
        hub_name, hub_config: a Hugging Face translation dataset (e.g. ``"IWSLT/iwslt2017"``,
            ``"iwslt2017-de-en"``, read from its parquet export: the old name ``iwslt2017`` is
            a loading script, refused by ``datasets`` >= 4; see :mod:`.hub`); rows
            with a ``translation`` dict or one column per language; splits train / validation
            / test. Used only when ``data_dir`` is None.
        src_lang, tgt_lang: the translation direction (file suffixes and Moses languages).
        prefixes: file prefixes of the train, val and test splits.
        bpe_size: the joint BPE vocabulary size (sentencepiece may stop short on tiny corpora).
        max_length: training pairs with more units on either side are dropped (training
            only); None keeps all. ``max_source_length`` (default ``max_length``) overrides
            it for the source side, e.g. for characters.
        source_units: ``subwords`` or ``characters`` (the source as single-character pieces
            of the same vocabulary, ``▁`` marking word starts; constant fertility only).
        target_units: ``subwords`` or ``words`` (Moses tokens, the ``word_vocab_size`` most
            frequent in the training targets, others ``<unk>``; constant fertility only).
        word_vocab_size: the size of the target word vocabulary (with its 4 specials).
        sink: append the ``<SINK>`` token to every source (constrained attention needs it).
        fertility_strategy: ``constant`` (no per-token fertilities), ``guided`` or
            ``predicted`` (given by the application, see the module docstring).
        aligner_iterations: eflomal's iterations (None: its default).
        cache_dir: where the BPE model is kept (default :func:`~.files.cache_root`,
            ``$STRUCTATTN_CACHE`` or ``~/.cache/structattn``); it is trained
            once per corpus, size and direction, keyed by a hash of the training files.
        max_tokens, length_policy: the most units of a source or target of the validation and
            test splits and of a raw source sentence, and ``"error"`` (refused, naming
            ``file:line``) or ``"truncate"`` (cut, with a warning counting them); see the
            module docstring. The training split is bounded by ``max_length`` only.
        **loader: the loader options (``batch_size``, ``eval_batch_size``, ``seed``, ...) of
            :class:`~.splits.SplitDataModule`.

    After :meth:`setup`: ``subwords`` (:class:`Subwords`), ``datasets``, ``dropped_train``,
    ``training_digest`` (:func:`split_digest` of the filtered training split, the key of the
    files derived from it: :meth:`derived_file`) and,
    for guided / predicted fertilities, ``training_links`` (eflomal's links of every training
    pair, dataset order); for guided ones ``fertility_table`` (source subword -> fertility),
    for predicted ones, once given, ``fertility_predictor`` (the predictor's plain values).
    """

    def __init__(
        self,
        data_dir: str | None = None,
        hub_name: str | None = None,
        hub_config: str | None = None,
        src_lang: str = "de",
        tgt_lang: str = "en",
        prefixes: tuple[str, str, str] = ("train", "val", "test_2016_flickr"),
        bpe_size: int = 8000,
        max_length: int | None = 50,
        max_source_length: int | None = None,
        source_units: str = "subwords",
        target_units: str = "subwords",
        word_vocab_size: int = 10000,
        sink: bool = False,
        fertility_strategy: str = "constant",
        aligner_iterations: int | None = None,
        cache_dir: str | None = None,
        max_tokens: int = MAX_TOKENS,
        length_policy: str = "error",
        **loader,
    ) -> None:
        super().__init__(**loader)
        self.limit = LengthLimit(max_tokens, length_policy, "units")
        if not isinstance(bpe_size, int) or bpe_size < 8:
            raise ValueError(f"bpe_size must be an int >= 8, got {bpe_size!r}")
        for name, value in (("max_length", max_length), ("max_source_length", max_source_length)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be None or an int >= 1, got {value!r}")
        check_choice("source_units", source_units, SOURCE_UNITS)
        check_choice("target_units", target_units, TARGET_UNITS)
        units = (source_units, target_units)
        if units != ("subwords", "subwords") and fertility_strategy != "constant":
            raise ValueError("fertility_strategy guided/predicted needs subword sources and "
                             "targets (the fertilities come from subword alignments)")
        check_choice("fertility_strategy", fertility_strategy, FERTILITIES)
        needed = ("sentencepiece", "sacremoses") + (("eflomal",) if fertility_strategy
                                                     != "constant" else ())
        for module in needed:  # the translation extra, before any data is read
            optional_import(module, "translation")
        if len(prefixes) != 3:
            raise ValueError(f"prefixes must name the train, val and test files, got {prefixes}")
        self.subwords: Subwords | None = None
        self.datasets: dict[str, TranslationDataset] = {}
        self.dropped_train = 0
        self.training_links: list[Links] | None = None
        self.training_digest: str | None = None
        self.fertility_table: dict[str, int] | None = None  # guided
        self.fertility_predictor: dict | None = None  # predicted, by set_fertilities
        self._fertilities_given = False  # predicted ones, by set_fertilities

    def data_folder(self) -> Path:
        if self.hparams.data_dir is not None:
            return Path(self.hparams.data_dir).expanduser()
        return data_root() / "multi30k_en_de"

    def split_files(self, split: str) -> tuple[Path, Path]:
        """The source and target files of ``split`` (``.gz`` or plain)."""
        h, folder = self.hparams, self.data_folder()
        prefix = h.prefixes[SPLITS.index(split)]
        found = []
        for lang in (h.src_lang, h.tgt_lang):
            candidates = [folder / f"{prefix}.{lang}.gz", folder / f"{prefix}.{lang}"]
            existing = [c for c in candidates if c.is_file()]
            if not existing:
                expected = ", ".join(f"{p}.{{{h.src_lang},{h.tgt_lang}}}[.gz]"
                                     for p in h.prefixes)
                raise FileNotFoundError(
                    f"{folder} lacks {prefix}.{lang}[.gz]; expected {expected} (line-aligned "
                    "plain text, e.g. Multi30k from github.com/multi30k/dataset, data/task1/raw). "
                    + how_to_give_data()
                )
            found.append(existing[0])
        return found[0], found[1]

    def _read(self, split: str) -> tuple[str | Path, list[tuple[int, tuple[str, str]]]]:
        """Where ``split`` comes from (its source file, or the hub split's name) and its
        ``(number, (source, target))`` text pairs: the line number in the files, the pair's
        position in the hub split."""
        h = self.hparams
        if h.data_dir is not None or h.hub_name is None:
            files = self.split_files(split)
            return files[0], numbered_pairs(*files)
        name = {"train": "train", "val": "validation", "test": "test"}[split]
        rows = load_hub_dataset(h.hub_name, h.hub_config, name,
                                "data_dir=<folder with line-aligned files>")
        pairs = []
        for row in rows:
            languages = row.get("translation", row)
            pairs.append((languages[h.src_lang].strip(), languages[h.tgt_lang].strip()))
        return f"{h.hub_name} {split}", list(enumerate([(s, t) for s, t in pairs if s and t],
                                                        start=1))

    def _cache_dir(self) -> Path:
        if self.hparams.cache_dir is not None:
            return Path(self.hparams.cache_dir).expanduser()
        return cache_root()

    def prepare_data(self) -> None:
        """Lightning calls this in one process per node before any process's :meth:`setup`:
        it builds the splits, and with them the cached BPE model and links, so the other DDP
        ranks load those files instead of racing to write them."""
        self.setup()

    def setup(self, stage: str | None = None) -> None:
        """Read the splits, train or load the BPE model, encode, attach the constant or guided
        fertilities (once; later calls no-op). Predicted ones come later
        (:meth:`set_fertilities`)."""
        if self.datasets:
            return
        h = self.hparams
        sources = {split: self._read(split) for split in SPLITS}
        pairs = {split: [pair for _, pair in numbered] for split, (_, numbered) in sources.items()}
        self.subwords = cached_subwords(self._cache_dir(), pairs["train"], h.src_lang,
                                        h.tgt_lang, h.bpe_size)
        if h.target_units == "words":
            self.subwords.target_words = TargetWords.from_tokenized(
                (self.subwords.tokens(t, h.tgt_lang) for _, t in pairs["train"]),
                h.word_vocab_size, h.tgt_lang)
        max_source = h.max_source_length or h.max_length
        encoded = {}
        for split in SPLITS:
            items = [(self.subwords.encode_source(s, h.source_units),
                      self.subwords.encode_target(t)) for s, t in pairs[split]]
            kept = list(zip(pairs[split], items, strict=True))
            if split == "train":
                kept = [(p, (s, t)) for p, (s, t) in kept
                        if (max_source is None or len(s) + h.sink <= max_source)
                        and (h.max_length is None or len(t) <= h.max_length)]
                self.dropped_train = len(items) - len(kept)
            else:
                where, numbered = sources[split]
                kept = self._bounded(kept, where, [number for number, _ in numbered])
            encoded[split] = kept
        self.training_digest = split_digest([ids for _, ids in encoded["train"]],
                                            self.subwords.model_file.stem)
        fertilities = self._fertilities({k: [s for _, (s, _) in v] for k, v in encoded.items()},
                                        [t for _, (_, t) in encoded["train"]])
        sink = [SINK_ID] if h.sink else []
        for split, kept in encoded.items():
            self.datasets[split] = TranslationDataset(
                [p for p, _ in kept], [(s + sink, t) for _, (s, t) in kept],
                None if fertilities is None else [f + [1.0] * h.sink
                                                  for f in fertilities[split]],
            )

    def _bounded(self, kept: list, where: str | Path, numbers: list[int]) -> list:
        """The encoded ``(text pair, (source ids, target ids))`` of an evaluation split within
        ``limit``, errors naming ``where`` (its source file, or the hub split) and the pair's
        number there (``numbers``)."""
        bounded = [(pair, tuple(self.limit.cut(ids, "source or target", where, number)))
                   for number, (pair, ids) in zip(numbers, kept, strict=True)]
        self.limit.warn(where)
        return bounded

    def derived_file(self, kind: str) -> Path:
        """The cache file ``kind`` (a suffix such as ``it5.links`` naming the options that
        change it) beside the BPE model, for what is derived from the filtered training split:
        eflomal's links, and the fertility predictor the application trains on them. Named
        ``<bpe model>.train-<12 hex digits of training_digest>.<kind>``, so every change of
        that split (the data, ``max_length``, ``max_source_length``, ``sink``) is another
        file."""
        model = self.subwords.model_file
        return model.parent / f"{model.stem}.train-{self.training_digest[:12]}.{kind}"

    def _fertilities(
        self, sources: dict[str, list[list[int]]], train_targets: list[list[int]]
    ) -> dict[str, list[list[float]]] | None:
        """Per split, the GUIDED fertility of every source subword (None for ``constant``, and
        for ``predicted`` until :meth:`set_fertilities`); guided and predicted keep the
        training links in ``training_links``."""
        h = self.hparams
        if h.fertility_strategy == "constant":
            return None
        to_pieces = self.subwords.pieces
        train = zip(sources["train"], train_targets, strict=True)
        self.training_links = cached_links(
            self.derived_file(f"it{h.aligner_iterations}.links"),
            [(to_pieces(s), to_pieces(t)) for s, t in train], h.aligner_iterations)
        if h.fertility_strategy == "predicted":
            return None
        pieces = {split: [self.subwords.pieces(s) for s in rows]
                  for split, rows in sources.items()}
        self.fertility_table = guided_fertility_table(pieces["train"], self.training_links)
        return {split: lookup_fertilities(rows, self.fertility_table)
                for split, rows in pieces.items()}

    def source_ids(self, split: str) -> list[list[int]]:
        """The source subword ids of every pair of ``split`` (dataset order), without the
        ``<sink>`` token."""
        sink = int(self.hparams.sink)
        return [src[: len(src) - sink] for src, _, _, _ in self.datasets[split].items]

    def fertility_training_data(self) -> tuple[list[list[int]], list[Links]]:
        """What a PREDICTED fertility model learns from: the source subword ids of the
        (filtered) training pairs without the sink (:meth:`source_ids`) and eflomal's
        source-to-target links of each pair (``(source index, target index)`` sets).

        Raises:
            RuntimeError: the fertility strategy is not ``predicted`` or :meth:`setup` has not
                run (there are no links).
        """
        if self.hparams.fertility_strategy != "predicted" or self.training_links is None:
            raise RuntimeError("fertility_training_data needs fertility_strategy='predicted' "
                               "and setup() first")
        return self.source_ids("train"), self.training_links

    @property
    def awaits_fertilities(self) -> bool:
        """Whether the splits are built with ``predicted`` fertilities still to be given
        (:meth:`set_fertilities`)."""
        return (self.hparams.fertility_strategy == "predicted" and bool(self.datasets)
                and not self._fertilities_given)

    def set_fertilities(self, fertilities: dict[str, list[list[float]]],
                        predictor: dict | None = None) -> None:
        """Give the ``predicted`` fertilities: per split, one value per source subword of every
        pair (dataset order, as :meth:`source_ids`); the sink gets the placeholder 1.0.
        ``predictor``: the model that predicted them as plain values
        (:func:`lit_structattn.prepare.fertility.predictor_state`), which :meth:`text_codec`
        needs.

        Raises:
            RuntimeError: the strategy is not ``predicted``, or :meth:`setup` has not run.
            ValueError: a split is missing, or a pair's count of values is not its source's.
        """
        if self.hparams.fertility_strategy != "predicted" or not self.datasets:
            raise RuntimeError("set_fertilities needs fertility_strategy='predicted' and "
                               "setup() first")
        for split in self.datasets:
            values, sources = fertilities.get(split), self.source_ids(split)
            if values is None or len(values) != len(sources) or any(
                    len(f) != len(s) for f, s in zip(values, sources, strict=True)):
                raise ValueError(f"set_fertilities: split {split!r} needs one fertility per "
                                 "source subword of every pair (dataset order, no sink)")
        sink = [1.0] * self.hparams.sink
        for split, dataset in self.datasets.items():
            dataset.items = [(src, tgt, i, list(f) + sink) for (src, tgt, i, _), f
                             in zip(dataset.items, fertilities[split], strict=True)]
        self.fertility_predictor = predictor
        self._fertilities_given = True

    def _loader(self, split: str, shuffle: bool = False) -> DataLoader:
        """The split's batches (see :class:`~.splits.SplitDataModule`); refused
        (``RuntimeError``) while predicted fertilities are awaited."""
        if self.awaits_fertilities:
            raise RuntimeError(
                "fertility_strategy='predicted': the fertilities are not given yet; "
                "TranslationTask gives them in its setup (or call "
                "lit_structattn.prepare.fertility.give_predicted_fertilities(data, epochs))")
        return super()._loader(split, shuffle)

    def references(self, split: str) -> list[str]:
        """The raw target sentences of ``split`` (dataset order)."""
        return [tgt for _, tgt in self.datasets[split].pairs]

    # The sizes the model takes from the data (the CLI links each into the model's argument of
    # the same name when it instantiates the classes, before any setup): as configured; the
    # task checks them against the trained subword model in its setup.

    @property
    def src_vocab(self) -> int:
        """The joint subword vocabulary's size, ``bpe_size``."""
        return self.hparams.bpe_size

    @property
    def tgt_vocab(self) -> int:
        """``word_vocab_size`` for word targets, else the joint subwords' ``bpe_size``."""
        h = self.hparams
        return h.word_vocab_size if h.target_units == "words" else h.bpe_size

    @property
    def joint_vocab(self) -> bool:
        """Whether source and target ids index one vocabulary (subword targets)."""
        return self.hparams.target_units == "subwords"

    @property
    def sink(self) -> bool:
        """Whether every source ends with the ``<SINK>`` token."""
        return self.hparams.sink

    @property
    def vocab(self) -> Subwords | None:
        """The subword model after :meth:`setup` (what figure callbacks receive as vocabulary)."""
        return self.subwords

    def detokenize(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Target-language text of a model output or a ``tgt_out`` row."""
        return self.subwords.decode(ids, self.hparams.tgt_lang)

    def text_codec(self) -> TranslationCodec:
        """What a trained model keeps to read raw source sentences (its checkpoint saves it),
        from what :meth:`setup` built (set up now if it has not run).

        Raises:
            RuntimeError: PREDICTED fertilities not given yet, or given without their predictor
                (:meth:`set_fertilities`).
        """
        h = self.set_up().hparams
        if h.fertility_strategy == "predicted" and self.fertility_predictor is None:
            raise RuntimeError("fertility_strategy='predicted': the text codec needs the "
                               "fertility predictor, given with set_fertilities(..., predictor)")
        return TranslationCodec(self.subwords, h.source_units, h.sink, h.fertility_strategy,
                                self.fertility_table, self.fertility_predictor, self.limit)

    collate = staticmethod(collate_pairs)  # batches of the length-bucketed loaders
