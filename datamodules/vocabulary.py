"""The one vocabulary class of the project: tokens <-> ids with the special symbols of
:mod:`lit_structattn.common.constants` first, and decoding that stops at ``<eos>``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch

from lit_structattn.common.constants import BOS, EOS, PAD, UNK, WORD_SPECIALS

from .limits import LIMIT_KEYS, BoundedCodec, LengthLimit, limit_from_state


class Vocabulary:
    """Token <-> id, the ``specials`` first (in their order), then ``tokens`` (duplicates and
    specials among them ignored).

    Args:
        tokens: the other tokens, in id order.
        specials: a prefix-closed choice of ``(<pad>, <unk>)`` (words), ``(<pad>,)`` (tag
            sets), ``(<pad>, <bos>, <eos>)`` or ``(<pad>, <bos>, <eos>, <unk>)`` (sequences):
            ``<pad>`` is always 0 and ``<bos>``/``<eos>``, when present, 1 and 2, the ids the
            decoders use. Unknown tokens map to ``<unk>`` when it is there, else ``KeyError``.

    Attributes: ``tokens`` (id -> token), ``index`` (token -> id), ``pad_id``, and
    ``bos_id``/``eos_id``/``unk_id`` (None where the symbol is absent).
    """

    LAYOUTS = ((PAD,), (PAD, UNK), (PAD, BOS, EOS), (PAD, BOS, EOS, UNK))

    def __init__(self, tokens: Iterable[str] = (), specials: Sequence[str] = WORD_SPECIALS
                 ) -> None:
        specials = tuple(specials)
        if specials not in self.LAYOUTS:
            raise ValueError(f"specials {specials} is not one of {self.LAYOUTS}")
        self.specials = specials
        self.tokens: list[str] = list(specials)
        self.index: dict[str, int] = {token: i for i, token in enumerate(self.tokens)}
        for token in tokens:
            if token not in self.index:
                self.index[token] = len(self.tokens)
                self.tokens.append(token)
        self.pad_id = 0
        self.bos_id, self.eos_id, self.unk_id = (self.index.get(s) for s in (BOS, EOS, UNK))

    @classmethod
    def build(cls, counts: Counter | Iterable[str], min_count: int = 1,
              specials: Sequence[str] = WORD_SPECIALS) -> Vocabulary:
        """The tokens seen at least ``min_count`` times, most frequent first (ties by string)."""
        counts = counts if isinstance(counts, Counter) else Counter(counts)
        kept = [t for t, c in counts.items() if c >= min_count]
        kept.sort(key=lambda t: (-counts[t], t))
        return cls(kept, specials)

    def state(self) -> dict[str, list[str]]:
        """The vocabulary as plain lists (what a checkpoint keeps): ``tokens`` and
        ``specials``."""
        return {"tokens": self.tokens[len(self.specials):], "specials": list(self.specials)}

    @classmethod
    def from_state(cls, state: dict[str, list[str]]) -> Vocabulary:
        """The vocabulary of a :meth:`state`."""
        return cls(state["tokens"], state["specials"])

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.index

    def __repr__(self) -> str:
        more = " ..." if len(self) > 6 else ""
        return f"Vocabulary({len(self)} tokens: {self.tokens[:6]}{more})"

    def id(self, token: str) -> int:
        """The id of ``token``; ``<unk>`` if unknown (``KeyError`` if there is no ``<unk>``)."""
        found = self.index.get(token)
        if found is not None:
            return found
        if self.unk_id is None:
            raise KeyError(f"{token!r} is not in the vocabulary ({len(self)} tokens)")
        return self.unk_id

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Tokens -> ids (see :meth:`id`); no ``<bos>``/``<eos>`` added."""
        return [self.id(token) for token in tokens]

    def content_ids(self, ids: Iterable[int] | torch.Tensor) -> list[int]:
        """The ids of a model output or a batch row ``[T]`` up to the first ``<eos>``, without
        ``<pad>`` and ``<bos>``: the tokens a sequence says."""
        return content_ids(ids, self.eos_id, (self.pad_id, self.bos_id))

    def decode(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """Ids (a list or a 1-D tensor ``[T]``) -> the tokens of :meth:`content_ids`."""
        return [self.tokens[i] for i in self.content_ids(ids)]


class SharedVocabularySizes:
    """The sizes a sequence-to-sequence model takes from a DataModule whose sources and
    targets share one ``vocab`` (the CLI links each into the model's argument of the same name
    when it instantiates the classes): a DataModule that builds ``vocab`` in ``setup`` is set
    up when they are asked for."""

    joint_vocab = True

    @property
    def src_vocab(self) -> int:
        return len(self.set_up().vocab)

    @property
    def tgt_vocab(self) -> int:
        return self.src_vocab


def content_ids(ids: Iterable[int] | torch.Tensor, eos_id: int | None,
                skip: Iterable[int | None]) -> list[int]:
    """``ids`` (a list or a 1-D tensor ``[T]``) up to the first ``eos_id``, without the ids in
    ``skip``: what every decoder output and batch row of the project says."""
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    skip = set(skip)
    kept = []
    for i in ids:
        if i == eos_id:
            break
        if i not in skip:
            kept.append(i)
    return kept


class SymbolSourceCodec(BoundedCodec):
    """The text codec of an encoder-decoder whose sources and targets are symbols of one
    vocabulary (tree transduction, morphological inflection): a raw line becomes source
    symbols (:meth:`symbols`, per family), a batch is ``src [B, S]``, ``src_lengths [B]`` and
    ``index [B]``, and :meth:`decode` turns ids back into symbols. Unknown symbols map to
    ``<unk>`` where the vocabulary has one; without it the line is refused. Blank lines are
    skipped. A source of more than ``limit`` symbols is refused (default: the family's
    :attr:`max_tokens`); the limit is kept in :meth:`state`."""

    #: the family's default limit (symbols of one source), also for a codec saved without one
    max_tokens: int = 0
    #: one raw input in messages
    example_name: str = "input"

    def __init__(self, vocab: Vocabulary, limit: LengthLimit | None = None) -> None:
        self.vocab = vocab
        self.limit = limit or LengthLimit(self.max_tokens, unit="symbols", truncatable=False)

    def state(self) -> dict:
        return {**self.vocab.state(), **self.limit.state()}

    @classmethod
    def from_state(cls, state: dict) -> SymbolSourceCodec:
        """The codec of :meth:`state`; a state saved without the limit gets the default."""
        vocab = Vocabulary.from_state({k: v for k, v in state.items() if k not in LIMIT_KEYS})
        return cls(vocab, limit_from_state(state, cls.max_tokens, "symbols", truncatable=False))

    def symbols(self, line: str) -> list[str]:
        """The source symbols of one raw line (``ValueError`` with the reason if malformed)."""
        raise NotImplementedError

    def read(self, line: str) -> list[str]:
        """The source symbols of ``line`` (:meth:`symbols`) within ``limit``; ``ValueError``
        naming the symbols outside a vocabulary without ``<unk>``, or for too many symbols."""
        symbols = self.symbols(line)
        unknown = sorted({s for s in symbols if s not in self.vocab})
        if unknown and self.vocab.unk_id is None:
            raise ValueError(f"symbols outside the model's vocabulary: {' '.join(unknown)}")
        return self.limit.cut((symbols,), self.example_name)[0]

    def batch(self, examples: Sequence[Sequence[str]]) -> dict[str, torch.Tensor]:
        """``src [B, S]`` (0-padded ids), ``src_lengths [B]``, ``index [B]``."""
        src = [self.vocab.encode(symbols) for symbols in examples]
        lengths = [len(s) for s in src]
        width = max(lengths)
        return {"src": torch.tensor([s + [0] * (width - len(s)) for s in src]),
                "src_lengths": torch.tensor(lengths), "index": torch.arange(len(src))}

    def decode(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """The symbols of a source row or a model output, up to ``<eos>``."""
        return self.vocab.decode(ids)
