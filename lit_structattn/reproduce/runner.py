"""Runs a table's rows over seeds through LightningCLI, in process, one run after another.

The tables come from ``configs/tables/*.yaml`` (:mod:`.tables`): a run's arguments are the
row's config files, the row's overlay, the budget's overlay (both as ``--a.b value``
overrides), then the seed and the run folder.

Each finished run writes ``runs/reproduce/<table>/<budget>/<row>/seed<k>/result.json``; a run
whose result exists is not repeated, so an interrupted reproduction resumes where it stopped
(and seeds can be spread over several processes with ``--first-seed``); an interrupted run
continues from its newest ``last.ckpt`` when its configuration saves one. A run holds a lock
beside its folder (``<row>/.seed<k>.lock``) while it runs: a second reproduction on the same
root waits for it and takes its result instead of training it again. TensorBoard logs and
checkpoints of a run go to the same folder.

With ``--ledger`` (maintainers) the CLI also files every result in the results ledger,
``reports/results/<table>/<budget>/<row>/seed<k>.json``, which is committed beside the
reports, and writes the report to ``reports/<table>.md`` (``<table>_<budget>.md`` for budgets
other than ``cpu``): a report can be regenerated (and finished runs are skipped) on a machine
whose run folders are gone. A ledger's
``<table>/<budget>/earlier.json`` holds rows of an earlier report whose per-run results were
lost, as that report printed them; the report shows such a row until as many seeds are run again,
and notes where a re-run differs from it by more than the seed spread. Once every row of it is run
again, the file is renamed ``superseded.json``: no row is shown from it, only those notes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..common.checks import check_choice
from ..run.folders import folder_lock
from .tables import BUDGETS, TABLES, Row, Table

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")


def _row_folder(table: Table, row: Row, budget: str, base: Path) -> Path:
    """``base/<table>/<budget>/<row>``, of the other table for a ``same_run_as`` row."""
    if row.same_run_as is not None:
        table, row = _shared_row(table, row)
    return base / table.name / budget / _slug(row.name)


def _run_dir(table: Table, row: Row, budget: str, seed: int, root: Path) -> Path:
    return _row_folder(table, row, budget, root) / f"seed{seed}"


def _shared_row(table: Table, row: Row) -> tuple[Table, Row]:
    """The other table's row whose runs ``row`` of ``table`` shares; ``ValueError`` unless
    their configurations and budgets are the same."""
    other_table = TABLES[row.same_run_as[0]]
    other = next(r for r in other_table.rows if r.name == row.same_run_as[1])

    def setup(t: Table, r: Row) -> tuple:
        return r.configs, r.overrides, r.test_of, {b: o for b, (o, _) in t.budgets.items()}

    if setup(table, row) != setup(other_table, other):
        raise ValueError(f"row {row.name!r} of {table.name} shares the runs of "
                         f"{other_table.name}: {other.name!r} but their configurations differ")
    return other_table, other


def _ledger_file(table: Table, row: Row, budget: str, seed: int, results: Path) -> Path:
    return _row_folder(table, row, budget, results) / f"seed{seed}.json"


def cached_result(
    table: Table, row: Row, budget: str, seed: int, root: Path, results: Path | None = None,
) -> dict | None:
    """The stored result of one finished run (in its run folder, else in the ``results``
    ledger), or None."""
    for result_file in (_run_dir(table, row, budget, seed, root) / "result.json",
                        *([_ledger_file(table, row, budget, seed, results)] if results else [])):
        if result_file.exists():
            return json.loads(result_file.read_text())
    return None


def _file(result: dict, table: Table, row: Row, budget: str, seed: int, results: Path | None):
    """Write ``result`` into the ledger ``results`` (if given and not there yet)."""
    if results is None:
        return
    entry = _ledger_file(table, row, budget, seed, results)
    if not entry.exists():
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text(json.dumps(result, indent=2) + "\n")


def _stored(
    table: Table, row: Row, budget: str, seed: int, root: Path, results: Path | None,
) -> dict | None:
    """:func:`cached_result`, filed in the ledger ``results`` when found."""
    stored = cached_result(table, row, budget, seed, root, results)
    if stored is not None:
        _file(stored, table, row, budget, seed, results)
    return stored


def run_one(
    table: Table, row: Row, budget: str, seed: int, root: Path, results: Path | None = None,
    trainer: dict[str, str] | None = None,
) -> dict:
    """Fit and test one row with one seed (unless a finished run is stored); returns the test
    metrics, the wall time and the task's ``report_notes``, also filed in the ledger
    ``results`` when given. A ``test_of`` row first runs (or finds) the row it tests and only
    tests that row's best checkpoint. The wall time of a run resumed from a checkpoint
    includes its earlier parts up to that checkpoint (a :class:`FitClock` is saved with it).
    ``trainer``: options of the Lightning Trainer that override the configs' (``{"accelerator":
    "cuda", "precision": "bf16-mixed"}``), recorded with the result and the device it ran on.
    A run that another process is running (the same root, row and seed) is waited for."""
    out = _run_dir(table, row, budget, seed, root)
    stored = _stored(table, row, budget, seed, root, results)
    if stored is not None:
        return stored
    # one process per run: a second waits for the first, then finds its result
    with folder_lock(out.parent, f".seed{seed}.lock", wait=True,
                     what=f"{table.name} '{row.name}' seed {seed}"):
        stored = _stored(table, row, budget, seed, root, results)
        return stored or _fit_and_test(table, row, budget, seed, out, root, results, trainer)


def _fit_and_test(table: Table, row: Row, budget: str, seed: int, out: Path, root: Path,
                  results: Path | None, trainer: dict[str, str] | None) -> dict:
    """:func:`run_one`'s run itself, in the run folder ``out`` (whose lock the caller holds)."""
    from ..run.callbacks import FitClock
    from ..run.checkpoints import resumable_checkpoint
    from ..run.lightning_cli import build_cli, keep_checkpoint_folder

    result_file = out / "result.json"
    checkpoint, tested_notes = None, {}
    if row.test_of is not None:
        checkpoint, tested_notes = _tested_checkpoint(table, row, budget, seed, root, results,
                                                      trainer)
    print(f"{table.name}: {'testing' if checkpoint else 'training'} '{row.name}', seed {seed}, "
          f"budget {budget} -> {out}", flush=True)
    args = [
        *(arg for config in row.configs for arg in ("--config", str(config))),
        *row.overrides, *table.budgets[budget][0],
        *(arg for key, value in (trainer or {}).items() for arg in (f"--trainer.{key}", value)),
        "--seed_everything", str(seed),
        "--trainer.default_root_dir", str(out),
        "--trainer.enable_progress_bar", str(sys.stderr.isatty()).lower(),  # bars in a terminal
    ]
    resume_from = resumable_checkpoint(out)
    start = time.perf_counter()
    cli = build_cli(args, run=False)
    if resume_from is not None and checkpoint is None:
        keep_checkpoint_folder(cli.trainer, resume_from)
    clock = FitClock()
    if checkpoint is None:
        cli.trainer.callbacks.append(clock)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=resume_from)
    # read before testing: loading the tested checkpoint restores the clock too
    before_resume = clock.earlier_seconds
    tested = cli.trainer.test(cli.model, datamodule=cli.datamodule,
                              ckpt_path=checkpoint or "best", verbose=False)
    result = {
        "metrics": {k: float(v) for k, v in tested[0].items()},
        "wall_seconds": time.perf_counter() - start + (before_resume or 0.0),
        "epochs": cli.trainer.current_epoch,
        "threads": torch.get_num_threads(),
        "device": device_summary(cli.trainer),
        "torch": torch.__version__,
        "finished": time.strftime("%Y-%m-%d"),
        "seed": seed,
        "args": args,
        "notes": {**getattr(cli.model, "report_notes", {}), **tested_notes},
        **({"trainer": dict(trainer)} if trainer else {}),
        **({"validation": _best_validation(cli.trainer, table.select_by)}
           if table.select_by else {}),
        **({"resumed_from": str(resume_from)} if resume_from and not checkpoint else {}),
        **({"wall_seconds_before_resume": before_resume} if before_resume is not None else {}),
        **({"tested_checkpoint": checkpoint} if checkpoint else {}),
    }
    out.mkdir(parents=True, exist_ok=True)
    result_file.write_text(json.dumps(result, indent=2))
    _file(result, table, row, budget, seed, results)
    return result


def _tested_checkpoint(
    table: Table, row: Row, budget: str, seed: int, root: Path, results: Path | None,
    trainer: dict[str, str] | None,
) -> tuple[str, dict[str, str]]:
    """The best checkpoint of the row that the ``test_of`` row ``row`` tests, run first when not
    finished, and notes for ``row``'s result. When the ledger ``results`` holds that row's
    result but its run folder under ``root`` is gone (checkpoints are not committed), the row
    is trained again under ``root`` with the same seed -- the ledger keeps the first result --
    and the note names the retraining and its own test scores, so that the two rows are read
    as two trainings, not one model tested two ways."""
    from ..run.checkpoints import resolve_checkpoint

    trained = next(r for r in table.rows if r.name == row.test_of)
    folder = _run_dir(table, trained, budget, seed, root)
    run_one(table, trained, budget, seed, root, None, trainer)  # unless finished under root
    own = json.loads((folder / "result.json").read_text())
    _file(own, table, trained, budget, seed, results)  # unless the ledger holds an earlier run
    checkpoint = resolve_checkpoint("best", folder)
    if results is None or json.loads(
            _ledger_file(table, trained, budget, seed, results).read_text()) == own:
        return checkpoint, {}
    scores = ", ".join(f"{label} {own['metrics'][key] * table.scale:.1f}"
                       for key, label in table.metrics if key in own["metrics"])
    return checkpoint, {
        "tested model": f"{trained.name} retrained for this row, seed {seed} (the ledger's run "
                        f"kept no checkpoint); its own test: {scores}"}


def device_summary(trainer) -> str:
    """Where a run trained: ``cpu`` or ``cuda x2 (NVIDIA H100 80GB HBM3)``, then the strategy
    when there are several processes and the precision when it is not 32-bit."""
    kind = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
    count = trainer.num_devices
    text = kind if count == 1 else f"{kind} x{count}"
    if kind == "cuda":
        text += f" ({torch.cuda.get_device_name(trainer.strategy.root_device)})"
    if trainer.world_size > 1:
        text += f", {trainer.strategy.strategy_name}"
    precision = str(trainer.precision)
    return text if precision in ("32", "32-true") else f"{text}, {precision}"


def _best_validation(trainer, key: str) -> dict[str, float]:
    """``{key: best score}`` of the run's ModelCheckpoint monitoring ``key``, or ``val/score``
    when ``key`` is the task's headline metric, which it logs as ``val/score`` too (empty if
    none recorded one, e.g. a run that only tested)."""
    headline = key == f"val/{trainer.lightning_module.score_name}"
    monitored = {key, "val/score"} if headline else {key}
    scores = [c.best_model_score for c in trainer.checkpoint_callbacks
              if c.monitor in monitored and c.best_model_score is not None]
    return {key: float(scores[0])} if scores else {}


def _best_of(runs: list[dict], key: str, select_by: str) -> float | None:
    """Test value ``key`` of the run with the best validation ``select_by`` (the lowest seed on
    ties), None when no run has both."""
    ranked = [r for r in runs if key in r["metrics"] and select_by in r.get("validation", {})]
    if not ranked:
        return None
    return max(ranked, key=lambda r: r["validation"][select_by])["metrics"][key]


@dataclass(frozen=True)
class RowSummary:
    """What a report row shows, in the report's units: per metric key ``(mean, std, best)``
    (``std``: None for one seed; ``best``: the test value of the seed best on validation, or
    None), the number of seeds, the mean wall time, ``partial_wall``: True when a run was
    resumed from a checkpoint that recorded no :class:`~lit_structattn.run.callbacks.FitClock`, so
    its wall time counts only the part after the resumption, and ``earlier``: True when the
    row comes from an earlier report (``earlier.json`` of the ledger) rather than from per-run
    results."""

    cells: dict[str, tuple[float, float | None, float | None]]
    seeds: int
    wall_minutes: float
    partial_wall: bool = False
    earlier: bool = False


def summarize(table: Table, runs: list[dict]) -> RowSummary:
    """The summary of one row's finished runs (at least one)."""
    cells = {}
    for key, _ in table.metrics:
        values = [table.scale * r["metrics"][key] for r in runs if key in r["metrics"]]
        if values:
            best = _best_of(runs, key, table.select_by) if table.select_by else None
            cells[key] = (statistics.mean(values),
                          statistics.stdev(values) if len(values) > 1 else None,
                          None if best is None else table.scale * best)
    return RowSummary(cells, len(runs), statistics.mean(r["wall_seconds"] for r in runs) / 60,
                      any("resumed_from" in r and "wall_seconds_before_resume" not in r
                          for r in runs))


@dataclass(frozen=True)
class EarlierReport:
    """Rows of an earlier report whose per-run results were lost, as it printed them: where it
    came from, ``{row name: RowSummary}`` and its notes (markdown lines)."""

    source: str = ""
    rows: dict[str, RowSummary] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    superseded: bool = False  # every row was run again: compared with, never shown


def earlier_report(table: Table, budget: str, results: Path | None) -> EarlierReport:
    """The ledger's earlier report of ``table`` at ``budget``: ``earlier.json``, else
    ``superseded.json`` (empty when there is neither); ``ValueError`` naming the file when it is
    malformed."""
    folder = None if results is None else results / table.name / budget
    found = [] if folder is None else [folder / name for name in ("earlier.json",
                                                                  "superseded.json")
                                       if (folder / name).exists()]
    if not found:
        return EarlierReport()
    path = found[0]
    try:
        record = json.loads(path.read_text())
        return EarlierReport(record["source"], {
            name: RowSummary({key: (mean, std if row["seeds"] > 1 else None, best)
                              for key, (mean, std, best) in row["cells"].items()},
                             row["seeds"], row["wall_minutes"], row.get("resumed", False),
                             earlier=True)
            for name, row in record["rows"].items()}, tuple(record.get("notes", ())),
            superseded=path.name == "superseded.json")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{path}: not an earlier-report record ({error!r}); expected "
                         '{"source": ..., "rows": {name: {"seeds", "wall_minutes", "cells"}}}'
                         ) from error


def _differences(table: Table, rows: dict[str, RowSummary], earlier: EarlierReport
                 ) -> list[str]:
    """A note for every metric of a row run again whose mean differs from the earlier report's
    by more than the seed spread (the larger standard deviation of the two; rows of one seed
    on both sides have none and get no note). The earlier report printed one decimal, so both
    sides are compared as printed: 94.9 against 94.8 with a spread of 0.1 is within it."""
    lines = []
    for row in table.rows:
        summary, before = rows.get(row.name), earlier.rows.get(row.name)
        if summary is None or summary.earlier or before is None:
            continue
        for key, label in table.metrics:
            if key not in summary.cells or key not in before.cells:
                continue
            (mean, std, _), (old, old_std, _) = summary.cells[key], before.cells[key]
            spread = max((s for s in (std, old_std) if s is not None), default=None)
            if spread is None:
                continue
            apart, spread = abs(round(mean, 1) - round(old, 1)), round(spread, 1)
            if round(apart - spread, 6) > 0:
                lines.append(
                    f"- {row.name}, {label}: {mean:.1f} ± {'—' if std is None else f'{std:.1f}'}"
                    f" over {summary.seeds} seeds here, {old:.1f} ± "
                    f"{'—' if old_std is None else f'{old_std:.1f}'} over {before.seeds} in the "
                    f"earlier report: {apart:.1f} apart, more than the seed spread "
                    f"({spread:.1f})")
    if not lines:
        return []
    return [f"**Re-runs that differ from the earlier report ({earlier.source}) by more than "
            "the seed spread:**", "", *lines, ""]


def _shown(mean: float, std: float | None, best: float | None, select_by: str | None) -> str:
    cell = f"{mean:.1f}" if std is None else f"{mean:.1f} ± {std:.1f}"
    return f"{'—' if best is None else f'{best:.1f}'} / {cell}" if select_by else cell


def _group_averages(table: Table, rows: dict[str, RowSummary]) -> list[str]:
    """One line per row group: the average over its rows of every cell (best-on-validation
    values too, when the table selects), beside the average of the paper's numbers of the same
    rows and, where the table records one, the average the paper prints (labelled, as they
    may differ)."""
    lines = []
    for group in dict.fromkeys(row.group for row in table.rows if row.group):
        members = [row for row in table.rows if row.group == group and row.name in rows]
        cells = []
        for key, _ in table.metrics:
            shown = [row for row in members if key in rows[row.name].cells]
            if not shown:
                cells.append("—")
                continue
            means = [rows[row.name].cells[key][0] for row in shown]
            cell = f"{statistics.mean(means):.1f}"
            if table.select_by:
                bests = [rows[row.name].cells[key][2] for row in shown]
                cell = f"{'—' if None in bests else f'{statistics.mean(bests):.1f}'} / {cell}"
            papers = [row.paper[key] for row in shown if key in row.paper]
            size, printed = table.printed_averages.get(group, (0, {}))
            printed = printed.get(key) if len(members) == size else None  # the whole group
            if len(papers) == len(shown) and printed is not None:
                cell += (f" (paper: printed {printed:.1f}, mean of its rows "
                         f"{statistics.mean(papers):.1f})")
            elif len(papers) == len(shown):
                cell += f" (paper {statistics.mean(papers):.1f})"
            cells.append(cell)
        count = f"{len(members)} row{'s' if len(members) != 1 else ''}"
        lines.append(f"| average, {group} ({count}) | " + " | ".join(cells)
                     + " | — | — |")
    return lines


def _notes(table: Table, results: dict[str, list[dict]]) -> list[str]:
    """The runs' ``notes`` as markdown bullets: a note every run shares once, others per row
    and seed."""
    runs = [(row.name, r) for row in table.rows for r in results[row.name]]
    keys = sorted({key for _, r in runs for key in r.get("notes", {})})
    lines = []
    for key in keys:
        values = {(name, r.get("seed", "?")): r["notes"][key] for name, r in runs
                  if key in r.get("notes", {})}
        if len(set(values.values())) == 1 and len(values) == len(runs):
            lines.append(f"- {key}: `{next(iter(values.values()))}`")
        else:
            lines += [f"- {name}, seed {seed}: {key}: {value}"
                      for (name, seed), value in values.items()]
    return ["**Notes from the runs:**", "", *lines, ""] if lines else []


def _per_seed(table: Table, results: dict[str, list[dict]],
              rows: dict[str, RowSummary]) -> list[str]:
    """The first metric of every run of the rows shown from two or more runs, so that a seed
    far from the others is seen rather than only widening the spread."""
    key, label = table.metrics[0]
    lines = []
    for name, summary in rows.items():
        runs = [r for r in results.get(name, []) if key in r["metrics"]]
        if summary.earlier or len(runs) < 2:
            continue
        seeds = ", ".join(str(r.get("seed", "?")) for r in runs)
        values = ", ".join(f"{table.scale * r['metrics'][key]:.1f}" for r in runs)
        lines.append(f"- {name}, seeds {seeds}: {values}")
    return [f"**Per seed ({label}):**", "", *lines, ""] if lines else []


def verdict(table: Table, results: dict[str, list[dict]]) -> str | None:
    """One sentence on the table's :class:`~.tables.Claim`, computed from the seeds run for both
    of its rows: held in every seed and metric (with the mean margins), or where it did not;
    None when the table makes no claim or the rows share no seed."""
    claim = table.claim
    if claim is None:
        return None
    better = {r.get("seed"): r["metrics"] for r in results.get(claim.better, [])}
    worse = {r.get("seed"): r["metrics"] for r in results.get(claim.worse, [])}
    seeds = sorted(seed for seed in better.keys() & worse.keys() if seed is not None
                   and all(key in better[seed] and key in worse[seed] for key in claim.metrics))
    if not seeds:
        return None
    labels = dict(table.metrics)
    misses = [f"{labels[key]}, seed {seed} ({table.scale * better[seed][key]:.1f} vs "
              f"{table.scale * worse[seed][key]:.1f})"
              for seed in seeds for key in claim.metrics
              if not better[seed][key] > worse[seed][key]]
    where = _series([labels[key] for key in claim.metrics])
    runs = f"seed {seeds[0]}" if len(seeds) == 1 else f"each of the {len(seeds)} seeds"
    if misses:
        return (f"**Verdict:** {claim.better} is not above {claim.worse} at {where} in {runs}: "
                f"not at {'; '.join(misses)}. The paper's claim does not hold in these runs.")
    margins = _series([
        f"{statistics.mean(table.scale * (better[s][key] - worse[s][key]) for s in seeds):.1f}"
        for key in claim.metrics])
    return (f"**Verdict:** {claim.better} is above {claim.worse} at {where} in {runs}, as the "
            f"paper reports (by {margins} points{' on average' if len(seeds) > 1 else ''}).")


def _series(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def render(
    table: Table, budget: str, seeds: range, results: dict[str, list[dict]],
    not_run: tuple[str, ...] = (), cached_only: bool = False,
    earlier: EarlierReport = EarlierReport(), trainer: dict[str, str] | None = None,
) -> str:
    """The markdown report: ours (mean ± std over seeds) beside the paper, per metric, and how
    many seeds each row has (fewer than asked only with ``cached_only``). A row of the
    ``earlier`` report is shown instead of its runs while it has more seeds than they do."""
    rows = {}
    for row in table.rows:
        runs = results.get(row.name, [])
        before = None if earlier.superseded else earlier.rows.get(row.name)
        rows[row.name] = (before if before is not None and before.seeds > len(runs)
                          else summarize(table, runs))
    header = ["model", *[label for _, label in table.metrics], "seeds", "wall time / run"]
    threads = sorted({r.get("threads", "?") for runs in results.values() for r in runs}, key=str)
    thread_note = f", {'/'.join(map(str, threads))} thread(s) per run" if threads else ""
    # what the runs recorded, so that the report is a function of the ledger alone
    torches = sorted({r["torch"] for runs in results.values() for r in runs if "torch" in r})
    days = sorted({r["finished"] for runs in results.values() for r in runs if "finished" in r})
    undated = sum("finished" not in r for runs in results.values() for r in runs)
    when = ("" if not days else f" on {days[0]}" if len(days) == 1
            else f" from {days[0]} to {days[-1]}")
    undated_note = ""
    if days and undated:  # runs filed before results recorded their day
        undated_note = (" One of its runs is older and recorded no date." if undated == 1
                        else f" {undated} of its runs are older and recorded no date.")
    devices = sorted({r["device"] for runs in results.values() for r in runs if "device" in r})
    if devices:
        thread_note += f", on {' / '.join(devices)}"
    options = "".join(f" --{key} {value}" for key, value in (trainer or {}).items())
    lines = [
        f"# {table.title}", "",
        f"Produced by `structattn reproduce {table.name} --budget {budget} --seeds {seeds.stop}"
        f"{f' --first-seed {seeds.start}' if seeds.start else ''}"
        f"{' --cached-only' if cached_only else ''}{options}`{when} "
        f"(torch {'/'.join(torches) or torch.__version__}{thread_note}).{undated_note} Wall "
        "times are as measured on a shared 2-core machine, where several runs may have run at "
        "once.", "",
        f"**Budget `{budget}`:** {table.budgets[budget][1]}. **Seeds:** {seeds.start}.."
        f"{seeds.stop - 1}"
        f"{'; the rows show the finished runs among them (column seeds)' if cached_only else ''}"
        ".", "",
        f"**Data:** {table.note}", "",
        *([f"**Rows of the paper's table not run here:** {'; '.join(not_run)}.", ""]
          if not_run else []),
        "Cells: ours, "
        + (f"the test value of the seed best on {table.select_by} / " if table.select_by else "")
        + "mean ± standard deviation over seeds"
        f" ({'in %; ' if table.scale == 100 else ''}the mean alone for one seed), then the "
        "paper's number.", "",
        "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
    ]
    for row in table.rows:
        summary = rows[row.name]
        cells = []
        for key, _ in table.metrics:
            ours = (_shown(*summary.cells[key], table.select_by) if key in summary.cells
                    else "— / —" if table.select_by else "—")
            paper = row.paper.get(key)
            cells.append(ours if paper is None else f"{ours} (paper {paper:.1f})")
        lines.append(f"| {row.name} | " + " | ".join(cells)
                     + f" | {summary.seeds}{'†' if summary.earlier else ''} | "
                     f"{summary.wall_minutes:.1f} min{'*' if summary.partial_wall else ''} |")
    lines += _group_averages(table, rows)
    claim = verdict(table, results)
    if claim:
        lines += ["", claim]
    if any(summary.partial_wall for summary in rows.values()):
        lines += ["", "\\* a run of this row was interrupted and resumed from its last "
                  "checkpoint: its wall time counts only the part after the resumption."]
    notes = [*_differences(table, rows, earlier), *_per_seed(table, results, rows),
             *_notes(table, results)]
    if any(summary.earlier for summary in rows.values()):
        lines += ["", f"† as printed by an earlier report ({earlier.source}), whose per-run "
                  "results were lost with the machine that ran them; shown until as many seeds "
                  "are run again."]
        if earlier.notes:
            notes += ["**Notes from the earlier report:**", "", *earlier.notes, ""]
    return "\n".join([*lines, "", *notes]).rstrip("\n") + "\n"


def run_table(
    name: str, budget: str, seeds: int, rows: list[str] | None = None,
    root: Path = Path("runs/reproduce"), report: Path | None = None, first_seed: int = 0,
    cached_only: bool = False, results: Path | None = None,
    trainer: dict[str, str] | None = None,
) -> Path:
    """Run (or resume) seeds ``first_seed .. seeds - 1`` of every selected row of table
    ``name``, filing each result in the ledger ``results`` when given; write the report over
    those seeds to ``report`` (default: ``root/<name>.md``). With ``cached_only`` nothing is
    trained: the report shows the stored runs among those seeds (and the rows of the ledger's
    earlier report), and rows without any as not run. ``trainer``: Trainer options that
    override the configs' (:func:`run_one`)."""
    check_choice("table", name, sorted(TABLES))
    check_choice("budget", budget, BUDGETS)
    table = TABLES[name]
    check_choice(f"budget of {name}", budget, [b for b in BUDGETS if b in table.budgets])
    chosen = [r for r in table.rows if rows is None or r.name in rows]
    earlier = earlier_report(table, budget, results)
    if cached_only:
        found = {row.name: [_stored(table, row, budget, seed, root, results)
                            for seed in range(first_seed, seeds)] for row in chosen}
        runs = {name: [r for r in stored if r is not None] for name, stored in found.items()}
        chosen = [row for row in chosen if runs[row.name]
                  or (row.name in earlier.rows and not earlier.superseded)]
    else:
        runs = {
            row.name: [run_one(table, row, budget, seed, root, results, trainer)
                       for seed in range(first_seed, seeds)]
            for row in chosen
        }
    shown = replace(table, rows=tuple(chosen))
    path = report or root / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    not_run = tuple(r.name for r in table.rows if r not in chosen)
    path.write_text(render(shown, budget, range(first_seed, seeds), runs, not_run,
                           cached_only, earlier, trainer))
    return path


def write_ledger_reports(results: Path = REPORTS / "results", reports: Path = REPORTS
                         ) -> list[Path]:
    """Write the report of every table and budget of the ledger ``results`` from it alone
    (``--cached-only`` over the table's ``seeds``) into ``reports``; returns the reports'
    paths. What is committed in ``reports/`` must equal what this writes
    (``tests/test_ledger_reports.py``; ``make reports`` rewrites them)."""
    written = []
    for name in sorted(p.name for p in results.iterdir() if p.is_dir()):
        for budget in sorted(p.name for p in (results / name).iterdir() if p.is_dir()):
            report = reports / ledger_report_name(name, budget)
            written.append(run_table(name, budget, TABLES[name].seeds, report=report,
                                     root=results / name / budget / "no-run-folders",
                                     cached_only=True, results=results))
    return written


def ledger_report_name(table: str, budget: str) -> str:
    """The committed report of ``table`` at ``budget``: ``<table>.md`` for the ``cpu`` budget
    (the reports beside the papers' tables), ``<table>_<budget>.md`` for the others."""
    return f"{table}.md" if budget == "cpu" else f"{table}_{budget}.md"


BUDGET_HELP = """budgets (--budget):
  ci     seconds per row: a smoke test (a few batches, one epoch), not a result
  demo   what `make demo` runs (tree_transduction only): minutes on 2 cores
  cpu    minutes per row and seed on a 2-core CPU (smaller data or fewer epochs, as each
         report states); a full table takes hours
  paper  the papers' hyper-parameters: meant for a GPU (hours to days per table on a CPU)

The configs train on a GPU where there is one (accelerator: auto); --accelerator, --devices,
--strategy and --precision override that for every run, e.g. --accelerator cuda --devices 2
--strategy ddp --precision bf16-mixed.

Runs, their TensorBoard logs and checkpoints go to --root (default runs/reproduce in the
current folder) and the report to ROOT/<table>.md. A finished run is never repeated: run the
same command again to resume. Maintainers add --ledger to file every result in the committed
ledger reports/results/ and write the report to reports/<table>.md (cpu budget) or
reports/<table>_<budget>.md."""


#: the Trainer options ``structattn reproduce`` takes, with an example each
TRAINER_OPTIONS = {"accelerator": "cuda", "devices": "2", "strategy": "ddp",
                   "precision": "bf16-mixed"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="structattn reproduce", description=__doc__.split("\n\n")[0],
        epilog=BUDGET_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("--budget", choices=BUDGETS, default="cpu",
                        help="how much to train (see below; default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. SEEDS-1")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="run and report only seeds FIRST_SEED .. SEEDS-1")
    parser.add_argument("--rows", nargs="*", help="row names to run (default: all)")
    parser.add_argument("--root", type=Path, default=Path("runs/reproduce"),
                        help="folder of the runs (default: %(default)s)")
    parser.add_argument("--report", type=Path,
                        help="where to write the markdown report (default: ROOT/<table>.md, "
                        "with --ledger reports/<table>.md, or <table>_<budget>.md for a "
                        "budget other than cpu)")
    parser.add_argument("--results", type=Path,
                        help="a results ledger to file every finished run in and to read "
                        "finished runs from (default: none, with --ledger reports/results)")
    parser.add_argument("--ledger", action="store_true",
                        help="for maintainers: file the results in the committed ledger "
                        f"{REPORTS / 'results'} and write the report to "
                        f"{REPORTS}/<table>[_<budget>].md")
    for option, example in TRAINER_OPTIONS.items():
        parser.add_argument(f"--{option}", help=f"the Trainer's {option} for every run, over "
                            f"the configs' (e.g. {example}); recorded in the results")
    parser.add_argument("--cached-only", action="store_true",
                        help="train nothing: report the finished runs stored under --root or "
                        "in the ledger")
    args = parser.parse_args(argv)
    report, results = args.report, args.results
    if args.ledger:
        if not REPORTS.is_dir():
            parser.error(f"--ledger: no reports folder at {REPORTS} (run from a checkout of "
                         "the repository)")
        report = report or REPORTS / ledger_report_name(args.table, args.budget)
        results = results or REPORTS / "results"
    trainer = {option: getattr(args, option) for option in TRAINER_OPTIONS
               if getattr(args, option) is not None}
    path = run_table(args.table, args.budget, args.seeds, args.rows, args.root, report,
                     args.first_seed, args.cached_only, results, trainer)
    print(path.read_text())
    print(f"report written to {path}")
