"""The committed reports are what the committed ledger gives: regenerating every report from
``reports/results`` alone (``--cached-only``) writes the committed text, byte for byte (run
``make reports`` after filing new results)."""

from __future__ import annotations

import pytest

from lit_structattn.reproduce.runner import REPORTS, write_ledger_reports

LEDGER = REPORTS / "results"


@pytest.mark.skipif(not LEDGER.is_dir(), reason="no ledger beside the package")
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
