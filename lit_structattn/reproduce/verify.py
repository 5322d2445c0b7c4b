"""``structattn reproduce TABLE --verify ROW``: does today's code still give what the ledger
recorded?

Problem: a ledger row was run with the code of its day; the code moves on. Re-running the whole
row costs hours, and one re-run seed says little unless it is judged against the spread the
recorded seeds show.

Method: train and test one seed of the row with today's code in a fresh folder (never filed in
the ledger), then for every metric of the table compare the new value with the recorded runs of
the row: it lands *inside the recorded spread* when it lies within two standard deviations of
their mean (the spread of a single seed's value: rows with one recorded seed give the difference
only). The recorded value of the same seed is shown beside it.

Contract: nothing in the ledger or the reports changes; the runner re-runs the seed, then
:func:`compare` judges it against :func:`recorded_runs` and :func:`verification_lines` prints
it; the command exits with status 1 when a metric lands outside the spread.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from .ledger import stored_runs
from .tables import Row, Table


@dataclass(frozen=True)
class MetricCheck:
    """One metric of the re-run (report units): its value, the recorded runs' mean and standard
    deviation (None for one run) over ``seeds`` runs, the recorded value of the same seed (None
    when that seed was not recorded), and whether it lands inside the spread (None when there
    is no spread to judge by)."""

    label: str
    value: float
    mean: float
    std: float | None
    seeds: int
    same_seed: float | None
    inside: bool | None


def compare(table: Table, seed: int, result: dict, recorded: list[dict]) -> list[MetricCheck]:
    """Every metric of ``table`` that the re-run ``result`` (of ``seed``) and the ``recorded``
    results of the row both have, judged against the recorded spread."""
    checks = []
    for key, label in table.metrics:
        found = {r.get("seed"): table.scale * r["metrics"][key] for r in recorded
                 if key in r["metrics"]}
        if key not in result["metrics"] or not found:
            continue
        value, values = table.scale * result["metrics"][key], list(found.values())
        mean = statistics.mean(values)
        std = statistics.stdev(values) if len(values) > 1 else None
        checks.append(MetricCheck(label, value, mean, std, len(values), found.get(seed),
                                  None if std is None else abs(value - mean) <= 2 * std))
    return checks


def recorded_runs(table: Table, row: Row, budget: str, results: Path) -> list[dict]:
    """The runs of ``row`` recorded in the ledger ``results`` among the table's seeds;
    ``ValueError`` when there are none (nothing to verify against)."""
    recorded = stored_runs(table, [row], budget, range(table.seeds), None, results)[row.name]
    if not recorded:
        raise ValueError(f"the ledger {results} records no run of {table.name} {row.name!r} at "
                         f"budget {budget}: nothing to verify against")
    return recorded


def verification_lines(table: Table, row_name: str, seed: int, checks: list[MetricCheck]
                       ) -> list[str]:
    """The comparison as Markdown lines: a table, then one sentence."""
    lines = [f"{table.name}, {row_name!r}: seed {seed} re-run with today's code against the "
             "recorded runs (inside = within 2 standard deviations of their mean)", "",
             "| metric | re-run | recorded | same seed recorded | inside the spread |",
             "|---|---|---|---|---|"]
    for c in checks:
        spread = f"{c.mean:.2f} ± {'—' if c.std is None else f'{c.std:.2f}'} over {c.seeds}"
        same = "—" if c.same_seed is None else f"{c.same_seed:.2f}"
        inside = {True: "yes", False: "**no**", None: "one seed: no spread"}[c.inside]
        lines.append(f"| {c.label} | {c.value:.2f} | {spread} | {same} | {inside} |")
    outside = [c.label for c in checks if c.inside is False]
    lines += ["", f"Outside the recorded spread: {', '.join(outside)}." if outside
              else "Every metric with a recorded spread lands inside it."]
    return lines
