"""Natural language inference data: SNLI 1.0 (JSON Lines) and SICK (tab-separated), pretrained
word vectors in the GloVe text format, and :class:`NLIDataModule`.

SNLI (https://nlp.stanford.edu/projects/snli/): one JSON object per line with ``sentence1``
(premise), ``sentence2`` (hypothesis), ``gold_label`` and the binary parses
``sentence{1,2}_binary_parse``, whose tokens (brackets removed) are the words; pairs whose gold
label is ``-`` (no annotator consensus) are dropped. SICK (Marelli et al. 2014): a header line,
then 12 tab-separated columns of which ``sentence_A``, ``sentence_B``, ``entailment_label`` and
``SemEval_set`` (TRAIN / TRIAL / TEST = train / val / test) are used; its sentences are split
into words at spaces and punctuation. Words are lowercased unless ``lowercase=False``.

Protocols. ``full``: SNLI's train / dev / test files (or a hub dataset), as the papers. ``cpu``:
for a machine without SNLI train, train on SNLI dev minus a random ``val_fraction`` of it (held
out for validation) and test on SNLI test. SICK uses its own three splits under both.

A trained model reads raw pairs, ``premise<TAB>hypothesis`` per line, with :class:`PairCodec`.

Bounded cost (:mod:`.limits`): a premise or hypothesis holds at most ``max_tokens``
words in every split and raw input (:func:`bounded_pair`), refused naming its ``file:line`` or,
with ``length_policy="truncate"``, cut.

Batches (padding id 0)::

    premise             [B, N]  word ids      premise_lengths     [B]
    hypothesis          [B, M]  word ids      hypothesis_lengths  [B]
    labels              [B]     index into LABELS (entailment, neutral, contradiction)
    index               [B]     position of the pair in its split
"""

from __future__ import annotations

import json
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lit_structattn.common.checks import check_choice

from .batching import EncodedItems, pad_rows
from .files import MalformedLine, data_root, open_text, require_files, require_records
from .hub import load_hub_dataset
from .limits import BoundedCodec, LengthLimit, limit_from_state
from .splits import SplitDataModule, hold_out
from .vectors import read_word_vectors
from .vocabulary import Vocabulary

LABELS = ("entailment", "neutral", "contradiction")
DATASETS = ("snli", "sick")
PROTOCOLS = ("cpu", "full")
SICK_SPLITS = {"TRAIN": "train", "TRIAL": "val", "TEST": "test"}
SICK_COLUMNS = 12
OOV_BUCKETS = 100
#: the default ``max_tokens``: words per premise or hypothesis (the shipped SNLI dev and test
#: files: at most 59; SICK: 36)
MAX_TOKENS = 200
_WORD = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class NLIPair:
    """A premise, a hypothesis (words) and the gold label (one of :data:`LABELS`; None for a
    raw pair given to a trained model, :class:`PairCodec`)."""

    premise: tuple[str, ...]
    hypothesis: tuple[str, ...]
    label: str | None = None


def bounded_pair(pair: NLIPair, limit: LengthLimit | None, source: str | Path | None = None,
                 line: int | None = None) -> NLIPair:
    """``pair`` with its premise and hypothesis within ``limit``
    (:meth:`~.limits.LengthLimit.cut`; None: unbounded); errors name
    ``source:line``."""
    if limit is None:
        return pair
    premise, hypothesis = limit.cut((pair.premise, pair.hypothesis), "premise or hypothesis",
                                    source, line)
    return NLIPair(premise, hypothesis, pair.label)


def tokenize(text: str, lowercase: bool = True) -> tuple[str, ...]:
    """Words and punctuation marks of ``text``."""
    return tuple(_WORD.findall(text.lower() if lowercase else text))


def _parse_tokens(parse: str, lowercase: bool) -> tuple[str, ...]:
    words = tuple(t for t in parse.split() if t not in ("(", ")"))
    return tuple(w.lower() for w in words) if lowercase else words


def read_snli(path: str | Path, lowercase: bool = True,
              limit: LengthLimit | None = None) -> list[NLIPair]:
    """The labeled pairs of an SNLI JSONL file (plain or ``.gz``); gold label ``-`` is dropped;
    each pair within ``limit`` (:func:`bounded_pair`).

    Raises :class:`~.files.MalformedLine` (``file:line``) for a line that is not a
    JSON object with ``sentence1``, ``sentence2`` and ``gold_label``, for an unknown label, for
    an empty sentence and for one longer than ``limit``;
    :class:`~.files.EmptyDataFile` for a file without labeled pairs.
    """
    pairs = []
    with open_text(path) as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                premise, hypothesis, label = (record["sentence1"], record["sentence2"],
                                              record["gold_label"])
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise MalformedLine(path, number, "expected a JSON object with sentence1, "
                                    f"sentence2 and gold_label ({type(error).__name__}: "
                                    f"{error})") from None
            if label == "-":
                continue
            if label not in LABELS:
                raise MalformedLine(path, number, f"unknown gold_label {label!r}; valid: "
                                    f"{', '.join(LABELS)} or -")
            words = [_parse_tokens(record[key], lowercase) if key in record
                     else tokenize(text, lowercase)
                     for key, text in (("sentence1_binary_parse", premise),
                                       ("sentence2_binary_parse", hypothesis))]
            if not all(words):
                raise MalformedLine(path, number, "empty premise or hypothesis")
            pairs.append(bounded_pair(NLIPair(words[0], words[1], label), limit, path, number))
    if limit is not None:
        limit.warn(path)
    return list(require_records(pairs, path, "labeled pairs"))


def read_sick(path: str | Path, lowercase: bool = True,
              limit: LengthLimit | None = None) -> dict[str, list[NLIPair]]:
    """The pairs of ``SICK.txt`` by split (``train``/``val``/``test`` from the SemEval_set
    column TRAIN/TRIAL/TEST), each within ``limit`` (:func:`bounded_pair`).

    Raises :class:`~.files.MalformedLine` for a line without 12 tab-separated columns,
    an unknown label or set, an empty sentence or one longer than ``limit``;
    :class:`~.files.EmptyDataFile` if a split has no pair.
    """
    splits: dict[str, list[NLIPair]] = {split: [] for split in SICK_SPLITS.values()}
    with open_text(path) as lines:
        for number, line in enumerate(lines, start=1):
            line = line.rstrip("\r\n")
            if number == 1 or not line.strip():
                continue  # the header
            columns = line.split("\t")
            if len(columns) != SICK_COLUMNS:
                raise MalformedLine(path, number, f"expected {SICK_COLUMNS} tab-separated "
                                    f"columns, found {len(columns)}: {line[:80]!r}")
            label, semeval_set = columns[3].lower(), columns[11]
            if label not in LABELS:
                raise MalformedLine(path, number, f"unknown entailment_label {columns[3]!r}")
            if semeval_set not in SICK_SPLITS:
                raise MalformedLine(path, number, f"unknown SemEval_set {semeval_set!r}; valid: "
                                    f"{', '.join(SICK_SPLITS)}")
            premise, hypothesis = tokenize(columns[1], lowercase), tokenize(columns[2], lowercase)
            if not premise or not hypothesis:
                raise MalformedLine(path, number, "empty sentence_A or sentence_B")
            pair = bounded_pair(NLIPair(premise, hypothesis, label), limit, path, number)
            splits[SICK_SPLITS[semeval_set]].append(pair)
    if limit is not None:
        limit.warn(path)
    for semeval_set, split in SICK_SPLITS.items():
        require_records(splits[split], path, f"{split} pairs",
                        f"no line with SemEval_set {semeval_set}")
    return splits


def read_vectors(path: str | Path, words: Sequence[str], dim: int,
                 lowercase: bool = True) -> tuple[torch.Tensor, int]:
    """Fixed input vectors for ``words`` (a vocabulary, index 0 = padding) from a GloVe text
    file (read by :func:`~.vectors.read_word_vectors`).

    Found words get their vector scaled to unit norm; the others one of :data:`OOV_BUCKETS`
    vectors drawn from ``N(0, 1)`` (seed 0), chosen by a hash of the word (Kim et al. 2017, A.5);
    the padding row is 0. With ``lowercase`` a file token matches its lowercased form (the first
    occurrence wins). Returns ``(matrix [len(words), dim], number of words found)``.

    Raises :class:`~.files.MalformedLine` (file and line) for a malformed line.
    """
    wanted = {word: i for i, word in enumerate(words) if i > 0}
    buckets = torch.randn(OOV_BUCKETS, dim, generator=torch.Generator().manual_seed(0))
    matrix = torch.stack([buckets[zlib.crc32(w.encode()) % OOV_BUCKETS] for w in words])
    matrix[0] = 0
    found: set[int] = set()
    key = str.lower if lowercase else str
    for token, values in read_word_vectors(
            path, dim, lambda t: key(t) in wanted and wanted[key(t)] not in found):
        vector = torch.tensor(values)
        index = wanted[key(token)]
        matrix[index] = vector / vector.norm().clamp_min(1e-12)
        found.add(index)
    return matrix, len(found)


class NLIDataset(EncodedItems):
    """Encoded pairs of one split: ``items[i] = (premise ids, hypothesis ids, label, i)``
    (label -1 for a pair without one); ``pairs`` keeps the words."""

    def __init__(self, pairs: Sequence[NLIPair], vocab: Vocabulary) -> None:
        self.pairs = list(pairs)
        self.items = [(vocab.encode(p.premise), vocab.encode(p.hypothesis),
                       -1 if p.label is None else LABELS.index(p.label), i)
                      for i, p in enumerate(self.pairs)]

    @property
    def lengths(self) -> list[tuple[int, int]]:
        """``(premise, hypothesis)`` length of every pair (batches are bucketed by both)."""
        return [(len(item[0]), len(item[1])) for item in self.items]


def collate_pairs(items: Sequence[tuple]) -> dict[str, torch.Tensor]:
    """Pad encoded pairs into a batch (see the module docstring)."""
    batch = {}
    for column, name in ((0, "premise"), (1, "hypothesis")):
        rows = [item[column] for item in items]
        batch[name] = torch.tensor(pad_rows(rows, max(len(row) for row in rows)))
        batch[f"{name}_lengths"] = torch.tensor([len(row) for row in rows])
    batch["labels"] = torch.tensor([item[2] for item in items])
    batch["index"] = torch.tensor([item[3] for item in items])
    return batch


class PairCodec(BoundedCodec):
    """Raw premise/hypothesis pairs for a trained model
    (:class:`~lit_structattn.common.codec.TextCodec`), split into words as SICK's sentences
    (:func:`tokenize`); words outside the vocabulary read as ``<unk>``. Examples are
    :class:`NLIPair` without label, batches those of :func:`collate_pairs` (labels -1).

    Args:
        vocab: the model's vocabulary (with ``<unk>``).
        labels: the label names, in the order of the model's scores.
        lowercase: lowercase the words (as the training data was).
        limit: the most words of a premise or hypothesis (default :data:`MAX_TOKENS`,
            refused), kept in :meth:`state`.
    """

    format = "one premise<TAB>hypothesis pair per line: A man sleeps.<TAB>A person rests."

    def __init__(self, vocab: Vocabulary, labels: Sequence[str], lowercase: bool = True,
                 limit: LengthLimit | None = None) -> None:
        self.vocab, self.labels, self.lowercase = vocab, tuple(labels), lowercase
        self.limit = limit or LengthLimit(MAX_TOKENS)

    def state(self) -> dict:
        return {"vocab": self.vocab.state(), "labels": list(self.labels),
                "lowercase": self.lowercase, **self.limit.state()}

    @classmethod
    def from_state(cls, state: dict) -> PairCodec:
        """The codec of :meth:`state`; a state saved without the limit gets the default."""
        return cls(Vocabulary.from_state(state["vocab"]), state["labels"], state["lowercase"],
                   limit_from_state(state, MAX_TOKENS, "words"))

    def read(self, line: str) -> NLIPair:
        """The unlabeled pair of a ``premise<TAB>hypothesis`` line within ``limit``;
        ``ValueError`` unless it has exactly these two fields, each with words and not too
        long."""
        words = [tokenize(field, self.lowercase) for field in line.split("\t")]
        if len(words) != 2 or not all(words):
            raise ValueError("expected premise<TAB>hypothesis, both with words")
        return bounded_pair(NLIPair(*words), self.limit)

    def batch(self, examples: Sequence[NLIPair]) -> dict[str, torch.Tensor]:
        """The :func:`collate_pairs` batch of ``examples`` (``index`` their position)."""
        return collate_pairs(NLIDataset(examples, self.vocab).items)


class NLIDataModule(SplitDataModule):
    """SNLI or SICK pairs in length-bucketed batches.

    Args:
        dataset: ``snli`` or ``sick``.
        protocol: ``cpu`` (SNLI: train on dev minus ``val_fraction``, test on test) or ``full``
            (SNLI train / dev / test); SICK always uses its TRAIN / TRIAL / TEST sets.
        data_dir: the dataset's folder (default: ``snli`` or ``sick`` under
            :func:`~.files.data_root`).
        hub_name, hub_config: a Hugging Face dataset for the ``full`` protocol, used only when
            ``data_dir`` is None (columns ``premise``/``hypothesis`` or ``sentence_A``/
            ``sentence_B``, and ``label`` = index into :data:`LABELS`, -1 dropped).
        vectors: a GloVe-format text file; then :attr:`vectors` holds fixed input vectors
            (:func:`read_vectors`) for the words of every split; otherwise the vocabulary is the
            training words (``min_count`` times or more; others map to ``<unk>``).
        vector_dim: size of those vectors.
        val_fraction: share of SNLI dev held out for validation under ``cpu``.
        lowercase: lowercase the words.
        max_tokens, length_policy: the most words of a premise or hypothesis in any split or
            raw input, and ``"error"`` (refused, naming ``file:line``) or ``"truncate"`` (cut,
            with a warning counting them); see :mod:`.limits`.
        **loader: the loader options (``batch_size``, ``seed``, ...) of
            :class:`~.splits.SplitDataModule`; ``seed`` also draws the held-out pairs.

    After :meth:`setup`: ``vocab``, ``labels`` (= :data:`LABELS`), ``vectors`` (``[V, D]`` or
    None), ``vectors_found`` and ``datasets`` (``train``/``val``/``test`` :class:`NLIDataset`).
    """

    snli_files = {"train": "snli_1.0_train.jsonl.gz", "dev": "snli_1.0_dev.jsonl.gz",
                  "test": "snli_1.0_test.jsonl.gz"}
    sick_file = "SICK.txt"

    def __init__(
        self,
        dataset: str = "snli",
        protocol: str = "cpu",
        data_dir: str | None = None,
        hub_name: str | None = None,
        hub_config: str | None = None,
        vectors: str | None = None,
        vector_dim: int = 300,
        val_fraction: float = 0.1,
        lowercase: bool = True,
        min_count: int = 1,
        max_tokens: int = MAX_TOKENS,
        length_policy: str = "error",
        **loader,
    ) -> None:
        super().__init__(**loader)
        self.limit = LengthLimit(max_tokens, length_policy, "words")
        check_choice("dataset", dataset, DATASETS)
        check_choice("protocol", protocol, PROTOCOLS)
        if not 0 < val_fraction < 1:
            raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
        self.labels = LABELS
        self.vocab: Vocabulary | None = None
        self.vectors: torch.Tensor | None = None
        self.vectors_found = 0
        self.datasets: dict[str, NLIDataset] = {}

    def data_folder(self) -> Path:
        """The local folder read (``data_dir`` or the dataset's folder under ``data_root()``)."""
        if self.hparams.data_dir is not None:
            return Path(self.hparams.data_dir).expanduser()
        return data_root() / self.hparams.dataset

    def read_splits(self) -> dict[str, list[NLIPair]]:
        """``train``/``val``/``test`` pairs under the configured dataset and protocol."""
        h = self.hparams
        if h.hub_name is not None and h.data_dir is None:
            return {split: self._hub_split(split) for split in ("train", "val", "test")}
        hint = ("SNLI: https://nlp.stanford.edu/projects/snli/ (snli_1.0_{train,dev,test}.jsonl); "
                "SICK: SICK.txt of the SemEval-2014 Task 1 distribution.")
        if h.dataset == "sick":
            folder = require_files(self.data_folder(), [self.sick_file], hint)
            return read_sick(folder / self.sick_file, h.lowercase, self.limit)
        names = self.snli_files if h.protocol == "full" else {
            k: v for k, v in self.snli_files.items() if k != "train"}
        folder = require_files(self.data_folder(), names.values(), hint)
        read = {split: read_snli(folder / name, h.lowercase, self.limit)
                for split, name in names.items()}
        if h.protocol == "full":
            return {"train": read["train"], "val": read["dev"], "test": read["test"]}
        kept, held_out = hold_out(read["dev"], h.val_fraction, h.seed)
        require_records(held_out, folder / names["dev"], "validation pairs",
                        f"val_fraction={h.val_fraction} of {len(read['dev'])} dev pairs holds "
                        "out none")
        return {"train": kept, "val": held_out, "test": read["test"]}

    def _hub_split(self, split: str) -> list[NLIPair]:
        h = self.hparams
        name = {"train": "train", "val": "validation", "test": "test"}[split]
        files = ", ".join(self.snli_files.values())
        rows = load_hub_dataset(h.hub_name, h.hub_config, name,
                                f"pass data_dir=<a folder with {files}>")
        where = f"{h.hub_name} {name}"  # its pairs are numbered from 1
        pairs = [bounded_pair(pair, self.limit, where, number)
                 for number, pair in enumerate(pairs_from_hub(rows, h.lowercase), 1)]
        self.limit.warn(where)
        return pairs

    # What the model takes from the data (the CLI links each into the model's argument of the
    # same name when it instantiates the classes).

    @property
    def vocab_size(self) -> int:
        """The size of the vocabulary (read from the splits when asked for)."""
        return len(self.set_up().vocab)

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def vector_dim(self) -> int | None:
        """The size of the fixed input vectors, None without a vectors file."""
        return self.hparams.vector_dim if self.hparams.vectors else None

    def setup(self, stage: str | None = None) -> None:
        """Read the splits, build the vocabulary (and the vectors); once."""
        if self.datasets:
            return
        h = self.hparams
        splits = self.read_splits()
        used = splits.values() if h.vectors else [splits["train"]]
        counts = Counter(w for pairs in used for p in pairs for w in (*p.premise, *p.hypothesis))
        self.vocab = Vocabulary.build(counts, 1 if h.vectors else h.min_count)
        if h.vectors:
            self.vectors, self.vectors_found = read_vectors(h.vectors, self.vocab.tokens,
                                                            h.vector_dim, h.lowercase)
        self.datasets = {split: NLIDataset(pairs, self.vocab) for split, pairs in splits.items()}

    collate = staticmethod(collate_pairs)  # batches of the length-bucketed loaders

    def text_codec(self) -> PairCodec:
        """What a trained model keeps to read raw pairs (its checkpoint saves it)."""
        return PairCodec(self.set_up().vocab, self.labels, self.hparams.lowercase, self.limit)


def pairs_from_hub(rows: Iterable[dict[str, Any]], lowercase: bool = True) -> list[NLIPair]:
    """Hub rows (``premise``/``hypothesis`` or ``sentence_A``/``sentence_B``, integer
    ``label`` indexing :data:`LABELS`, -1 = no gold label) as pairs."""
    pairs = []
    for row in rows:
        premise = row.get("premise", row.get("sentence_A"))
        hypothesis = row.get("hypothesis", row.get("sentence_B"))
        if row["label"] < 0:
            continue
        pairs.append(NLIPair(tokenize(premise, lowercase), tokenize(hypothesis, lowercase),
                             LABELS[row["label"]]))
    return pairs
