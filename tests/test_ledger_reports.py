"""The committed reports are what the committed ledger gives: regenerating every report from
``reports/results`` alone (``--cached-only``) writes the committed text, byte for byte (run
``make reports`` after filing new results), and the verdicts the code computes from the
committed ledger are the committed ``verdicts.json``: a change of code or of a claim that flips
a verdict while the ledger stays the same fails here (:class:`VerdictDrift`) until it is
accepted (``make reports ACCEPT_VERDICTS=1``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lit_structattn.reproduce.claims import CONTRADICTED, REVERSED
from lit_structattn.reproduce.ledger import (
    VERDICTS_FILE,
    VerdictDrift,
    ledger_folders,
    ledger_report,
    write_ledger_reports,
)
from lit_structattn.reproduce.tables import TABLES

REPORTS = Path(__file__).resolve().parents[1] / "reports"  # the repository's
LEDGER = REPORTS / "results"


@pytest.mark.skipif(not LEDGER.is_dir(), reason="no ledger in this checkout")
def test_committed_reports_and_verdicts_equal_what_the_ledger_writes(tmp_path):
    ledger = tmp_path / "results"  # a copy: write_ledger_reports writes verdicts.json there
    shutil.copytree(LEDGER, ledger)
    written = write_ledger_reports(ledger, tmp_path / "reports")  # VerdictDrift: see above
    assert written, "the ledger holds no table"
    stale = [path.name for path in written
             if not (REPORTS / path.name).is_file()
             or (REPORTS / path.name).read_text() != path.read_text()]
    assert not stale, f"reports that differ from the ledger (run `make reports`): {stale}"
    verdicts = sorted(path.relative_to(ledger) for path in ledger.glob(f"*/*/{VERDICTS_FILE}"))
    assert len(verdicts) == len(written)
    stale = [str(path) for path in verdicts if not (LEDGER / path).is_file()
             or (LEDGER / path).read_text() != (ledger / path).read_text()]
    assert not stale, f"verdicts.json that differ from the ledger (run `make reports`): {stale}"


@pytest.mark.skipif(not LEDGER.is_dir(), reason="no ledger in this checkout")
def test_every_claim_the_ledger_contradicts_or_reverses_has_its_evidence():
    """Issue 48's rule: a committed report never leaves a contradicted or reversed claim
    without its bug-or-budget evidence (its own ``evidence``, or the same claim judged in
    another table, ``see``)."""
    bare = [f"{name} ({budget}): {found.claim.name}: {found.verdict}"
            for name, budget in ledger_folders(LEDGER)
            for found in ledger_report(TABLES[name], budget, LEDGER).claims
            if found.verdict in (CONTRADICTED, REVERSED)
            and not (found.claim.evidence or found.claim.see)]
    assert not bare, "claims without evidence (add `evidence:` to the claim):\n" + "\n".join(bare)


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


def test_a_verdict_that_changes_without_its_ledger_is_refused(tmp_path):
    """A verdict in verdicts.json of the same ledger digest that differs from the one computed
    now raises VerdictDrift before anything is written, unless accepted; a changed ledger may
    change its verdicts."""
    ledger = tmp_path / "results"
    shutil.copytree(LEDGER / "tree_transduction", ledger / "tree_transduction")
    write_ledger_reports(ledger, tmp_path / "first")
    record_file = ledger / "tree_transduction" / "cpu" / VERDICTS_FILE
    record = json.loads(record_file.read_text())
    assert record["verdicts"]["structured above simple, depth 3"] == "reproduced"
    # as if an earlier version of the code or of the claim had judged otherwise
    record["verdicts"]["structured above simple, depth 3"] = "contradicted"
    record["verdicts"]["a claim since removed"] = "reproduced"
    record_file.write_text(json.dumps(record))
    with pytest.raises(VerdictDrift) as error:
        write_ledger_reports(ledger, tmp_path / "second")
    assert str(error.value).endswith(
        "\n  tree_transduction (cpu), structured above simple, depth 3: contradicted -> "
        "reproduced")
    assert not (tmp_path / "second").exists()
    write_ledger_reports(ledger, tmp_path / "second", accept_verdict_changes=True)
    assert json.loads(record_file.read_text())["verdicts"] == {
        f"structured above simple, depth {d}": "reproduced" for d in (3, 4, 5)}
    # a new result changes the digest: its verdicts are new, not drift
    record["ledger"] = json.loads(record_file.read_text())["ledger"]
    record_file.write_text(json.dumps(record))
    result = ledger / "tree_transduction" / "cpu" / "simple" / "seed0.json"
    result.write_text(json.dumps({**json.loads(result.read_text()), "wall_seconds": 1.0}))
    write_ledger_reports(ledger, tmp_path / "third")
    assert json.loads(record_file.read_text())["ledger"] != record["ledger"]


def test_the_digest_covers_the_runs_a_report_reads_in_other_folders(tmp_path):
    """A report's verdicts read the runs it shares with another table (``same_run_as``) and the
    tables its claims cite (``see``): a result filed there changes its digest too."""
    ledger = tmp_path / "results"
    for name in ("sparse_constrained_nmt", "sparse_constrained_nmt_13_epochs",
                 "easy_first_ablation", "easy_first_ner"):
        shutil.copytree(LEDGER / name, ledger / name)
    write_ledger_reports(ledger, tmp_path / "first")

    def digest(name):
        return json.loads((ledger / name / "cpu" / VERDICTS_FILE).read_text())["ledger"]

    before = {name: digest(name) for name in ("sparse_constrained_nmt", "easy_first_ablation")}
    for cited in (ledger / "sparse_constrained_nmt_13_epochs" / "cpu" / "softmax" / "seed0.json",
                  ledger / "easy_first_ner" / "cpu" / "nef_crf_f__n_5__en" / "seed0.json"):
        cited.write_text(json.dumps({**json.loads(cited.read_text()), "wall_seconds": 1.0}))
    write_ledger_reports(ledger, tmp_path / "second")
    assert all(digest(name) != old for name, old in before.items())
