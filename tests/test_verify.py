"""``structattn reproduce TABLE --verify ROW``: one seed re-run with today's code, judged against
the spread of the row's recorded runs (reproduce/verify.py)."""

from __future__ import annotations

import json

import pytest

from lit_structattn.reproduce import run_table
from lit_structattn.reproduce.runner import main
from lit_structattn.reproduce.tables import TABLES
from lit_structattn.reproduce.verify import compare

TREE = TABLES["tree_transduction"]


def _result(seed, **metrics):
    return {"seed": seed, "metrics": metrics}


def test_compare_judges_each_metric_against_two_standard_deviations():
    recorded = [_result(0, **{"test/ltf_d2": 0.50}), _result(1, **{"test/ltf_d2": 0.60}),
                _result(2, **{"test/ltf_d2": 0.55})]  # mean 55, std 5 (in %)
    inside, = compare(TREE, 0, _result(0, **{"test/ltf_d2": 0.64}), recorded)
    assert (inside.mean, inside.std, inside.seeds) == pytest.approx((55.0, 5.0, 3))
    assert inside.value == pytest.approx(64.0) and inside.same_seed == pytest.approx(50.0)
    assert inside.inside is True  # 9 apart, 2 std = 10
    outside, = compare(TREE, 3, _result(3, **{"test/ltf_d2": 0.66}), recorded)
    assert outside.inside is False and outside.same_seed is None  # 11 apart; seed 3 unrecorded
    lonely, = compare(TREE, 0, _result(0, **{"test/ltf_d2": 0.1}), recorded[:1])
    assert lonely.inside is None and lonely.std is None  # one recorded seed: no spread
    assert compare(TREE, 0, _result(0, **{"test/other": 1.0}), recorded) == []


def test_verify_reruns_a_seed_and_exits_1_outside_the_spread(tmp_path, capsys):
    ledger = tmp_path / "ledger"
    run_table("tree_transduction", "ci", seeds=1, rows=["simple"], root=tmp_path / "runs",
              report=tmp_path / "report.md", results=ledger)
    seed0 = ledger / "tree_transduction" / "ci" / "simple" / "seed0.json"
    recorded = json.loads(seed0.read_text())
    # a second recorded seed a hair away: the same seed re-run (deterministic on the CPU) lands
    # inside this narrow spread
    nudged = {key: value + 1e-3 for key, value in recorded["metrics"].items()}
    (seed0.parent / "seed1.json").write_text(json.dumps({**recorded, "seed": 1,
                                                         "metrics": nudged}))
    arguments = ["tree_transduction", "--budget", "ci", "--verify", "simple",
                 "--root", str(tmp_path / "verify_root"), "--results", str(ledger)]
    main(arguments)
    out = capsys.readouterr().out
    assert "Every metric with a recorded spread lands inside it." in out
    assert "| depth 2 | " in out and "over 2 | " in out
    # recorded runs far from what today's code gives: outside, exit status 1
    for name in ("seed0.json", "seed1.json"):
        entry = json.loads((seed0.parent / name).read_text())
        entry["metrics"] = {key: value + 0.3 for key, value in entry["metrics"].items()}
        (seed0.parent / name).write_text(json.dumps(entry))
    with pytest.raises(SystemExit) as stopped:
        main(arguments)
    assert stopped.value.code == 1
    assert "Outside the recorded spread:" in capsys.readouterr().out
    assert sorted(p.name for p in seed0.parent.iterdir()) == ["seed0.json", "seed1.json"]
