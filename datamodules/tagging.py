"""What the three tagging DataModules share (Martins & Kreutzer 2017): sentences, vocabularies,
the word features of §5.1, the batch collation, the base DataModule and the Hugging Face path.

Word features (§5.1): every word is its id in :attr:`TaggingDataModule.vocab` plus the ids of its
prefixes and suffixes of n = 1..4 characters in :attr:`TaggingDataModule.affix_vocab` (one
vocabulary of character n-gram strings, built from the training words; a prefix and a suffix with
the same characters share an id, so a model that wants them apart uses two embedding tables). A
word shorter than n characters gets the pad id 0 for that n; an n-gram unseen in training gets
``<unk>`` = 1.

Batches (:func:`collate_tagged`) are dicts of padded long tensors, padding id 0 everywhere::

    words     [B, T]     word ids
    prefixes  [B, T, 4]  prefix ids, [..., n - 1] = the n-character prefix
    suffixes  [B, T, 4]  suffix ids, same layout
    caps      [B, T]     capitalization class (:func:`capitalization`: 1 lower, 2 Title,
                         3 UPPER, 4 mIxed; the authors' 4-way feature)
    tags      [B, T]     tag ids (tag vocabulary index 0 = <pad>)
    lengths   [B]        sentence lengths in words
    index     [B]        position of each sentence in its split (eval batches are length-sorted)

and for word-level QE also::

    aligned         [B, T, A]  source-vocabulary ids of the source words aligned to each MT word
                               (A = the batch's largest count, >= 1; an unaligned word gets none)
    source          [B, S]     source-vocabulary ids of the source sentence
    source_lengths  [B]

Raw text (a trained model's inputs, :class:`TaggingCodec`): one sentence per line, split into
words the way the DataModule's data was (:mod:`.treebank`: punctuation and English clitics off,
``New York.`` -> ``New York .``; the tokenizer's name travels with the codec), or as given with
``pretokenized``; its batch is the same layout with the padding tag 0 as every tag.

Bounded cost (:mod:`.limits`): every sentence read, from a file, the hub or raw text,
holds at most ``max_tokens`` words (for word-level QE: MT words and source words), refused with
its ``file:line`` or, with ``length_policy="truncate"``, cut (:func:`bounded_sentence`).
"""

from __future__ import annotations

import copy
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils.data import Dataset

from lit_structattn.common.checks import check_choice
from lit_structattn.common.constants import PAD, PAD_ID

from .batching import pad_rows
from .files import data_root, require_files
from .hub import load_hub_dataset
from .limits import LIMIT_KEYS, BoundedCodec, LengthLimit, limit_from_state
from .splits import SplitDataModule
from .treebank import TOKENIZERS
from .vectors import load_pretrained_vectors
from .vocabulary import Vocabulary

AFFIX_ORDERS = 4
#: the default ``max_tokens`` (words per sentence); the longest sentence of the shipped data
#: has 1238 words (esp.train of CoNLL-2002; 202 in its test file, 159 in UD English-EWT, 124 in
#: CoNLL-2003, 36 in the word-level QE sample)
MAX_TOKENS = 1500
SPLITS = ("train", "val", "test")
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}


# ----------------------------------------------------------------------------- sentences


@dataclass(frozen=True)
class TaggedSentence:
    """One sentence: ``words`` and their ``tags`` (same length). For word-level QE also the
    ``source`` sentence and the ``alignment`` as ``(source i, MT j)`` pairs (0-based)."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    source: tuple[str, ...] | None = None
    alignment: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if len(self.words) != len(self.tags):
            raise ValueError(f"{len(self.words)} words but {len(self.tags)} tags")


def bounded_sentence(sentence: TaggedSentence, limit: LengthLimit | None,
                     source: str | os.PathLike | None = None, line: int | None = None
                     ) -> TaggedSentence:
    """``sentence`` within ``limit`` (:meth:`~.limits.LengthLimit.cut`: words and
    tags, and a QE sentence's source words; alignment pairs beyond a cut are dropped);
    ``sentence`` itself when ``limit`` is None or it fits. Errors name ``source:line``."""
    if limit is None:
        return sentence
    parts = (sentence.words, sentence.tags) + (() if sentence.source is None
                                               else (sentence.source,))
    kept = limit.cut(parts, "sentence", source, line)
    if all(len(a) == len(b) for a, b in zip(kept, parts, strict=True)):
        return sentence
    if sentence.source is None:
        return TaggedSentence(*kept)
    words, tags, source_words = kept
    alignment = tuple((i, j) for i, j in sentence.alignment or ()
                      if i < len(source_words) and j < len(words))
    return TaggedSentence(words, tags, source_words, alignment)


# ----------------------------------------------------------------------------- vocabularies


def affixes(word: str, orders: int = AFFIX_ORDERS) -> tuple[list[str | None], list[str | None]]:
    """``(prefixes, suffixes)`` of ``word`` for n = 1..orders; None where the word is shorter."""
    prefixes = [word[:n] if len(word) >= n else None for n in range(1, orders + 1)]
    suffixes = [word[-n:] if len(word) >= n else None for n in range(1, orders + 1)]
    return prefixes, suffixes


def build_affix_vocab(words: Iterable[str], min_count: int = 1) -> Vocabulary:
    """One vocabulary of the prefix and suffix n-grams (n <= 4) of ``words`` (token occurrences:
    an n-gram counts once per occurrence as a prefix and once as a suffix)."""
    counts: Counter = Counter()
    for word, count in Counter(words).items():
        prefixes, suffixes = affixes(word)
        for affix in prefixes + suffixes:
            if affix is not None:
                counts[affix] += count
    return Vocabulary.build(counts, min_count)


CAPITALIZATION_CLASSES = 4


def capitalization(word: str) -> int:
    """The 4-way capitalization class of a word: 1 = no capital (incl. no letter), 2 = only the
    first character capital ("Paris"), 3 = all letters capital ("NATO", "A"), 4 = other."""
    letters = [c for c in word if c.isalpha()]
    if not any(c.isupper() for c in letters):
        return 1
    if all(c.isupper() for c in letters):
        return 3
    if word[0].isupper() and not any(c.isupper() for c in word[1:]):
        return 2
    return 4


class EncodedSentence(NamedTuple):
    """A sentence as ids (lists; :func:`collate_tagged` pads them). ``prefixes``/``suffixes``
    hold one list of 4 ids per word; ``source``/``aligned`` are None outside QE."""

    words: list[int]
    prefixes: list[list[int]]
    suffixes: list[list[int]]
    tags: list[int]
    caps: list[int]
    index: int
    source: list[int] | None = None
    aligned: list[list[int]] | None = None


class SentenceEncoder:
    """Turns :class:`TaggedSentence` objects into :class:`EncodedSentence` ids (word features
    memoised per word type)."""

    def __init__(
        self, vocab: Vocabulary, affix_vocab: Vocabulary, tag_vocab: Vocabulary,
        source_vocab: Vocabulary | None = None
    ) -> None:
        self.vocab, self.affix_vocab, self.tag_vocab = vocab, affix_vocab, tag_vocab
        self.source_vocab = source_vocab
        self._features: dict[str, tuple[int, list[int], list[int]]] = {}

    def word_features(self, word: str) -> tuple[int, list[int], list[int]]:
        """``(word id, 4 prefix ids, 4 suffix ids)``; pad id 0 where the word is shorter than n."""
        found = self._features.get(word)
        if found is None:
            prefixes, suffixes = affixes(word)
            pad, affix_id = PAD_ID, self.affix_vocab.id
            found = (
                self.vocab.id(word),
                [pad if a is None else affix_id(a) for a in prefixes],
                [pad if a is None else affix_id(a) for a in suffixes],
            )
            self._features[word] = found
        return found

    def encode(self, sentence: TaggedSentence, index: int) -> EncodedSentence:
        features = [self.word_features(word) for word in sentence.words]
        source = aligned = None
        if sentence.source is not None:
            if self.source_vocab is None:
                raise ValueError("a QE sentence needs a source vocabulary")
            source = self.source_vocab.encode(sentence.source)
            aligned = [[] for _ in sentence.words]
            for i, j in sorted(sentence.alignment or ()):
                aligned[j].append(source[i])
        return EncodedSentence(
            words=[f[0] for f in features],
            prefixes=[f[1] for f in features],
            suffixes=[f[2] for f in features],
            tags=self.tag_vocab.encode(sentence.tags),
            index=index,
            caps=[capitalization(word) for word in sentence.words],
            source=source,
            aligned=aligned,
        )


# ----------------------------------------------------------------------------- tensors


class TaggingDataset(Dataset):
    """Encoded sentences of one split; item ``i`` is an :class:`EncodedSentence`.
    ``sentences`` keeps the :class:`TaggedSentence` strings (for figures and predictions)."""

    def __init__(self, sentences: Sequence[TaggedSentence], encoder: SentenceEncoder) -> None:
        self.sentences = list(sentences)
        self.items = [encoder.encode(s, i) for i, s in enumerate(self.sentences)]
        self.lengths = [len(item.words) for item in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> EncodedSentence:
        return self.items[index]


def collate_tagged(items: Sequence[EncodedSentence]) -> dict[str, torch.Tensor]:
    """Pad encoded sentences into a batch of long tensors (padding id 0), trimmed to the batch's
    longest sentence: ``words [B, T]``, ``prefixes [B, T, 4]``, ``suffixes [B, T, 4]``,
    ``caps [B, T]``, ``tags [B, T]``, ``lengths [B]``, ``index [B]``; if the items carry a
    source sentence (QE), also ``aligned [B, T, A]`` (A = the largest number of source words
    aligned to one MT word in the batch, at least 1), ``source [B, S]`` and
    ``source_lengths [B]``.
    """
    lengths = [len(item.words) for item in items]
    width = max(lengths)
    no_affix = [PAD_ID] * AFFIX_ORDERS
    shape = (len(items), width, AFFIX_ORDERS)
    prefixes = pad_rows([item.prefixes for item in items], width, no_affix)
    suffixes = pad_rows([item.suffixes for item in items], width, no_affix)
    batch = {
        "words": torch.tensor(pad_rows([item.words for item in items], width), dtype=torch.long),
        "prefixes": torch.tensor(prefixes, dtype=torch.long).view(shape),
        "suffixes": torch.tensor(suffixes, dtype=torch.long).view(shape),
        "caps": torch.tensor(pad_rows([item.caps for item in items], width), dtype=torch.long),
        "tags": torch.tensor(pad_rows([item.tags for item in items], width), dtype=torch.long),
        "lengths": torch.tensor(lengths, dtype=torch.long),
        "index": torch.tensor([item.index for item in items], dtype=torch.long),
    }
    if items[0].source is not None:
        links = max(1, max(len(a) for item in items for a in item.aligned))
        no_link = [PAD_ID] * links
        aligned = pad_rows([pad_rows(item.aligned, links) for item in items], width, no_link)
        source_lengths = [len(item.source) for item in items]
        source_width = max(1, max(source_lengths))
        batch["aligned"] = torch.tensor(aligned, dtype=torch.long).view(len(items), width, links)
        batch["source"] = torch.tensor(
            pad_rows([item.source for item in items], source_width), dtype=torch.long
        )
        batch["source_lengths"] = torch.tensor(source_lengths, dtype=torch.long)
    return batch


# ----------------------------------------------------------------------------- raw text


def raw_words(text: str | Sequence[str], what: str = "sentence") -> tuple[str, ...]:
    """The words of a raw sentence given as a string (split on whitespace) or as its words;
    ``ValueError`` if there are none."""
    words = tuple(text.split()) if isinstance(text, str) else tuple(str(w) for w in text)
    if not words:
        raise ValueError(f"empty {what}")
    return words


def untagged(words: tuple[str, ...], source: tuple[str, ...] | None = None,
             alignment: tuple[tuple[int, int], ...] | None = None) -> TaggedSentence:
    """A sentence whose tags are unknown: every tag is the padding tag (id 0 in a batch)."""
    return TaggedSentence(words, (PAD,) * len(words), source, alignment)


class TaggingCodec(BoundedCodec):
    """Raw sentences for a trained tagger (:class:`~lit_structattn.common.codec.TextCodec`):
    the data's word, affix and tag vocabularies, read with the DataModule's word features
    (:class:`SentenceEncoder`) into its batches (:func:`collate_tagged`). A raw sentence is
    split into words by ``tokenizer`` (a name of :data:`~.treebank.TOKENIZERS`: ``treebank``,
    CoNLL's and the Penn Treebank's way; ``ud``, UD English-EWT's, which also splits hyphens;
    ``whitespace``, as given), which already-tokenised text passes unchanged. Unknown words and
    affixes map to ``<unk>``; a raw sentence's tags are unknown, so its ``tags`` row is the
    padding tag 0. Blank lines are skipped. A sentence longer than ``limit`` is refused, or
    cut (:func:`bounded_sentence`).

    Attributes: ``encoder`` (the :class:`SentenceEncoder` of the vocabularies), ``limit``
    (the DataModule's :class:`~.limits.LengthLimit`; default ``MAX_TOKENS`` words,
    refused) and ``tokenizer``, kept in :meth:`state` (a codec saved before it kept a
    tokenizer reads raw text with ``treebank``).
    """

    format = ("one raw sentence per line, tokenised as the training data was (--pretokenized: "
              "words separated by spaces): Peter Blackburn visited Brussels.")

    def __init__(self, vocab: Vocabulary, affix_vocab: Vocabulary, tag_vocab: Vocabulary,
                 limit: LengthLimit | None = None, tokenizer: str = "treebank") -> None:
        self.encoder = SentenceEncoder(vocab, affix_vocab, tag_vocab)
        self.limit = limit or LengthLimit(MAX_TOKENS)
        self.tokenizer = check_choice("tokenizer", tokenizer, TOKENIZERS)

    def vocabularies(self) -> dict[str, Vocabulary]:
        """The codec's vocabularies by the name of their constructor argument."""
        encoder = self.encoder
        return {"vocab": encoder.vocab, "affix_vocab": encoder.affix_vocab,
                "tag_vocab": encoder.tag_vocab}

    def state(self) -> dict[str, Any]:
        vocabularies = {name: vocab.state() for name, vocab in self.vocabularies().items()}
        return {**vocabularies, **self.limit.state(), "tokenizer": self.tokenizer}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TaggingCodec:
        """The codec of :meth:`state`; a state saved without the limit or the tokenizer gets
        the class's default."""
        vocabularies = {name: Vocabulary.from_state(vocab) for name, vocab in state.items()
                        if name not in (*LIMIT_KEYS, "tokenizer")}
        codec = cls(**vocabularies, limit=limit_from_state(state, MAX_TOKENS, "words"))
        codec.tokenizer = check_choice("tokenizer", state.get("tokenizer", codec.tokenizer),
                                       TOKENIZERS)
        return codec

    def pretokenized(self) -> TaggingCodec:
        """A copy reading words separated by whitespace as they are (tokenizer
        ``whitespace``)."""
        codec = copy.copy(self)
        codec.tokenizer = "whitespace"
        return codec

    def words(self, sentence: str | Sequence[str]) -> tuple[str, ...]:
        """The words of a raw sentence: a string split by ``tokenizer``, or its words as
        given; ``ValueError`` if there are none."""
        if isinstance(sentence, str):
            sentence = TOKENIZERS[self.tokenizer](sentence)
        return raw_words(sentence)

    def example(self, words: str | Sequence[str], source: str | Sequence[str] | None = None,
                alignment: str | Iterable[tuple[int, int]] | None = None) -> TaggedSentence:
        """A raw sentence (a string, tokenised: :meth:`words`, or its words) as an untagged
        :class:`TaggedSentence` within ``limit``; ``ValueError`` if it is empty or too long, or
        if a source sentence or an alignment comes with it (only word-level QE reads them,
        :class:`~.word_qe.QECodec`)."""
        if source is not None or alignment is not None:
            raise ValueError("a source sentence or an alignment for a tagger that reads none "
                             "(it is not a word-level QE model)")
        return bounded_sentence(untagged(self.words(words)), self.limit)

    def fields(self, line: str) -> tuple[str, ...]:
        """The arguments of :meth:`example` in one raw line; ``ValueError`` if it is malformed
        (here: a tab, the separator of the word-level QE format, not of this one)."""
        if "\t" in line:
            raise ValueError("a tab in the sentence: its words are separated by spaces "
                             "(MT<TAB>source<TAB>alignment is the word-level QE format)")
        return (line,)

    def read(self, line: str) -> TaggedSentence:
        """The untagged sentence of one raw line (:meth:`fields`, :meth:`example`);
        ``ValueError`` when they refuse it."""
        return self.example(*self.fields(line))

    def batch(self, examples: Sequence[TaggedSentence]) -> dict[str, torch.Tensor]:
        """The :func:`collate_tagged` batch of ``examples`` (``tags [B, T]`` all padding,
        ``index [B]`` their positions in ``examples``)."""
        return collate_tagged([self.encoder.encode(s, i) for i, s in enumerate(examples)])


# ----------------------------------------------------------------------------- the hub


def label_names(features: Any, column: str) -> list[str] | None:
    """The class names of a ``Sequence(ClassLabel)`` column of a hub dataset, or None."""
    feature = features[column] if features is not None and column in features else None
    inner = getattr(feature, "feature", None)
    if isinstance(inner, dict):
        return None
    names = getattr(inner, "names", None)
    return list(names) if names else None


# ----------------------------------------------------------------------------- datamodule


class TaggingDataModule(SplitDataModule):
    """Base of the tagging DataModules: reads the three splits (local files or the hub), drops
    long *training* sentences, builds the vocabularies and serves length-bucketed batches (see
    the module docstring for the batch layout).

    Args:
        data_dir: the folder of the dataset's files. If None and ``hub_name`` is None, the
            dataset's default folder under :func:`~.files.data_root`.
        hub_name, hub_config: a Hugging Face dataset (or a local folder laid out like its
            parquet export), used only when ``data_dir`` is None; :mod:`.hub` lists
            the names that load with ``datasets`` >= 4. Offline (``HF_HUB_OFFLINE``/
            ``HF_DATASETS_OFFLINE``, or no network) this fails fast with
            :class:`HubUnavailableError` unless the dataset is in the local cache; a
            loading-script or unknown name fails with an error that says so.
        min_count: words and affixes seen fewer times in (kept) training sentences map to
            ``<unk>``.
        max_train_length: training sentences with more words are dropped (from training only;
            the paper uses 50); None keeps all.
        pretrained_vectors: a text file of word vectors (GloVe, word2vec text, Polyglot dumped
            as text; ``.gz`` or not) to start the tagger's word embeddings from; read by
            :meth:`setup` (:func:`~.vectors.load_pretrained_vectors`).
        vector_dim: the size of those vectors; the tagger's ``word_dim`` must be the same
            (paper: 64, the Polyglot and Lample et al. vectors; 300 for GloVe-840B).
        max_tokens, length_policy: the most words a sentence of any split (and of the raw
            input of the trained model) may hold, and ``"error"`` (a longer one is refused,
            naming its ``file:line``) or ``"truncate"`` (its first ``max_tokens`` words are
            kept, with a warning counting the sentences cut); see :mod:`.limits`.
            Applied as the files are read, before ``max_train_length``.
        **loader: the loader options (``batch_size``, ``seed``, ...) of
            :class:`~.splits.SplitDataModule`.

    After :meth:`setup`: ``vocab``, ``affix_vocab``, ``tag_vocab`` (:class:`Vocabulary`),
    ``datasets`` (``train``/``val``/``test`` :class:`TaggingDataset`), ``dropped_train``
    (how many training sentences ``max_train_length`` removed) and ``split_sizes``
    (``{split: (sentences, words)}`` as read, before that cut-off), ``pretrained_matrix`` (the
    initial word embeddings ``[len(vocab), vector_dim]``, ``None`` without
    ``pretrained_vectors``) and ``pretrained_found`` (how many words of ``vocab`` the file
    had). Vocabularies are rebuilt from the training data on every setup (deterministic:
    frequency, then string order). ``vocab_size``, ``affix_vocab_size``, ``num_tags`` and
    ``tag_names`` give what the tagger and its task take from the data (the CLI links them;
    asked for before :meth:`setup`, they run it).
    """

    #: sub-folder of :func:`data_root` used when neither ``data_dir`` nor ``hub_name`` is given
    default_folder: str = ""
    #: how the dataset's sentences were split into words (a name of
    #: :data:`~.treebank.TOKENIZERS`), which a trained tagger's codec uses on raw sentences
    tokenizer: str = "treebank"
    #: where the data comes from, appended to missing-file errors
    source_hint: str = ""

    def __init__(
        self,
        data_dir: str | None = None,
        hub_name: str | None = None,
        hub_config: str | None = None,
        min_count: int = 1,
        max_train_length: int | None = 50,
        pretrained_vectors: str | None = None,
        vector_dim: int = 64,
        max_tokens: int = MAX_TOKENS,
        length_policy: str = "error",
        **loader,
    ) -> None:
        super().__init__(**loader)
        self.limit = LengthLimit(max_tokens, length_policy, "words")
        for name, value in (("min_count", min_count), ("vector_dim", vector_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if max_train_length is not None and (not isinstance(max_train_length, int)
                                             or max_train_length < 1):
            raise ValueError("max_train_length must be None or an int >= 1, "
                             f"got {max_train_length!r}")
        self.datasets: dict[str, TaggingDataset] = {}
        self.vocab: Vocabulary | None = None
        self.affix_vocab: Vocabulary | None = None
        self.tag_vocab: Vocabulary | None = None
        self.dropped_train = 0
        self.split_sizes: dict[str, tuple[int, int]] = {}
        self.pretrained_matrix: torch.Tensor | None = None
        self.pretrained_found = 0

    # -- to implement in subclasses

    def expected_files(self) -> list[str]:
        """File names that must be in the data folder."""
        raise NotImplementedError

    def read_local(self, folder: Path, split: str) -> list[TaggedSentence]:
        """The sentences of ``split`` (``train``/``val``/``test``) from the files in ``folder``,
        within ``self.limit`` (the readers take it)."""
        raise NotImplementedError

    def from_hub(self, rows: Any, features: Any) -> list[TaggedSentence]:
        """Convert the rows of one hub split into sentences."""
        raise NotImplementedError

    # -- shared

    @property
    def uses_hub(self) -> bool:
        return self.hparams.data_dir is None and self.hparams.hub_name is not None

    def data_folder(self) -> Path:
        """The local folder read (``data_dir`` or the default folder under ``data_root()``)."""
        if self.hparams.data_dir is not None:
            return Path(self.hparams.data_dir).expanduser()
        return data_root() / self.default_folder

    def _local_hint(self) -> str:
        return (f"pass data_dir=<a folder with {', '.join(self.expected_files())}> "
                f"(e.g. {data_root() / self.default_folder}) and leave hub_name unset.")

    def _hub_split(self, split: str) -> list[TaggedSentence]:
        h = self.hparams
        dataset = load_hub_dataset(h.hub_name, h.hub_config, HUB_SPLITS[split], self._local_hint())
        where = f"{h.hub_name} {HUB_SPLITS[split]}"  # its sentences are numbered from 1
        sentences = [bounded_sentence(sentence, self.limit, where, number) for number, sentence
                     in enumerate(self.from_hub(dataset, getattr(dataset, "features", None)), 1)]
        self.limit.warn(where)
        return sentences

    def read_split(self, split: str) -> list[TaggedSentence]:
        """The sentences of one split, from the hub or the local folder."""
        if self.uses_hub:
            return self._hub_split(split)
        return self.read_local(self.data_folder(), split)

    def prepare_data(self) -> None:
        """Hub only (rank 0): load every split once so that it is in the local cache."""
        if self.uses_hub:
            for split in SPLITS:
                self._hub_split(split)

    def setup(self, stage: str | None = None) -> None:
        """Read the splits, build the vocabularies and read the pretrained vectors, if any
        (once; later calls are no-ops)."""
        if self.datasets:
            return
        if not self.uses_hub:
            require_files(self.data_folder(), self.expected_files(), self.source_hint)
        sentences = {split: self.read_split(split) for split in SPLITS}
        self.split_sizes = {
            split: (len(sentences[split]), sum(len(s.words) for s in sentences[split]))
            for split in SPLITS
        }
        limit = self.hparams.max_train_length
        if limit is not None:
            kept = [s for s in sentences["train"] if len(s.words) <= limit]
            self.dropped_train = len(sentences["train"]) - len(kept)
            sentences["train"] = kept
        if not sentences["train"]:
            raise ValueError(f"{type(self).__name__}: no training sentences left "
                             f"(max_train_length={limit})")
        encoder = self.build_encoder(sentences)
        if self.hparams.pretrained_vectors is not None:
            self.pretrained_matrix, self.pretrained_found = load_pretrained_vectors(
                self.hparams.pretrained_vectors, self.vocab.tokens, self.hparams.vector_dim)
        self.datasets = {split: TaggingDataset(sentences[split], encoder) for split in SPLITS}

    def build_encoder(self, sentences: dict[str, list[TaggedSentence]]) -> SentenceEncoder:
        """Vocabularies from the training sentences (tags: every tag of every split, sorted, so
        that a tag absent from training still has an id)."""
        min_count = self.hparams.min_count
        train_words = [w for s in sentences["train"] for w in s.words]
        self.vocab = Vocabulary.build(train_words, min_count)
        self.affix_vocab = build_affix_vocab(train_words, min_count)
        tags = sorted({t for split in SPLITS for s in sentences[split] for t in s.tags})
        self.tag_vocab = Vocabulary(tags, specials=(PAD,))
        return SentenceEncoder(self.vocab, self.affix_vocab, self.tag_vocab)

    collate = staticmethod(collate_tagged)  # batches of the length-bucketed loaders

    def text_codec(self) -> TaggingCodec:
        """What a trained tagger keeps to read raw sentences (its checkpoint saves it), with
        the data's :attr:`tokenizer`."""
        self.set_up()
        return TaggingCodec(self.vocab, self.affix_vocab, self.tag_vocab, self.limit,
                            self.tokenizer)

    # What the tagger (EasyFirstTagger) and its task (TaggingTask) take from the data: the CLI
    # links each into the argument of the same name when it instantiates the classes, before
    # any setup, so asking for one sets the data up (the vocabularies come from the splits).

    @property
    def vocab_size(self) -> int:
        """The size of ``vocab`` (0 = pad, 1 = unk): the tagger's word embeddings."""
        return len(self.set_up().vocab)

    @property
    def affix_vocab_size(self) -> int:
        """The size of ``affix_vocab``: the tagger's prefix and suffix embeddings."""
        return len(self.set_up().affix_vocab)

    @property
    def num_tags(self) -> int:
        """The size of ``tag_vocab`` (with the padding tag 0): the tagger's output layer."""
        return len(self.set_up().tag_vocab)

    @property
    def tag_names(self) -> list[str]:
        """The tag of every id of ``tag_vocab``, ``<pad>`` (0) first: what the task's metrics
        and per-tag loss weights read."""
        return list(self.set_up().tag_vocab.tokens)


def sentences_from_columns(
    rows: Iterable[dict], tokens_column: str, tags_column: str, names: list[str] | None,
    convert: Callable[[list[str]], list[str]] | None = None,
) -> list[TaggedSentence]:
    """Hub rows with a token list and a tag list (ids into ``names``, or strings) -> sentences;
    empty sentences are skipped; ``convert`` rewrites each sentence's tag list."""
    sentences = []
    for row in rows:
        words = [str(w) for w in row[tokens_column]]
        tags = [names[t] if names is not None else str(t) for t in row[tags_column]]
        if convert is not None:
            tags = convert(tags)
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(tags)))
    return sentences
