"""Bounded cost per input: the longest example a family reads, in training, evaluation and
predict.

Problem: the cost of one example grows with its length (quadratically or worse for the
structured layers: a 3,000-word sentence in an NER validation file took minutes and gigabytes
where the rest of the split took seconds), so one over-long line in a data file, or in the raw
input of ``structattn predict``, can stall a run.

Method: every DataModule takes ``max_tokens`` (the most units one sequence of an example may
hold: words, symbols, subwords or characters, per family) and, where cutting an example makes
sense, ``length_policy`` (``"error"``: refuse it; ``"truncate"``: keep its first ``max_tokens``
units). It hands one :class:`LengthLimit` to its readers, which check each example with
:meth:`LengthLimit.cut` where they know its file and line, and to its text codec, which keeps
the two values in its saved state so that ``predict`` applies the limit training had.

Contract: a refused example is a :class:`~.files.MalformedLine` naming ``file:line``
(the example's first line) and the limit; without a file (a codec's :meth:`~lit_structattn.
common.codec.TextCodec.read`) a ``ValueError`` with the same reason, which the codec's parse
turns into ``<source>:<line>: ...``. Cut examples are counted, and :meth:`LengthLimit.warn`
reports the count in one warning per file or input.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from lightning.pytorch.utilities import rank_zero_warn

from lit_structattn.common.checks import check_choice
from lit_structattn.common.codec import TextCodec

from .files import MalformedLine

T = TypeVar("T")

POLICIES = ("error", "truncate")
#: the entries of a codec's saved state that hold its limit (:meth:`LengthLimit.state`)
LIMIT_KEYS = ("max_tokens", "length_policy")


class LengthLimit:
    """The most ``unit`` one sequence of an example may hold, and what to do with a longer one.

    Args:
        max_tokens: the limit (an int >= 1).
        policy: ``"error"`` (refuse a longer example) or ``"truncate"`` (cut it, counted).
        unit: what is counted, for messages (``"words"``, ``"symbols"``, ...).
        truncatable: whether a cut example still means something (False for a formula or a
            lemma: then only ``"error"``, and messages do not offer ``"truncate"``).

    Raises:
        ValueError: ``max_tokens`` is not an int >= 1 or ``policy`` not one of :data:`POLICIES`
            (only ``"error"`` unless ``truncatable``).
    """

    def __init__(self, max_tokens: int, policy: str = "error", unit: str = "words",
                 truncatable: bool = True) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
        check_choice("length_policy", policy, POLICIES if truncatable else POLICIES[:1])
        self.max_tokens, self.policy, self.unit = max_tokens, policy, unit
        self.truncatable = truncatable
        self.cut_count = 0
        self.first_cut: str | None = None

    def state(self) -> dict[str, Any]:
        """``{"max_tokens": ..., "length_policy": ...}``: what a codec saves of the limit."""
        return dict(zip(LIMIT_KEYS, (self.max_tokens, self.policy), strict=True))

    def cut(self, sequences: Sequence[Sequence[T]], what: str,
            source: str | os.PathLike | None = None, line: int | None = None
            ) -> list[Sequence[T]]:
        """The sequences of one example (e.g. its words and tags, or a premise and a
        hypothesis), each at most ``max_tokens`` long.

        Args:
            sequences: the example's sequences, ``[len_i]`` each.
            what: the example in messages (``"sentence"``, ``"formula"``, ...).
            source, line: where the example is (a file and its first line), or None.

        Returns the sequences unchanged when none is longer than ``max_tokens``; with
        ``policy="truncate"`` each cut to its first ``max_tokens`` items (the example counted
        for :meth:`warn`).

        Raises:
            MalformedLine: (``source`` given) a longer example under ``policy="error"``,
                naming ``source:line``, the length and the limit.
            ValueError: the same without ``source`` (a codec's raw line; its parse names it).
        """
        longest = max(len(sequence) for sequence in sequences)
        if longest <= self.max_tokens:
            return list(sequences)
        if self.policy == "error":
            offer = ", or set length_policy: truncate to cut such inputs" * self.truncatable
            problem = (f"{what} of {longest} {self.unit} is longer than max_tokens="
                       f"{self.max_tokens} (raise max_tokens{offer})")
            if source is None:
                raise ValueError(problem)
            raise MalformedLine(source, line, problem)
        self.cut_count += 1
        if self.first_cut is None and source is not None:
            self.first_cut = f"{source}:{line}"
        return [sequence[: self.max_tokens] for sequence in sequences]

    def warn(self, source: str | os.PathLike) -> None:
        """One warning counting the examples of ``source`` cut since the last call (none: no
        warning); the count starts again at 0."""
        if self.cut_count:
            first = f" (the first at {self.first_cut})" if self.first_cut else ""
            rank_zero_warn(f"{source}: {self.cut_count} example{'s' * (self.cut_count != 1)} "
                           f"longer than max_tokens={self.max_tokens} {self.unit} cut to "
                           f"{self.max_tokens}{first} (length_policy: truncate)")
        self.cut_count, self.first_cut = 0, None


def limit_from_state(state: dict[str, Any], default: int, unit: str, truncatable: bool = True
                     ) -> LengthLimit:
    """The :class:`LengthLimit` a codec saved with :meth:`LengthLimit.state`; a checkpoint
    written before codecs kept one has neither key and gets ``default`` with ``"error"``."""
    max_tokens, policy = LIMIT_KEYS
    return LengthLimit(state.get(max_tokens, default), state.get(policy, "error"), unit,
                       truncatable)


class BoundedCodec(TextCodec):
    """A text codec whose examples are bounded by ``limit`` (a :class:`LengthLimit`, set by the
    subclass's constructor and checked in its :meth:`read`): :meth:`parse_numbered` warns once
    with the count of the raw examples it cut."""

    limit: LengthLimit

    def parse_numbered(self, lines: Iterable[str], source: str = "<input>"
                       ) -> tuple[list[int], list]:
        numbered = super().parse_numbered(lines, source)
        self.limit.warn(source)
        return numbered
