"""Seconds per training epoch of the reproduction tables' rows on one device, and what a whole
reproduction of each table would cost there.

Each timed row is built exactly as ``structattn reproduce TABLE --budget BUDGET`` builds it (its
configs, overrides and the budget's overlay), then trained for ``--batches`` batches on the
device with no validation, logger, callbacks or checkpoints. A callback times every training
batch (waiting for a CUDA device at its end); the first two are warm-up. Seconds per epoch =
the median batch time x the batches of one epoch of the budget's training data (validation is
not counted). A whole table = seconds per epoch x the budget's ``max_epochs`` x rows x seeds, the
mean of the timed rows standing for the others: an estimate, labelled so.

Rows: the first and the last of every table (or of ``--tables``), all of them or the first
(``--rows``), or the rows named ``TABLE/ROW`` (``--named``). Each is timed in the precision its
configs give (Lightning's ``32-true`` unless they say otherwise) or in each of ``--precisions``
(``--fp32-first`` times the first row also in ``32-true``, the baseline of the mixed ones).
Every row's result is printed as soon as it is timed, so a run stopped early shows what it did;
``--seconds`` starts no row after that many seconds (the rows left are listed as not timed).

    python -m bench.epoch_seconds [--device cuda] [--budgets cpu paper] [--batches 12]
        [--tables nli ...] [--rows first-last|all|first] [--named TABLE/ROW ...]
        [--precisions bf16-mixed 16-mixed] [--fp32-first] [--seconds 100]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import torch
from lightning.pytorch import Callback

from lit_structattn.reproduce.tables import Row, Table, load_tables

WARMUP = 2


@dataclass(frozen=True)
class EpochTime:
    """One timed row of one budget: seconds per epoch, or why it could not be timed; the
    precision it ran in (None: as configured, for a row that could not be built)."""

    table: str
    row: str
    budget: str
    batch_seconds: float | None = None
    batches_per_epoch: int | None = None
    max_epochs: int | None = None
    error: str | None = None
    precision: str | None = None

    @property
    def epoch_seconds(self) -> float | None:
        """Median batch seconds x batches per epoch; None for a row that was not timed."""
        if self.batch_seconds is None or self.batches_per_epoch is None:
            return None
        return self.batch_seconds * self.batches_per_epoch


class BatchTimer(Callback):
    """Records the wall time of every training batch."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.seconds: list[float] = []
        self._start = 0.0

    def _wait(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def on_train_batch_start(self, *args) -> None:
        """Start the clock once the device has finished the work before the batch."""
        self._wait()
        self._start = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:
        """Record the batch's seconds once the device has finished it."""
        self._wait()
        self.seconds.append(time.perf_counter() - self._start)


def time_row(table: Table, row: Row, budget: str, device: str = "cpu", batches: int = 12,
             precision: str | None = None) -> EpochTime:
    """Train ``row`` under ``budget`` for ``batches`` batches on ``device`` in ``precision``
    (None: the configured one) and time it (see the module docstring). Errors (e.g. a budget
    whose data is not on this machine) are returned in ``error``, not raised."""
    from lit_structattn.run.lightning_cli import build_cli

    if batches <= WARMUP:
        raise ValueError(f"--batches must exceed the {WARMUP} warm-up batches, got {batches}")
    args = [*(a for config in row.configs for a in ("--config", str(config))), *row.overrides,
            *table.budgets[budget][0]]
    # one epoch of ``batches`` batches; max_epochs stays the budget's, for the estimate
    timing = ["--trainer.accelerator", "cuda" if device.startswith("cuda") else device,
              "--trainer.devices", f"[{torch.device(device).index or 0}]"
              if device.startswith("cuda") else "1",
              "--trainer.max_steps", str(batches),
              "--trainer.limit_train_batches", str(batches), "--trainer.limit_val_batches", "0",
              "--trainer.num_sanity_val_steps", "0", "--trainer.logger", "false",
              "--trainer.callbacks", "null", "--trainer.enable_checkpointing", "false",
              "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary",
              "false", "--seed_everything", "0",
              *(("--trainer.precision", precision) if precision else ())]
    name = dict(table=table.name, row=row.name, budget=budget)
    try:
        cli = build_cli([*args, *timing], run=False)
        timer = BatchTimer(torch.device(device))
        cli.trainer.callbacks.append(timer)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        per_epoch = len(cli.datamodule.train_dataloader())
    except Exception as error:  # noqa: BLE001 - reported in the table instead
        return EpochTime(**name, error=f"{type(error).__name__}: {error}".splitlines()[0][:160],
                         precision=precision)
    steady = timer.seconds[WARMUP:] or timer.seconds
    return EpochTime(**name, batch_seconds=statistics.median(steady),
                     batches_per_epoch=per_epoch, max_epochs=cli.trainer.max_epochs,
                     precision=str(cli.trainer.precision))


def chosen_rows(table: Table, which: str) -> list[Row]:
    """The rows to time: all of them, the first, or the first and the last (usually the
    simplest model and the most structured one); ``test_of`` rows train nothing and are
    skipped."""
    rows = [row for row in table.rows if row.test_of is None]
    if which == "first":
        return rows[:1]
    return rows if which == "all" or len(rows) == 1 else [rows[0], rows[-1]]


def named_rows(tables: dict[str, Table], names: list[str]) -> list[tuple[Table, Row]]:
    """The rows named ``TABLE/ROW`` (the row's name as in its table file), in that order;
    ``SystemExit`` naming the table's rows for a name that is not one."""
    chosen = []
    for name in names:
        table_name, _, row_name = name.partition("/")
        table = tables.get(table_name)
        rows = {row.name: row for row in table.rows} if table else {}
        if row_name not in rows:
            known = sorted(rows) if table else sorted(tables)
            raise SystemExit(f"no row {name!r}; {table_name!r} has {known}" if table
                             else f"no table {table_name!r} in {name!r}; choose from {known}")
        chosen.append((table, rows[row_name]))
    return chosen


def table_cost_hours(times: list[EpochTime], table: Table, budget: str,
                     precision: str | None = None) -> float | None:
    """Estimated hours of a whole reproduction of ``table`` under ``budget`` in ``precision``
    (see the module docstring), or None when no row of it could be timed."""
    timed = [t for t in times if t.table == table.name and t.budget == budget
             and t.precision == precision
             and t.epoch_seconds is not None and t.max_epochs is not None]
    if not timed:
        return None
    per_row = statistics.mean(t.epoch_seconds * max(t.max_epochs, 1) for t in timed)
    trained = sum(row.test_of is None for row in table.rows)
    return per_row * trained * table.seeds / 3600


def render(times: list[EpochTime], tables: dict[str, Table]) -> str:
    """Two markdown tables: seconds per epoch of every timed row, and each table's cost per
    budget and precision timed."""
    from bench.timing import markdown_table

    rows = []
    for t in times:
        if t.error:
            rows.append([t.table, t.row, t.budget, t.precision or "-", "-", "-", "-",
                         f"not timed: {t.error}"])
            continue
        rows.append([t.table, t.row, t.budget, t.precision, f"{t.batch_seconds * 1e3:.1f}",
                     str(t.batches_per_epoch), f"{t.epoch_seconds:.1f}", str(t.max_epochs)])
    per_row = markdown_table(["table", "row", "budget", "precision", "ms / batch",
                              "batches / epoch", "s / epoch", "epochs"], rows)
    columns = list(dict.fromkeys((t.budget, t.precision) for t in times if not t.error))
    costs = []
    for name in dict.fromkeys(t.table for t in times):
        table = tables[name]
        cells = []
        for budget, precision in columns:
            hours = table_cost_hours(times, table, budget, precision)
            cells.append("-" if hours is None else f"{hours:.1f}")
        costs.append([name, str(sum(r.test_of is None for r in table.rows)), str(table.seeds),
                      *cells])
    cost = markdown_table(["table", "rows trained", "seeds",
                           *(f"{b}, {p}: hours (estimate)" for b, p in columns)], costs)
    return f"{per_row}\n\n{cost}"


def run(device: str, budgets: list[str], batches: int, table_names: list[str] | None = None,
        which: str = "first-last", named: list[str] | None = None,
        precisions: list[str | None] | None = None, fp32_first: bool = False,
        seconds: float | None = None) -> tuple[list[EpochTime], dict[str, Table]]:
    """Time the chosen rows of every table (or of ``table_names``), or the ``named`` rows,
    under each budget their table has and in each of ``precisions`` (see the module
    docstring), starting none after ``seconds`` (those left are reported as not timed);
    ``SystemExit`` listing the tables for an unknown name."""
    tables = load_tables()
    unknown = set(table_names or ()) - set(tables)
    if unknown:
        raise SystemExit(f"unknown table(s) {sorted(unknown)}; choose from {sorted(tables)}")
    chosen = named_rows(tables, named) if named else [
        (tables[name], row) for name in table_names or tables
        for row in chosen_rows(tables[name], which)]
    jobs = [(table, row, budget, precision) for table, row in chosen for budget in budgets
            if budget in table.budgets for precision in precisions or [None]]
    if fp32_first and jobs:
        jobs.insert(0, (*jobs[0][:3], "32-true"))
    times = []
    start = time.perf_counter()
    for table, row, budget, precision in jobs:
        if seconds is not None and time.perf_counter() - start > seconds:
            result = EpochTime(table.name, row.name, budget, precision=precision,
                               error=f"not started: --seconds {seconds:g} spent")
        else:
            result = time_row(table, row, budget, device, batches, precision)
        done = result.error or (f"{result.epoch_seconds:.1f} s per epoch, "
                                f"{result.batch_seconds * 1e3:.1f} ms per batch")
        print(f"{table.name} / {row.name} / {budget} / {result.precision}: {done}", flush=True)
        times.append(result)
    return times, tables


def main() -> None:
    """The command line (see the module docstring): prints the two tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--budgets", nargs="+", default=["cpu", "paper"])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--tables", nargs="+", help="default: every table")
    parser.add_argument("--rows", choices=["first-last", "all", "first"], default="first-last")
    parser.add_argument("--named", nargs="+", metavar="TABLE/ROW",
                        help="these rows instead of --tables/--rows")
    parser.add_argument("--precisions", nargs="+", help="default: as configured")
    parser.add_argument("--fp32-first", action="store_true",
                        help="also time the first row in 32-true")
    parser.add_argument("--seconds", type=float, help="start no row after this many seconds")
    args = parser.parse_args()
    times, tables = run(args.device, args.budgets, args.batches, args.tables, args.rows,
                        args.named, args.precisions, args.fp32_first, args.seconds)
    print(render(times, tables))


if __name__ == "__main__":
    main()
