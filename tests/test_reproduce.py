"""The reproduction runner end to end at the ``ci`` budget: report, caching, bad names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lit_structattn.reproduce import run_table


def test_ci_run_writes_report_and_resumes(tmp_path):
    report, ledger = tmp_path / "report.md", tmp_path / "ledger"
    run_table("tree_transduction", "ci", seeds=1, rows=["simple"], root=tmp_path, report=report,
              results=ledger)
    text = report.read_text()
    assert "| simple |" in text and "(paper 87.4)" in text and "**Budget `ci`:**" in text
    assert "| no attention |" not in text  # only the selected row
    assert "not run here:** no attention; structured." in text
    result = next(tmp_path.rglob("result.json"))
    assert 0 <= json.loads(result.read_text())["metrics"]["test/ltf_d2"] <= 1
    assert "wall_seconds_before_resume" not in json.loads(result.read_text())  # not resumed
    assert list(tmp_path.rglob("events.out.tfevents.*"))  # TensorBoard logs of the run
    stamp = result.stat().st_mtime_ns
    run_table("tree_transduction", "ci", seeds=1, rows=["simple"], root=tmp_path, report=report)
    assert result.stat().st_mtime_ns == stamp  # a finished run is not repeated
    # --cached-only trains nothing: seed 1 and the other rows are absent, so they are not shown
    run_table("tree_transduction", "ci", seeds=2, root=tmp_path, report=report, cached_only=True)
    text = report.read_text()
    assert "--seeds 2 --cached-only" in text and "| simple |" in text
    assert "| simple |" in text and " | 1 | " in text.split("| simple |")[1].splitlines()[0]
    assert "not run here:** no attention; structured." in text
    assert len(list(tmp_path.rglob("result.json"))) == 1
    # the ledger keeps the result where the run folders are gone (e.g. on another machine)
    filed = ledger / "tree_transduction" / "ci" / "simple" / "seed0.json"
    assert json.loads(filed.read_text()) == json.loads(result.read_text())
    run_table("tree_transduction", "ci", seeds=1, root=tmp_path / "gone", report=report,
              cached_only=True, results=ledger)
    assert "| simple |" in report.read_text()
    # a run interrupted after its last checkpoint continues from it instead of starting over
    result.unlink()
    run_table("tree_transduction", "ci", seeds=1, rows=["simple"], root=tmp_path, report=report)
    resumed = json.loads(result.read_text())
    assert resumed["resumed_from"].endswith("version_0/checkpoints/last.ckpt")
    assert resumed["epochs"] == 1


@pytest.mark.parametrize(("table", "budget", "valid"), [
    ("table9", "ci", "valid: babi_qa, easy_first_ablation, easy_first_ner"),
    ("tree_transduction", "gpu", "valid: ci, demo, cpu, paper"),
])
def test_unknown_table_or_budget(table, budget, valid, tmp_path):
    with pytest.raises(ValueError, match=valid):
        run_table(table, budget, seeds=1, root=tmp_path)


def test_an_empty_seed_range_is_refused_before_anything_runs(tmp_path):
    """``--first-seed 1 --seeds 1`` names no seed (the seeds are first_seed .. seeds - 1)."""
    with pytest.raises(ValueError, match="--first-seed 1 is not below --seeds 1"):
        run_table("tree_transduction", "ci", seeds=1, first_seed=1, root=tmp_path)
    assert not any(tmp_path.iterdir())


def test_every_row_has_its_configs_and_shared_rows_resolve(tmp_path):
    """Every row's config files exist; a ``same_run_as`` row reads and writes the other table's
    run folder, and refuses to when the two configurations differ."""
    from dataclasses import replace

    from lit_structattn.reproduce.ledger import run_dir
    from lit_structattn.reproduce.tables import TABLES

    for table in TABLES.values():
        for row in table.rows:
            assert all(config.is_file() for config in row.configs), (table.name, row.name)
    ablation = TABLES["easy_first_ablation"]
    shared = ablation.rows[0]
    assert run_dir(ablation, shared, "cpu", 0, tmp_path) == (
        tmp_path / "easy_first_ner" / "cpu" / "nef_crf_f__n_5__en" / "seed0")
    own = ablation.rows[1]
    assert run_dir(ablation, own, "cpu", 0, tmp_path).parent.parent.parent.name == ablation.name
    with pytest.raises(ValueError, match="configurations differ"):
        run_dir(ablation, replace(shared, overrides=("--trainer.max_epochs", "9")), "cpu", 0,
                tmp_path)


def test_resumed_run_keeps_the_best_checkpoints_of_its_first_part(tmp_path):
    """A run interrupted with epochs left continues writing checkpoints into the folder of the
    checkpoint it resumes from, so the best epoch before the interruption still competes in the
    model selection (Lightning forgets the best checkpoints when their folder changes)."""
    import warnings
    from dataclasses import replace

    from lit_structattn.reproduce.ledger import run_dir
    from lit_structattn.reproduce.runner import run_one
    from lit_structattn.reproduce.tables import TABLES

    table = TABLES["tree_transduction"]
    row = next(r for r in table.rows if r.name == "simple")
    run_one(table, row, "ci", 0, tmp_path)
    out = run_dir(table, row, "ci", 0, tmp_path)
    (out / "result.json").unlink()  # as if interrupted after its first epoch
    args, *rest = table.budgets["ci"]
    longer = replace(table, budgets={"ci": ((*args, "--trainer.max_epochs", "2"), *rest)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_one(longer, row, "ci", 0, tmp_path)
    assert result["epochs"] == 2
    assert result["resumed_from"].endswith("version_0/checkpoints/last.ckpt")
    # the wall time includes the first part, as its checkpoint recorded it
    assert 0 < result["wall_seconds_before_resume"] < result["wall_seconds"]
    assert not [w for w in caught if "dirpath has changed" in str(w.message)]
    assert not list(out.glob("lightning_logs/version_1/checkpoints"))
    assert list(out.glob("lightning_logs/version_0/checkpoints/*epoch=1*.ckpt"))


def test_rows_of_an_earlier_report_are_shown_until_rerun_with_as_many_seeds(tmp_path):
    """A ledger's ``earlier.json`` row (its per-run results lost) fills the report, marked, and
    gives way to the row's runs once they have at least its seeds; averages use both."""
    from dataclasses import replace

    from lit_structattn.reproduce.ledger import earlier_report
    from lit_structattn.reproduce.report import render
    from lit_structattn.reproduce.tables import TABLES

    table = TABLES["babi_qa"]  # selects on validation and averages a group
    first, second = table.rows[0], table.rows[3]  # two tasks of MemN2N
    table = replace(table, rows=(first, second))
    keys = [key for key, _ in table.metrics]
    folder = tmp_path / table.name / "cpu"
    folder.mkdir(parents=True)
    (folder / "earlier.json").write_text(json.dumps({
        "source": "the report of commit abc", "rows": {
            first.name: {"seeds": 2, "wall_minutes": 3.0,
                         "cells": {keys[0]: [70.0, 1.0, 72.0]}},
            second.name: {"seeds": 1, "wall_minutes": 1.0, "resumed": True,
                          "cells": {keys[0]: [10.0, 0.0, 10.0]}}}}))
    earlier = earlier_report(table, "cpu", tmp_path)
    assert earlier.rows[second.name].cells[keys[0]] == (10.0, None, 10.0)  # one seed: no std

    def run(value, seed):
        return {"metrics": {keys[0]: value}, "wall_seconds": 60.0, "seed": seed,
                "validation": {table.select_by: value}}

    text = render(table, "cpu", range(2), {first.name: [run(0.5, 0)],
                                           second.name: [run(0.2, 0), run(0.4, 1)]},
                  earlier=earlier)
    first_line = next(line for line in text.splitlines() if line.startswith(f"| {first.name} |"))
    second_line = next(line for line in text.splitlines()
                       if line.startswith(f"| {second.name} |"))
    assert "72.0 / 70.0 ± 1.0" in first_line and "| 2† | 3.0 min |" in first_line
    assert "40.0 / 30.0 ± 14.1" in second_line and "| 2 | 1.0 min |" in second_line
    assert "the report of commit abc" in text and "\\* a run" not in text
    # each run of a row shown from several runs is listed; a row of the earlier report is not
    assert f"- {second.name}, seeds 0, 1: 20.0, 40.0" in text
    assert f"- {first.name}, seeds" not in text
    group_line = next(line for line in text.splitlines() if line.startswith("| average,"))
    assert "56.0 / 50.0" in group_line  # (72 + 40) / 2 and (70 + 30) / 2
    assert earlier_report(table, "ci", tmp_path).rows == {}
    broken = tmp_path / table.name / "demo" / "earlier.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"rows": {}}')  # no "source"
    with pytest.raises(ValueError, match=f"{broken}: not an earlier-report record"):
        earlier_report(table, "demo", tmp_path)


def test_reruns_that_differ_are_noted_and_a_superseded_report_shows_no_row(tmp_path):
    """A row run again whose mean lies further from the earlier report's than the seed spread
    gets a note with both numbers; once the file is ``superseded.json`` its rows are never
    shown, even with more seeds than the runs, but the notes stay."""
    from dataclasses import replace

    from lit_structattn.reproduce.ledger import earlier_report
    from lit_structattn.reproduce.report import render
    from lit_structattn.reproduce.tables import TABLES

    table = TABLES["babi_qa"]
    first, second = table.rows[0], table.rows[3]
    table = replace(table, rows=(first, second))
    key, label = table.metrics[0]
    folder = tmp_path / table.name / "cpu"
    folder.mkdir(parents=True)
    record = {"source": "the report of commit abc", "rows": {
        first.name: {"seeds": 3, "wall_minutes": 3.0, "cells": {key: [70.0, 1.0, 72.0]}},
        second.name: {"seeds": 3, "wall_minutes": 1.0, "cells": {key: [30.0, 10.0, 40.0]}}}}
    (folder / "earlier.json").write_text(json.dumps(record))

    def run(value, seed):
        return {"metrics": {key: value}, "wall_seconds": 60.0, "seed": seed,
                "validation": {table.select_by: value}}

    runs = {first.name: [run(0.5, 0), run(0.52, 1)], second.name: [run(0.2, 0), run(0.4, 1)]}
    shown = render(table, "cpu", range(2), runs, earlier=earlier_report(table, "cpu", tmp_path))
    assert "| 3† |" in shown  # 3 earlier seeds beat 2 runs
    assert "Re-runs that differ" not in shown  # the earlier rows are the ones shown
    (folder / "earlier.json").rename(folder / "superseded.json")
    superseded = earlier_report(table, "cpu", tmp_path)
    assert superseded.superseded
    text = render(table, "cpu", range(2), runs, earlier=superseded)
    assert "†" not in text and "| 2 |" in text
    assert (f"- {first.name}, {label}: 51.0 ± 1.4 over 2 seeds here, 70.0 ± 1.0 over 3 in the "
            "earlier report: 19.0 apart, more than the seed spread (1.4)") in text
    assert f"- {second.name}, {label}:" not in text  # 30 vs 30: within the spread


def test_differences_are_judged_at_the_earlier_reports_printed_precision():
    """The earlier report printed one decimal: a re-run printed 94.9 against 94.8 with a spread
    printed 0.1 is within it (not '0.1 apart, more than the seed spread (0.1)'), while 95.0 is
    further than that."""
    from dataclasses import replace

    from lit_structattn.reproduce.report import (
        EarlierReport,
        RowSummary,
        _difference_lines,
        differences,
    )
    from lit_structattn.reproduce.tables import TABLES

    table = TABLES["easy_first_pos"]
    table = replace(table, rows=table.rows[:1])
    name, (key, label) = table.rows[0].name, table.metrics[0]
    earlier = EarlierReport("the report of commit abc", {
        name: RowSummary({key: (94.8, 0.1, None)}, 3, 10.0, False, earlier=True)}, (), True)

    def noted(mean, std):
        return differences(table, {name: RowSummary({key: (mean, std, None)}, 3, 10.0, False)},
                           earlier)

    assert noted(94.896, 0.0808) == ()  # printed 94.9 ± 0.1 against 94.8 ± 0.1
    assert noted(94.93, 0.05) == ()  # 0.13 apart unrounded: the old rule noted it
    (found,) = noted(94.96, 0.04)
    assert (found.row, found.label, found.spread) == (name, label, 0.1)
    assert found.apart == pytest.approx(0.2)  # 95.0 - 94.8, as printed
    lines = _difference_lines((found,), earlier.source)
    assert (f"- {name}, {label}: 95.0 ± 0.0 over 3 seeds here, 94.8 ± 0.1 over 3 in the "
            "earlier report: 0.2 apart, more than the seed spread (0.1)") in lines


def test_the_report_prints_only_the_provenance_its_runs_recorded():
    """Per field, the values the runs recorded with their counts, and the runs that recorded
    none: never this process's torch version or machine."""
    from dataclasses import replace

    from lit_structattn.reproduce.report import render
    from lit_structattn.reproduce.tables import TABLES

    table = TABLES["babi_qa"]
    table = replace(table, rows=table.rows[:1])
    key, name = table.metrics[0][0], table.rows[0].name
    recorded = {"finished": "2026-11-27", "commit": "0123456789abcdef" * 2 + "01234567",
                "dirty": False, "torch": "2.13.0+cpu", "lightning": "2.5.5",
                "python": "3.11.7", "threads": 1, "device": "cpu"}

    def run(seed, **fields):
        return {"metrics": {key: 0.5}, "wall_seconds": 60.0, "seed": seed, **fields}

    text = render(table, "cpu", range(4), {name: [
        run(0), run(1, **recorded), run(2, **{**recorded, "dirty": True, "threads": 2}),
        run(3, **{**recorded, "commit": None, "dirty": None, "version": "0.4.0"})]})
    block = text.split("**Provenance, as its 4 runs recorded it:**\n\n")[1].split("\n\n")[0]
    assert block.splitlines() == [
        "- finished: 2026-11-27 (3 runs); not recorded (1 run)",
        "- commit: 0123456789 (1 run); 0123456789 (uncommitted changes) (1 run); installed "
        "version 0.4.0 (1 run); not recorded (1 run)",
        "- torch: 2.13.0+cpu (3 runs); not recorded (1 run)",
        "- lightning: 2.5.5 (3 runs); not recorded (1 run)",
        "- python: 3.11.7 (3 runs); not recorded (1 run)",
        "- threads: 1 (2 runs); 2 (1 run); not recorded (1 run)",
        "- device: cpu (3 runs); not recorded (1 run)"]
    unrecorded = render(table, "cpu", range(1), {name: [run(0)]})
    assert "- torch: not recorded (1 run)" in unrecorded
    import torch
    assert torch.__version__ not in unrecorded


def test_wall_time_is_marked_partial_only_for_a_resumption_without_a_recorded_clock():
    from lit_structattn.reproduce.report import summarize
    from lit_structattn.reproduce.tables import TABLES

    table = TABLES["tree_transduction"]
    key = table.metrics[0][0]
    fresh = {"metrics": {key: 0.5}, "wall_seconds": 60.0}
    clocked = {**fresh, "resumed_from": "last.ckpt", "wall_seconds_before_resume": 30.0}
    unclocked = {**fresh, "resumed_from": "last.ckpt"}
    assert not summarize(table, [fresh, clocked]).partial_wall
    assert summarize(table, [fresh, unclocked]).partial_wall


def test_cli_writes_to_runs_by_default_and_to_the_ledger_only_when_asked(
        tmp_path, monkeypatch, capsys):
    """``structattn reproduce`` leaves the committed reports alone unless given ``--ledger``,
    which writes to ``--reports`` (default: ``reports`` in the current folder) and refuses a
    folder that is not there; a budget a table lacks is refused by name; ``--help`` says what
    each budget costs."""
    from lit_structattn.reproduce import runner

    reports = tmp_path / "reports"
    reports.mkdir()
    monkeypatch.chdir(tmp_path)
    cached = ["tree_transduction", "--budget", "ci", "--seeds", "1", "--cached-only"]
    runner.main(cached)
    assert (tmp_path / "runs" / "reproduce" / "tree_transduction.md").is_file()
    assert list(reports.iterdir()) == []
    runner.main([*cached, "--ledger"])
    assert [p.name for p in reports.iterdir()] == ["tree_transduction_ci.md"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    runner.main([*cached, "--ledger", "--budget", "cpu", "--reports", str(elsewhere)])
    assert [p.name for p in elsewhere.iterdir()] == ["tree_transduction.md"]  # beside the paper's
    assert not (reports / "tree_transduction.md").exists()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        runner.main([*cached, "--ledger", "--reports", str(tmp_path / "missing")])
    assert f"--ledger: no reports folder {tmp_path / 'missing'}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown budget of nli 'demo'; valid: ci, cpu, paper"):
        runner.main(["nli", "--budget", "demo", "--root", str(tmp_path)])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        runner.main(["--help"])
    shown = capsys.readouterr().out
    assert "seconds per row" in shown and "2-core CPU" in shown and "for a GPU" in shown
    assert "--ledger" in shown and "--reports" in shown and "runs/reproduce" in shown


def test_an_installed_package_looks_for_no_reports_outside_itself(tmp_path):
    """Installed as a wheel (the package alone in site-packages, here beside a ``reports``
    folder where ``Path(__file__).parents[2]`` would find one), ``--ledger`` takes the reports
    folder from ``--reports`` or the current folder, never from beside the package."""
    import shutil
    import subprocess
    import sys

    import lit_structattn

    site = tmp_path / "site"
    shutil.copytree(Path(lit_structattn.__file__).parent, site / "lit_structattn",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "reports").mkdir()  # not the package's: it must stay empty
    work, reports = tmp_path / "work", tmp_path / "mine"
    work.mkdir()
    reports.mkdir()
    code = f"""
import lit_structattn
from lit_structattn.reproduce import main
assert lit_structattn.__file__.startswith({str(site)!r}), lit_structattn.__file__
cached = ["tree_transduction", "--budget", "ci", "--seeds", "1", "--cached-only", "--ledger"]
try:
    main(cached)
except SystemExit as exit:
    print("refused", exit.code)
main([*cached, "--reports", {str(reports)!r}])
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(site)}, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "refused 2" in run.stdout and "--ledger: no reports folder reports" in run.stderr
    assert [p.name for p in reports.iterdir()] == ["tree_transduction_ci.md"]
    assert list((site / "reports").iterdir()) == [] and list(work.iterdir()) == []


def test_the_tree_report_judges_the_papers_claims():
    """The tree-transduction table states three comparisons (Table 2); its report opens with
    their verdicts, computed from every seed."""
    from lit_structattn.reproduce.report import render
    from lit_structattn.reproduce.tables import TABLES

    table = TABLES["tree_transduction"]

    def runs(*per_seed: tuple[float, float, float]) -> list[dict]:
        return [{"seed": seed, "wall_seconds": 60.0,
                 "metrics": {f"test/ltf_d{d}": v for d, v in zip((3, 4, 5), values, strict=True)}}
                for seed, values in enumerate(per_seed)]

    held = {"no attention": runs((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
            "structured": runs((0.8, 0.5, 0.2), (0.9, 0.6, 0.3)),
            "simple": runs((0.4, 0.1, 0.05), (0.5, 0.7, 0.1))}
    lines = render(table, "demo", range(2), held).splitlines()
    assert lines[4:7] == [
        "| structured above simple, depth 3 (Table 2) | +37.4 | +40.0 | 7.07 | 2 of 2 | "
        "reproduced (t = 5.7) |",
        "| structured above simple, depth 4 (Table 2) | +41.2 | +15.0 | 30.41 | 1 of 2 | "
        "same sign within spread (t = 0.5) |",
        "| structured above simple, depth 5 (Table 2) | +15.8 | +17.5 | 5.59 | 2 of 2 | "
        "reproduced (t = 3.1) |"]


def test_every_row_parses_at_every_budget(monkeypatch):
    """Every row's config stack with its overrides and each budget's overlay is a valid
    ``structattn fit`` configuration (parsed, nothing built: the run itself is the slow part)."""
    from lit_structattn.reproduce.tables import TABLES
    from lit_structattn.run import lightning_cli

    monkeypatch.setattr(lightning_cli.StructAttnCLI, "instantiate_classes", lambda self: None)
    stacks = {
        (*(a for config in row.configs for a in ("--config", str(config))), *row.overrides,
         *overrides)
        for table in TABLES.values() for row in table.rows
        for overrides, _ in table.budgets.values()
    }
    for args in sorted(stacks):
        lightning_cli.build_cli(list(args), run=False)


def test_trainer_options_override_the_configs_and_are_recorded(tmp_path):
    report = tmp_path / "report.md"
    run_table("tree_transduction", "ci", seeds=1, rows=["simple"], root=tmp_path, report=report,
              trainer={"accelerator": "cpu", "precision": "64-true"})
    result = json.loads(next(tmp_path.rglob("result.json")).read_text())
    assert result["trainer"] == {"accelerator": "cpu", "precision": "64-true"}
    assert result["device"] == "cpu, 64-true"
    assert "--trainer.precision" in result["args"]
    text = report.read_text()
    assert "--seeds 1 --accelerator cpu --precision 64-true`" in text
    assert "- device: cpu, 64-true (1 run)" in text


def test_the_command_takes_the_trainer_options(monkeypatch, tmp_path):
    from lit_structattn.reproduce import runner

    seen, written = {}, tmp_path / "report.md"
    written.write_text("")

    def run_table(*args):
        seen["trainer"] = args[-1]
        return written

    monkeypatch.setattr(runner, "run_table", run_table)
    runner.main(["tree_transduction", "--budget", "ci", "--accelerator", "cuda", "--devices",
                 "2", "--strategy", "ddp"])
    assert seen["trainer"] == {"accelerator": "cuda", "devices": "2", "strategy": "ddp"}
