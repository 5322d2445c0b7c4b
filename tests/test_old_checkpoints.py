"""A user's trained models survive a refactor (issue 46, item 7): a checkpoint of each family
saved by the code before the application floor was reorganised (``tests/old_checkpoints/``,
written by ``python -m tests.old_checkpoints --record`` at that time and never re-recorded)
still loads with ``load_task`` and gives the records it gave then."""

from __future__ import annotations

import json
import math

import pytest

from lit_structattn.tasks import load_task
from tests.old_checkpoints import RAW, checkpoint_path, records_path

TOLERANCE = 1e-4  # the records round attention to 5 digits
#: keys a record gained after these fixtures were recorded (issue 47: every record carries its
#: input's line number); a recorded record without one is compared without it
NEWER_KEYS = {"line"}


def same(got, want, where: str = "") -> None:
    """``got`` equals ``want`` (JSON values), floats to :data:`TOLERANCE`."""
    if isinstance(want, float) or isinstance(got, float):
        assert math.isclose(got, want, abs_tol=TOLERANCE), f"{where}: {got} != {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {got!r} != {want!r}"
        got = {key: value for key, value in got.items() if key in want or key not in NEWER_KEYS}
        assert got.keys() == want.keys(), (
            f"{where}: keys {sorted(got)} != {sorted(want)}")
        for key in want:
            same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got} != {want}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            same(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("name", list(RAW))
def test_old_checkpoint_loads_and_predicts_the_same(name):
    assert checkpoint_path(name).is_file(), f"missing fixture {checkpoint_path(name)}"
    recorded = json.loads(records_path(name).read_text())
    task = load_task(checkpoint_path(name))
    same(task.predict_text(recorded["inputs"]), recorded["records"], name)


def test_the_comparison_can_fail():
    same({"a": [1, 0.5]}, {"a": [1, 0.50001]})
    same({"line": 1, "a": [1, 0.5]}, {"a": [1, 0.5]})  # a key newer than the recording
    for got in ({"a": [1, 0.6]}, {"a": [2, 0.5]}, {"b": [1, 0.5]}, {"a": [1]},
                {"line": 1, "a": [1, 0.5], "b": 2}):
        with pytest.raises(AssertionError):
            same(got, {"a": [1, 0.5]})
    with pytest.raises(AssertionError):
        same({"line": 2, "a": 1}, {"line": 1, "a": 1})  # a recorded line is compared
