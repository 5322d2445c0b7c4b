"""The committed reports are what the committed ledger gives: regenerating every report from
``reports/results`` alone (``--cached-only``) writes the committed text, byte for byte (run
``make reports`` after filing new results)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lit_structattn.reproduce.ledger import write_ledger_reports

REPORTS = Path(__file__).resolve().parents[1] / "reports"  # the repository's
LEDGER = REPORTS / "results"


@pytest.mark.skipif(not LEDGER.is_dir(), reason="no ledger in this checkout")
def test_committed_reports_equal_what_the_ledger_writes(tmp_path):
    written = write_ledger_reports(LEDGER, tmp_path)
    assert written, "the ledger holds no table"
    stale = [path.name for path in written
             if not (REPORTS / path.name).is_file()
             or (REPORTS / path.name).read_text() != path.read_text()]
    assert not stale, f"reports that differ from the ledger (run `make reports`): {stale}"


def test_a_changed_ledger_shows(tmp_path):
    """The comparison can fail: a result filed without its report makes the report stale."""
    import json
    import shutil

    ledger = tmp_path / "results"
    shutil.copytree(LEDGER / "tree_transduction", ledger / "tree_transduction")
    before = write_ledger_reports(ledger, tmp_path / "before")
    (result,) = [p for p in (ledger / "tree_transduction" / "cpu").rglob("seed0.json")
                 if p.parent.name == "simple"]
    changed = json.loads(result.read_text())
    changed["metrics"] = {key: value / 2 for key, value in changed["metrics"].items()}
    result.write_text(json.dumps(changed))
    after = write_ledger_reports(ledger, tmp_path / "after")
    assert [p.name for p in before] == [p.name for p in after]
    assert any(b.read_text() != a.read_text() for b, a in zip(before, after, strict=True))


def test_the_reports_go_to_the_folder_given(tmp_path):
    """The ledger and the reports folder are arguments: a ledger in ``tmp_path`` writes its
    reports into the folder given, and the repository's reports are left as they were."""
    import shutil

    ledger, reports = tmp_path / "results", tmp_path / "reports"
    shutil.copytree(LEDGER / "tree_transduction", ledger / "tree_transduction")
    committed = {path.name: path.stat().st_mtime_ns for path in REPORTS.glob("*.md")}
    written = write_ledger_reports(ledger, reports)
    assert written == [reports / "tree_transduction.md", reports / "tree_transduction_demo.md"]
    assert sorted(reports.iterdir()) == written
    assert {path.name: path.stat().st_mtime_ns for path in REPORTS.glob("*.md")} == committed
