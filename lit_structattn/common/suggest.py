""""Did you mean" for a misspelt name (an option, a transform, an experiment): the valid names
closest to it by :class:`difflib.SequenceMatcher`'s ratio. Standard library only, so that the
``structattn`` command words its errors without importing torch."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

#: How alike (difflib's ratio, 0 to 1) a valid name must be to be suggested: ``sparsmax`` for
#: ``sparsemax`` (0.94) and ``--trainer.max_epoch`` for ``--trainer.max_epochs`` (0.97) are;
#: ``hardmax`` for ``sparsemax`` (0.63) is not.
CUTOFF = 0.75


def did_you_mean(value: object, valid: Iterable[object], show: Callable[[object], str] = repr
                 ) -> str:
    """``"; did you mean 'x'?"`` for the name of ``valid`` closest to ``value``, written by
    ``show``; ``""`` when none is close."""
    names = {str(name): name for name in valid}
    close = difflib.get_close_matches(str(value), list(names), n=1, cutoff=CUTOFF)
    return f"; did you mean {show(names[close[0]])}?" if close else ""
