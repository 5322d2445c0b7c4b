"""Seconds per training epoch of the reproduction tables' rows on one device, and what a whole
reproduction of each table would cost there.

Each timed row is built exactly as ``structattn reproduce TABLE --budget BUDGET`` builds it (its
configs, overrides and the budget's overlay), then trained for ``--batches`` batches on the
device with no validation, logger, callbacks or checkpoints. A callback times every training
batch (waiting for a CUDA device at its end); the first two are warm-up. Seconds per epoch =
the median batch time x the batches of one epoch of the budget's training data (validation is
not counted). A whole table = seconds per epoch x the budget's ``max_epochs`` x rows x seeds, the
mean of the timed rows standing for the others: an estimate, labelled so.

    python -m bench.epoch_seconds [--device cuda] [--budgets cpu paper] [--batches 12]
        [--tables nli ...] [--rows first-last|all]
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
    """One timed row of one budget: seconds per epoch, or why it could not be timed."""

    table: str
    row: str
    budget: str
    batch_seconds: float | None = None
    batches_per_epoch: int | None = None
    max_epochs: int | None = None
    error: str | None = None

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


def time_row(table: Table, row: Row, budget: str, device: str = "cpu", batches: int = 12
             ) -> EpochTime:
    """Train ``row`` under ``budget`` for ``batches`` batches on ``device`` and time it (see the
    module docstring). Errors (e.g. a budget whose data is not on this machine) are returned in
    ``error``, not raised."""
    from lit_structattn.lightning_cli import build_cli

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
              "false", "--seed_everything", "0"]
    name = dict(table=table.name, row=row.name, budget=budget)
    try:
        cli = build_cli([*args, *timing], run=False)
        timer = BatchTimer(torch.device(device))
        cli.trainer.callbacks.append(timer)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        per_epoch = len(cli.datamodule.train_dataloader())
    except Exception as error:  # noqa: BLE001 - reported in the table instead
        return EpochTime(**name, error=f"{type(error).__name__}: {error}".splitlines()[0][:160])
    steady = timer.seconds[WARMUP:] or timer.seconds
    return EpochTime(**name, batch_seconds=statistics.median(steady),
                     batches_per_epoch=per_epoch, max_epochs=cli.trainer.max_epochs)


def chosen_rows(table: Table, which: str) -> list[Row]:
    """The rows to time: all of them, or the first and the last (usually the simplest model
    and the most structured one); ``test_of`` rows train nothing and are skipped."""
    rows = [row for row in table.rows if row.test_of is None]
    return rows if which == "all" or len(rows) == 1 else [rows[0], rows[-1]]


def table_cost_hours(times: list[EpochTime], table: Table, budget: str) -> float | None:
    """Estimated hours of a whole reproduction of ``table`` under ``budget`` (see the module
    docstring), or None when no row of it could be timed."""
    timed = [t for t in times if t.table == table.name and t.budget == budget
             and t.epoch_seconds is not None and t.max_epochs is not None]
    if not timed:
        return None
    per_row = statistics.mean(t.epoch_seconds * max(t.max_epochs, 1) for t in timed)
    trained = sum(row.test_of is None for row in table.rows)
    return per_row * trained * table.seeds / 3600


def render(times: list[EpochTime], tables: dict[str, Table], budgets: list[str]) -> str:
    """Two markdown tables: seconds per epoch of every timed row, and each table's cost."""
    from bench.timing import markdown_table

    rows = []
    for t in times:
        if t.error:
            rows.append([t.table, t.row, t.budget, "-", "-", "-", f"not timed: {t.error}"])
            continue
        rows.append([t.table, t.row, t.budget, f"{t.batch_seconds * 1e3:.1f}",
                     str(t.batches_per_epoch), f"{t.epoch_seconds:.1f}", str(t.max_epochs)])
    per_row = markdown_table(["table", "row", "budget", "ms / batch", "batches / epoch",
                              "s / epoch", "epochs"], rows)
    costs = []
    for name in dict.fromkeys(t.table for t in times):
        table = tables[name]
        cells = []
        for budget in budgets:
            hours = table_cost_hours(times, table, budget)
            cells.append("-" if hours is None else f"{hours:.1f}")
        costs.append([name, str(sum(r.test_of is None for r in table.rows)), str(table.seeds),
                      *cells])
    cost = markdown_table(["table", "rows trained", "seeds",
                           *(f"{b}: hours (estimate)" for b in budgets)], costs)
    return f"{per_row}\n\n{cost}"


def run(device: str, budgets: list[str], batches: int, table_names: list[str] | None = None,
        which: str = "first-last") -> tuple[list[EpochTime], dict[str, Table]]:
    """Time the chosen rows of every table (or of ``table_names``) under each budget it has;
    ``SystemExit`` listing the tables for an unknown name."""
    tables = load_tables()
    unknown = set(table_names or ()) - set(tables)
    if unknown:
        raise SystemExit(f"unknown table(s) {sorted(unknown)}; choose from {sorted(tables)}")
    times = []
    for name in table_names or tables:
        for budget in budgets:
            if budget not in tables[name].budgets:
                continue
            for row in chosen_rows(tables[name], which):
                result = time_row(tables[name], row, budget, device, batches)
                print(f"{name} / {row.name} / {budget}: "
                      f"{result.error or f'{result.epoch_seconds:.1f} s per epoch'}", flush=True)
                times.append(result)
    return times, tables


def main() -> None:
    """The command line (see the module docstring): prints the two tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--budgets", nargs="+", default=["cpu", "paper"])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--tables", nargs="+", help="default: every table")
    parser.add_argument("--rows", choices=["first-last", "all"], default="first-last")
    args = parser.parse_args()
    times, tables = run(args.device, args.budgets, args.batches, args.tables, args.rows)
    print(render(times, tables, args.budgets))


if __name__ == "__main__":
    main()
