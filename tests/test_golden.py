"""Same math, proven (issue 30, item 6): every model family, driven through its config stack in
``configs/`` only, gives the recorded losses of its first 20 training steps and its validation
metrics (``tests/golden/<case>.json``, recorded by ``python -m tests.golden --record``) to 1e-6
relative. The cases and how they are run: ``tests/golden.py``."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.golden import CASES, STEPS, compiled_solvers, golden_path, run_case

REL, ABS = 1e-6, 1e-9

RERECORD = ("If the change is intended, re-record with `OMP_NUM_THREADS=1 python -m tests.golden "
            "--record {name}` and explain the change in the commit message.")


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=ABS) or (math.isnan(a) and math.isnan(b))


@pytest.fixture
def threads_restored():
    before = torch.get_num_threads()
    yield
    assert torch.get_num_threads() == before, "run_case left torch's thread count changed"


@pytest.mark.parametrize("name", list(CASES))
def test_same_values_as_recorded(name, threads_restored):
    path = golden_path(name)
    assert path.is_file(), f"{name}: no golden values at {path}; " + RERECORD.format(name=name)
    golden = json.loads(path.read_text())
    if golden["compiled_solvers"] != compiled_solvers():
        pytest.skip(f"{name} was recorded with compiled_solvers={golden['compiled_solvers']}, "
                    f"this run has {compiled_solvers()} (numba / STRUCTATTN_COMPILED)")
    result = run_case(name)
    hint = RERECORD.format(name=name)

    losses, expected = result["losses"], golden["losses"]
    assert len(expected) == STEPS
    assert len(losses) == len(expected), (
        f"{name}: {len(losses)} training steps ran, {len(expected)} recorded. {hint}")
    for step, (got, want) in enumerate(zip(losses, expected, strict=True)):
        assert close(got, want), (
            f"{name}: the loss of training step {step} (0-based) differs: got {got!r}, recorded "
            f"{want!r} (relative difference {abs(got - want) / max(abs(want), 1e-300):.3g}; "
            f"tolerance {REL} relative, {ABS} absolute). {hint}")

    for key, want in golden["metric"].items():
        assert key in result["metric"], (
            f"{name}: validation metric {key!r} is no longer logged (got "
            f"{sorted(result['metric'])}). {hint}")
        got = result["metric"][key]
        assert close(got, want), (
            f"{name}: validation metric {key!r} after {STEPS} steps differs: got {got!r}, "
            f"recorded {want!r}. {hint}")


def test_every_case_is_recorded_and_every_record_is_a_case():
    recorded = {path.stem for path in golden_path("x").parent.glob("*.json")}
    assert recorded == set(CASES)
