"""Tokenization and subwords of the translation data: Moses tokenization (sacremoses) and one
joint sentencepiece BPE model for both languages (:class:`Subwords`), the target word vocabulary
of the character-to-word setting (:class:`TargetWords`), and the BPE model trained once per
corpus and cached (:func:`cached_subwords`)."""

from __future__ import annotations

import hashlib
import io
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from lit_structattn.common.constants import BOS_ID, EOS_ID, PAD_ID, SEQUENCE_SPECIALS, UNK
from lit_structattn.common.optional import optional_import

from .vocabulary import Vocabulary, content_ids

# The sentencepiece model's ids: the sequence specials in their declared order, then <sink>.
UNK_ID = SEQUENCE_SPECIALS.index(UNK)
SINK_ID = len(SEQUENCE_SPECIALS)  # <sink>: a user-defined piece

class Subwords:
    """Moses tokenization + a joint sentencepiece BPE model (ids: 0 pad, 1 <bos>, 2 <eos>,
    3 <unk>, 4 <sink>), for two languages.

    Args:
        model: a trained sentencepiece model (see :meth:`train`): its file, or the model itself
            (the bytes of the file, or of ``processor.serialized_model_proto()``: what a
            checkpoint keeps).
        src_lang, tgt_lang: language codes for the Moses tokenizer and detokenizer.

    ``model_file`` is the file the model was read from (None when given as bytes).
    """

    def __init__(self, model: str | Path | bytes, src_lang: str, tgt_lang: str) -> None:
        sentencepiece = optional_import("sentencepiece", "translation")
        moses = optional_import("sacremoses", "translation")

        self.model_file = None if isinstance(model, bytes) else Path(model)
        proto = model if self.model_file is None else self.model_file.read_bytes()
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        self._tokenizers = {lang: moses.MosesTokenizer(lang=lang) for lang in (src_lang, tgt_lang)}
        self._detokenizers = {lang: moses.MosesDetokenizer(lang=lang)
                              for lang in (src_lang, tgt_lang)}
        self.target_words: TargetWords | None = None  # set for word-level targets

    def __len__(self) -> int:
        return self.processor.get_piece_size()

    @property
    def target_size(self) -> int:
        """The size of the target vocabulary (the subwords', unless the targets are words)."""
        return len(self) if self.target_words is None else len(self.target_words)

    @staticmethod
    def moses(tokenizer, text: str) -> str:
        """Moses-tokenized ``text`` (tokens joined by spaces, no HTML escaping)."""
        return tokenizer.tokenize(text, escape=False, return_str=True)

    @staticmethod
    def train(lines: Iterable[str], model_prefix: Path, vocab_size: int) -> Path:
        """Train a BPE model on already Moses-tokenized ``lines``; returns the model file,
        ``{model_prefix}.model`` (with its ``.vocab``). Both are written in a scratch folder
        and moved into place, the model last, so a process that finds the model file (another
        DDP rank, a parallel run sharing the cache) never reads half of it."""
        sentencepiece = optional_import("sentencepiece", "translation")

        model_prefix = Path(model_prefix)
        model_prefix.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=model_prefix.parent) as scratch:
            partial = Path(scratch) / "bpe"
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=iter(list(lines)), model_prefix=str(partial),
                model_type="bpe", vocab_size=vocab_size, character_coverage=1.0,
                pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
                user_defined_symbols=["<sink>"], num_threads=1, minloglevel=2,
                hard_vocab_limit=False,
            )
            for suffix in (".vocab", ".model"):
                partial.with_suffix(suffix).replace(model_prefix.with_suffix(suffix))
        return model_prefix.with_suffix(".model")

    def words(self, text: str, lang: str) -> list[str]:
        """The lowercased Moses tokens of ``text`` (what REP and the word aligner see)."""
        return self.moses(self._tokenizers[lang], text).lower().split()

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The subword strings of ``ids``."""
        return [self.processor.id_to_piece(i) for i in ids]

    def tokens(self, text: str, lang: str) -> list[str]:
        """The Moses tokens of ``text`` (case kept)."""
        return self.moses(self._tokenizers[lang], text).split()

    def target_pieces(self, ids: Sequence[int]) -> list[str]:
        """The strings of target ``ids`` (words or subwords)."""
        return self.pieces(ids) if self.target_words is None else self.target_words.pieces(ids)

    def encode_target(self, text: str) -> list[int]:
        """Target ids of raw ``text`` (words or subwords)."""
        if self.target_words is None:
            return self.encode(text, self.tgt_lang)
        return self.target_words.encode(self.tokens(text, self.tgt_lang))

    def encode(self, text: str, lang: str) -> list[int]:
        """Subword ids of raw ``text`` in language ``lang``."""
        return self.processor.encode(self.moses(self._tokenizers[lang], text))

    def encode_source(self, text: str, units: str = "subwords") -> list[int]:
        """The source ids of raw ``text`` (source language): its subwords (:meth:`encode`) or,
        with ``units="characters"``, the characters of its subwords
        (:meth:`encode_characters`); no ``<sink>``."""
        if units == "characters":
            return self.encode_characters(text, self.src_lang)
        return self.encode(text, self.src_lang)

    def encode_characters(self, text: str, lang: str) -> list[int]:
        """Ids of the characters of raw ``text``'s subwords (word starts keep the ``▁`` piece),
        all single-character pieces of the same joint vocabulary (BPE keeps every training
        character as a piece; unseen ones -> ``<unk>``)."""
        pieces = self.processor.encode(self.moses(self._tokenizers[lang], text), out_type=str)
        return [self.processor.piece_to_id(ch) for piece in pieces for ch in piece]

    def decode(self, ids: Sequence[int] | torch.Tensor, lang: str) -> str:
        """Detokenized text of subword ``ids`` (target words when ``lang`` is the target's and
        the targets are words); stops at the first <eos>, skips pad and <bos>."""
        if lang == self.tgt_lang and self.target_words is not None:
            return self.target_words.detokenize(ids)
        pieces = self.processor.decode(content_ids(ids, EOS_ID, (PAD_ID, BOS_ID, SINK_ID)))
        return self._detokenizers[lang].detokenize(pieces.split())


class TargetWords(Vocabulary):
    """A word vocabulary of the target side (Kim et al.'s character-to-word setting): the
    ``size - 4`` most frequent Moses tokens (case kept) of the training targets after the
    sequence specials ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3 (ties broken by first
    occurrence), and the Moses detokenizer of their language.

    Args:
        tokens: the words in id order from id 4 on; lang: the Moses language of the detokenizer.
    """

    def __init__(self, tokens: Sequence[str], lang: str) -> None:
        moses = optional_import("sacremoses", "translation")
        super().__init__(tokens, specials=SEQUENCE_SPECIALS)
        self._detokenizer = moses.MosesDetokenizer(lang=lang)

    @classmethod
    def from_tokenized(cls, sentences: Iterable[list[str]], size: int, lang: str) -> TargetWords:
        counts = Counter(token for sentence in sentences for token in sentence)
        return cls([token for token, _ in counts.most_common(max(size - 4, 0))], lang)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The words of ``ids`` (``IndexError`` for an id outside the vocabulary)."""
        return [self.tokens[i] for i in ids]

    def detokenize(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Detokenized text of :meth:`decode` (up to the first ``<eos>``)."""
        return self._detokenizer.detokenize(self.decode(ids))


def cached_subwords(cache_dir: Path, train_pairs: Sequence[tuple[str, str]], src_lang: str,
                    tgt_lang: str, bpe_size: int) -> Subwords:
    """The corpus's BPE model in ``cache_dir``, trained on the Moses-tokenized training text
    ``train_pairs`` if not cached (keyed by a hash of that text, the languages and the size)."""
    digest = hashlib.sha256()
    for src, tgt in train_pairs:
        digest.update(f"{src}\t{tgt}\n".encode())
    digest.update(f"{src_lang}-{tgt_lang}-{bpe_size}-sink".encode())
    prefix = cache_dir / f"bpe-{src_lang}-{tgt_lang}-{bpe_size}-{digest.hexdigest()[:16]}"
    model = prefix.with_suffix(".model")
    if not model.is_file():
        moses = optional_import("sacremoses", "translation")
        tokenizers = [moses.MosesTokenizer(lang=src_lang), moses.MosesTokenizer(lang=tgt_lang)]
        text = io.StringIO()
        for src, tgt in train_pairs:
            text.write(Subwords.moses(tokenizers[0], src) + "\n")
            text.write(Subwords.moses(tokenizers[1], tgt) + "\n")
        Subwords.train(text.getvalue().splitlines(), prefix, bpe_size)
    return Subwords(model, src_lang, tgt_lang)
