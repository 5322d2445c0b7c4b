"""What a trained model needs besides its weights to read raw text and to write its
predictions as text: the base class :class:`TextCodec` of every family's codec, and how a
codec travels inside a checkpoint (:func:`codec_record`, :func:`restore_codec`).

A DataModule makes its family's codec from what it built in ``setup`` (``text_codec()``):
vocabularies, tag sets, the subword model, fertility tables. The task saves it in every
checkpoint as plain Python values and tensors (what ``torch.load(weights_only=True)`` reads),
so ``load_from_checkpoint`` in a fresh process rebuilds it without the training data.

Raw input, one rule for every family and every way in (``predict_text``, a family's method
such as ``tag``, ``structattn predict``): a blank line (or an empty sentence, a string of
whitespace or no words) is not an example and gives no record; every other line gives its
record(s), each carrying ``line``, the 1-based number of the input line it came from (for a
list given to the API, its 1-based position), so the output can be matched to the input.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

#: the checkpoint entries of the codec and of the task's class
CODEC_KEY = "text_codec"
TASK_KEY = "task_class"


class RawInputError(ValueError):
    """A raw input that a codec cannot read, with where it is (``source:line``)."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}:{line}: {reason}")
        self.source, self.line, self.reason = source, line, reason


@contextmanager
def raw_input_at(source: str, number: int) -> Iterator[None]:
    """Turns a ``ValueError`` raised inside into a :class:`RawInputError` naming
    ``source:number``."""
    try:
        yield
    except ValueError as error:
        raise RawInputError(source, number, str(error)) from None


def is_blank(text: str | Sequence[str]) -> bool:
    """Whether a raw line, or a sentence given as a string or as its words, holds no example
    (whitespace only, or no word that is not)."""
    if isinstance(text, str):
        return not text.strip()
    return not any(str(word).strip() for word in text)


class TextCodec:
    """Reads a family's raw inputs into batches, and back into text.

    Subclasses implement:

    - :meth:`state` / :meth:`from_state`: the codec as plain values (lists of strings,
      numbers, tensors) and back;
    - :meth:`read`: one line of a raw file in the family's natural format -> one example (any
      picklable object), ``ValueError`` with the reason for a bad one; :meth:`parse_numbered`
      reads a file's lines with it (a family whose examples span lines, bAbI's stories,
      overrides :meth:`parse_numbered` instead);
    - :meth:`batch`: a list of examples -> the batch dict the family's task reads (tensors,
      the same layout as the DataModule's batches, ``index [B]`` the example's position).
    """

    #: one line on the natural format of :meth:`parse` (``structattn predict --help`` shows it)
    format: str = ""

    def state(self) -> dict[str, Any]:
        """The codec as plain values: strings, numbers, lists and dicts of them, tensors."""
        raise NotImplementedError

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TextCodec:
        """The codec of a :meth:`state`."""
        raise NotImplementedError

    def read(self, line: str) -> Any:
        """The example of one non-blank raw line (without its line break); ``ValueError``
        with the reason when it is malformed."""
        raise NotImplementedError

    def parse(self, lines: Iterable[str], source: str = "<input>") -> list:
        """The examples of the non-blank ``lines`` (:meth:`parse_numbered` without the
        numbers)."""
        return self.parse_numbered(lines, source)[1]

    def parse_numbered(self, lines: Iterable[str], source: str = "<input>"
                       ) -> tuple[list[int], list]:
        """The examples of the non-blank ``lines`` (:meth:`read`; blank ones are skipped, see
        the module docstring) and the 1-based number of the line of each; a malformed line
        raises :class:`RawInputError` naming ``source`` and its number."""
        numbers, examples = [], []
        for number, line in enumerate(lines, start=1):
            if not is_blank(line):
                with raw_input_at(source, number):
                    examples.append(self.read(line.rstrip("\r\n")))
                numbers.append(number)
        return numbers, examples

    def pretokenized(self) -> TextCodec:
        """This codec reading whitespace-separated words as they are, without tokenising
        (``pretokenized=True``, ``--pretokenized``); ``ValueError`` for a family whose raw
        format is read one way only (only the taggers tokenise raw sentences)."""
        raise ValueError(f"{type(self).__name__} reads its format one way only: pretokenized "
                         "input applies to the taggers (POS, NER), which tokenise raw sentences")

    def batch(self, examples: Sequence) -> dict[str, torch.Tensor]:
        """The batch of ``examples`` (``B`` of them), in the DataModule's layout, with
        ``index [B]`` their positions in ``examples``."""
        raise NotImplementedError


def class_path(obj: object) -> str:
    """``module.QualifiedName`` of ``obj``'s class."""
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def import_class(path: str) -> type:
    """The class named by a ``module.QualifiedName`` path."""
    module, _, name = path.rpartition(".")
    found = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


def codec_record(codec: TextCodec) -> dict[str, Any]:
    """``{"class_path": ..., "state": ...}``: what a checkpoint keeps of ``codec``."""
    return {"class_path": class_path(codec), "state": codec.state()}


def restore_codec(record: dict[str, Any]) -> TextCodec:
    """The codec of a :func:`codec_record`; ``ValueError`` if it names no codec class."""
    cls = import_class(record["class_path"])
    if not (isinstance(cls, type) and issubclass(cls, TextCodec)):
        raise ValueError(f"{record['class_path']} is not a TextCodec")
    return cls.from_state(record["state"])
