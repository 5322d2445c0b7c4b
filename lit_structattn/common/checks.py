"""The one check behind every "unknown X; valid: ..." error of the project (models, tasks and
DataModules), so that a wrong name in a config always lists the valid choices the same way."""

from __future__ import annotations

from collections.abc import Iterable


def check_choice(name: str, value: object, valid: Iterable[object]) -> object:
    """``value`` if it is one of ``valid``.

    Raises:
        ValueError: ``"unknown {name} {value!r}; valid: a, b, c"`` otherwise.
    """
    valid = tuple(valid)
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(map(str, valid))}")
    return value
