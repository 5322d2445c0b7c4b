"""Runs a table's rows over seeds through LightningCLI, in process, one run after another, and
writes their report.

The tables come from ``configs/tables/*.yaml`` (:mod:`.tables`): a run's arguments are the
row's config files, the row's overlay, the budget's overlay (both as ``--a.b value``
overrides), then the seed and the run folder.

Each finished run writes ``result.json`` in its run folder (:mod:`.ledger`); a run whose result
is stored is not repeated, so an interrupted reproduction resumes where it stopped (and seeds
can be spread over several processes with ``--first-seed``); an interrupted run continues from
its newest ``last.ckpt`` when its configuration saves one. A run holds a lock beside its folder
(``<row>/.seed<k>.lock``) while it runs: a second reproduction on the same root waits for it and
takes its result instead of training it again. TensorBoard logs and checkpoints of a run go to
the same folder.

With ``--ledger`` (maintainers) the CLI also files every result in the results ledger
``REPORTS/results`` and writes the report to ``REPORTS/<table>.md`` (``<table>_<budget>.md``
for budgets other than ``cpu``), where ``REPORTS`` is the folder ``--reports`` (default:
``reports`` in the current folder, the repository's own when run from its checkout).

``--verify ROW`` re-runs one seed of a ledger row with today's code and judges it against the
row's recorded spread (:mod:`.verify`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from ..common.checks import check_choice
from ..run.folders import folder_lock
from .ledger import (
    cited_verdicts,
    earlier_report,
    file_result,
    ledger_file,
    ledger_report_name,
    run_dir,
    stored,
    stored_runs,
)
from .provenance import run_provenance
from .report import shown_report, write_report
from .tables import BUDGETS, TABLES, Row, Table

#: The metric key of a trained run's mean training step in milliseconds (forward, backward and
#: the optimizer's step, timed by :class:`~lit_structattn.run.callbacks.FitClock`): noisy on a
#: shared machine, so a table shows it only beside the machine's load.
STEP_TIME = "train/step_ms"


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
    out = run_dir(table, row, budget, seed, root)
    found = stored(table, row, budget, seed, root, results)
    if found is not None:
        return found
    # one process per run: a second waits for the first, then finds its result
    with folder_lock(out.parent, f".seed{seed}.lock", wait=True,
                     what=f"{table.name} '{row.name}' seed {seed}"):
        found = stored(table, row, budget, seed, root, results)
        return found or _fit_and_test(table, row, budget, seed, out, root, results, trainer)


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
    before_resume, step_ms = clock.earlier_seconds, clock.step_milliseconds()
    tested = cli.trainer.test(cli.model, datamodule=cli.datamodule,
                              ckpt_path=checkpoint or "best", verbose=False)
    result = {
        "metrics": {**{k: float(v) for k, v in tested[0].items()},
                    **({STEP_TIME: step_ms} if step_ms is not None else {})},
        "wall_seconds": time.perf_counter() - start + (before_resume or 0.0),
        "epochs": cli.trainer.current_epoch,
        **run_provenance(device_summary(cli.trainer)),
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
    file_result(result, table, row, budget, seed, results)
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
    folder = run_dir(table, trained, budget, seed, root)
    run_one(table, trained, budget, seed, root, None, trainer)  # unless finished under root
    own = json.loads((folder / "result.json").read_text())
    file_result(own, table, trained, budget, seed, results)  # unless the ledger holds one
    checkpoint = resolve_checkpoint("best", folder)
    if results is None or json.loads(
            ledger_file(table, trained, budget, seed, results).read_text()) == own:
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


def machine_notice(threads: int | None = None, load: float | None = None,
                   cores: int | None = None) -> list[str]:
    """What a reproduction says before it trains: the threads each run uses and, when the
    machine is busy (its 1-minute load average above its cores: other processes want the
    cores too), that the wall times will be longer than on an idle machine and how to choose
    the threads. ``threads``, ``load`` and ``cores`` default to this machine's
    (``torch.get_num_threads()``, ``os.getloadavg()`` where it exists, ``os.cpu_count()``)."""
    threads = torch.get_num_threads() if threads is None else threads
    cores = (os.cpu_count() or 1) if cores is None else cores
    if load is None and hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
    lines = [f"threads: {threads} per run on {cores} cores (set OMP_NUM_THREADS to change it)"]
    if load is not None and load > cores:
        lines.append(
            f"the machine is busy (load {load:.1f} on {cores} cores): other processes share "
            "the cores, so the runs take longer than the wall times the reports give, several "
            "times longer when a run's threads wait for busy cores; OMP_NUM_THREADS=1 runs "
            "each on one thread")
    return lines


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
    override the configs' (:func:`run_one`). Before it trains it prints the threads and, on a
    busy machine, why the runs will take longer (:func:`machine_notice`). The claims of other
    tables that the table's claims ``see`` are judged from the runs under ``root`` and in
    ``results``."""
    check_choice("table", name, sorted(TABLES))
    check_choice("budget", budget, BUDGETS)
    table = TABLES[name]
    check_choice(f"budget of {name}", budget, [b for b in BUDGETS if b in table.budgets])
    chosen = [r for r in table.rows if rows is None or r.name in rows]
    seed_range = range(first_seed, seeds)
    if not seed_range:
        raise ValueError(f"no seed to run: the seeds are --first-seed .. --seeds - 1, and "
                         f"--first-seed {first_seed} is not below --seeds {seeds} (one seed K: "
                         "--first-seed K --seeds K+1)")
    if cached_only:
        runs = stored_runs(table, chosen, budget, seed_range, root, results)
    else:
        for line in machine_notice():
            print(line, flush=True)
        runs = {row.name: [run_one(table, row, budget, seed, root, results, trainer)
                           for seed in seed_range] for row in chosen}
    return write_report(report or root / f"{name}.md", shown_report(
        table, chosen, budget, seed_range, runs, earlier_report(table, budget, results),
        cached_only, trainer, cited_verdicts(table, root, results)))


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
ledger REPORTS/results/ and write the report to REPORTS/<table>.md (cpu budget) or
REPORTS/<table>_<budget>.md, where REPORTS is --reports (default: reports in the current
folder: run it from the repository's checkout)."""


#: the Trainer options ``structattn reproduce`` takes, with an example each
TRAINER_OPTIONS = {"accelerator": "cuda", "devices": "2", "strategy": "ddp",
                   "precision": "bf16-mixed"}


def main(argv: list[str] | None = None) -> None:
    """``structattn reproduce TABLE``: run the table's rows over seeds and write its report
    (``argv``: the arguments after ``reproduce``; ``--help`` lists them). A bad table, row,
    budget or option exits with argparse's usage error (status 2)."""
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
                        "with --ledger REPORTS/<table>.md, or <table>_<budget>.md for a "
                        "budget other than cpu)")
    parser.add_argument("--results", type=Path,
                        help="a results ledger to file every finished run in and to read "
                        "finished runs from (default: none, with --ledger REPORTS/results)")
    parser.add_argument("--ledger", action="store_true",
                        help="for maintainers: file the results in the committed ledger "
                        "REPORTS/results and write the report to REPORTS/<table>[_<budget>].md")
    parser.add_argument("--reports", type=Path, default=Path("reports"),
                        help="with --ledger: the folder of the committed reports and their "
                        "ledger, the repository's reports/ (default: %(default)s, in the "
                        "current folder)")
    for option, example in TRAINER_OPTIONS.items():
        parser.add_argument(f"--{option}", help=f"the Trainer's {option} for every run, over "
                            f"the configs' (e.g. {example}); recorded in the results")
    parser.add_argument("--cached-only", action="store_true",
                        help="train nothing: report the finished runs stored under --root or "
                        "in the ledger")
    parser.add_argument("--verify", metavar="ROW",
                        help="re-run seed FIRST_SEED of ROW with today's code in a new folder "
                        "under ROOT/verify and say whether each metric lands inside the spread "
                        "of the row's runs recorded in the ledger (--results, default "
                        "REPORTS/results); files and reports nothing; exit status 1 when a "
                        "metric lands outside")
    args = parser.parse_args(argv)
    trainer = {option: getattr(args, option) for option in TRAINER_OPTIONS
               if getattr(args, option) is not None}
    if args.verify is not None:
        _verify(parser, args, trainer)
        return
    report, results = args.report, args.results
    if args.ledger:
        if not args.reports.is_dir():
            parser.error(f"--ledger: no reports folder {args.reports} (give the repository's "
                         "reports/ with --reports DIR, or run from its checkout)")
        report = report or args.reports / ledger_report_name(args.table, args.budget)
        results = results or args.reports / "results"
    path = run_table(args.table, args.budget, args.seeds, args.rows, args.root, report,
                     args.first_seed, args.cached_only, results, trainer)
    print(path.read_text())
    print(f"report written to {path}")


def _verify(parser: argparse.ArgumentParser, args: argparse.Namespace,
            trainer: dict[str, str]) -> None:
    """``--verify ROW``: one seed of ROW re-run in a new folder under ``ROOT/verify``, compared
    with the row's runs in the ledger (:mod:`.verify`); exit status 1 when a metric lands
    outside their spread."""
    from .verify import compare, recorded_runs, verification_lines

    table = TABLES[args.table]
    row = next((r for r in table.rows if r.name == args.verify), None)
    if row is None:
        parser.error(f"--verify: {args.verify!r} is no row of {args.table}; rows: "
                     f"{', '.join(r.name for r in table.rows)}")
    try:
        recorded = recorded_runs(table, row, args.budget, args.results or args.reports / "results")
    except ValueError as error:
        parser.error(str(error))
    fresh = args.root / "verify" / time.strftime("%Y%m%d-%H%M%S")
    result = run_one(table, row, args.budget, args.first_seed, fresh, None, trainer)
    checks = compare(table, args.first_seed, result, recorded)
    print("\n".join(verification_lines(table, row.name, args.first_seed, checks)))
    if any(check.inside is False for check in checks):
        raise SystemExit(1)
