"""The report of a table: its facts as data, then their Markdown.

Problem: a report says a great deal (our mean and spread beside the paper per row and metric,
the seed best on validation, group averages beside the paper's, the verdict on the paper's
claim, re-runs that differ from an earlier report, each seed, the runs' notes, where and when
they ran), and what it says must be tested apart from how it is printed.

Method: :func:`report_of` computes a :class:`Report` from the runs' results alone (the stored
``result.json`` of each run, and the ledger's :class:`EarlierReport`); :func:`markdown` prints
one, a short function per part. :func:`write_report` chooses the rows a report shows and writes
it.

Contract: a report is a function of the table, the budget, the seeds, the results, the earlier
report and the command's options (the torch version of this process only where no run recorded
one): the same ledger writes the same bytes (``tests/test_ledger_reports.py``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from .tables import Claim, Row, Table


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


@dataclass(frozen=True)
class EarlierReport:
    """Rows of an earlier report whose per-run results were lost, as it printed them: where it
    came from, ``{row name: RowSummary}`` and its notes (markdown lines)."""

    source: str = ""
    rows: dict[str, RowSummary] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    superseded: bool = False  # every row was run again: compared with, never shown


@dataclass(frozen=True)
class GroupCell:
    """A metric of a row group: the mean over its rows shown, the mean of their best-on-validation
    values (None when a row has none), the mean of the paper's numbers for them (None unless each
    has one) and the average the paper prints (None unless the whole group is shown with the
    paper's numbers)."""

    mean: float
    best: float | None
    paper: float | None
    printed: float | None


@dataclass(frozen=True)
class GroupAverage:
    """A row group: its name, its number of rows shown and a cell per metric key (None where no
    row shows the metric)."""

    group: str
    size: int
    cells: dict[str, GroupCell | None]


@dataclass(frozen=True)
class ClaimCheck:
    """The paper's claim on the seeds run for both of its rows: the labels of its metrics, the
    seeds, the misses ``(label, seed, better's value, worse's value)`` and the mean margin per
    metric."""

    claim: Claim
    labels: tuple[str, ...]
    seeds: tuple[int, ...]
    misses: tuple[tuple[str, int, float, float], ...]
    margins: tuple[float, ...]


@dataclass(frozen=True)
class Difference:
    """A row run again whose mean lies further from the earlier report's than the seed spread:
    ``(mean, std, seeds)`` here and there, both as the earlier report printed them apart."""

    row: str
    label: str
    now: tuple[float, float | None, int]
    before: tuple[float, float | None, int]
    apart: float
    spread: float


@dataclass(frozen=True)
class SeedValues:
    """The first metric of every run of a row shown from two or more runs."""

    row: str
    seeds: tuple[int | str, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class RunNote:
    """A note of the runs (``report_notes`` of a task): of every run (``row`` None) or of one."""

    key: str
    value: str
    row: str | None = None
    seed: int | str | None = None


@dataclass(frozen=True)
class Provenance:
    """What the runs recorded: torch versions (this process's where none did), threads per
    run, devices, the days they finished and how many recorded no day."""

    torch: tuple[str, ...]
    threads: tuple[int | str, ...]
    devices: tuple[str, ...]
    days: tuple[str, ...]
    undated: int


@dataclass(frozen=True)
class Report:
    """The facts of a report of ``table`` (its rows: those shown) at ``budget`` over ``seeds``."""

    table: Table
    budget: str
    seeds: range
    rows: dict[str, RowSummary]
    groups: tuple[GroupAverage, ...]
    claim: ClaimCheck | None
    differences: tuple[Difference, ...]
    per_seed: tuple[SeedValues, ...]
    notes: tuple[RunNote, ...]
    provenance: Provenance
    earlier: EarlierReport
    not_run: tuple[str, ...] = ()  # rows of the paper's table not run here
    cached_only: bool = False
    trainer: dict[str, str] = field(default_factory=dict)


def _best_of(runs: list[dict], key: str, select_by: str) -> float | None:
    """Test value ``key`` of the run with the best validation ``select_by`` (the lowest seed on
    ties), None when no run has both."""
    ranked = [r for r in runs if key in r["metrics"] and select_by in r.get("validation", {})]
    if not ranked:
        return None
    return max(ranked, key=lambda r: r["validation"][select_by])["metrics"][key]


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


def row_summaries(table: Table, results: dict[str, list[dict]], earlier: EarlierReport
                  ) -> dict[str, RowSummary]:
    """Per row, the summary of its runs, or the ``earlier`` report's row while that has more
    seeds (and is not superseded)."""
    rows = {}
    for row in table.rows:
        runs = results.get(row.name, [])
        before = None if earlier.superseded else earlier.rows.get(row.name)
        rows[row.name] = (before if before is not None and before.seeds > len(runs)
                          else summarize(table, runs))
    return rows


def group_averages(table: Table, rows: dict[str, RowSummary]) -> tuple[GroupAverage, ...]:
    """Every row group of the rows shown, in the table's order."""
    return tuple(_group_average(table, rows, group)
                 for group in dict.fromkeys(row.group for row in table.rows if row.group))


def _group_average(table: Table, rows: dict[str, RowSummary], group: str) -> GroupAverage:
    members = [row for row in table.rows if row.group == group and row.name in rows]
    size, printed = table.printed_averages.get(group, (0, {}))
    whole = len(members) == size
    return GroupAverage(group, len(members), {
        key: _group_cell(key, [row for row in members if key in rows[row.name].cells], rows,
                         printed.get(key) if whole else None)
        for key, _ in table.metrics})


def _group_cell(key: str, shown: list[Row], rows: dict[str, RowSummary],
                printed: float | None) -> GroupCell | None:
    """The averages of metric ``key`` over the rows ``shown`` (None when there are none)."""
    if not shown:
        return None
    bests = [rows[row.name].cells[key][2] for row in shown]
    papers = [row.paper[key] for row in shown if key in row.paper]
    paper = statistics.mean(papers) if len(papers) == len(shown) else None
    return GroupCell(mean=statistics.mean(rows[row.name].cells[key][0] for row in shown),
                     best=None if None in bests else statistics.mean(bests), paper=paper,
                     printed=printed if paper is not None else None)


def claim_check(table: Table, results: dict[str, list[dict]]) -> ClaimCheck | None:
    """The table's :class:`~.tables.Claim` checked on every seed run for both of its rows that
    logged its metrics; None when the table makes no claim or there is no such seed."""
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
    return ClaimCheck(
        claim, tuple(labels[key] for key in claim.metrics), tuple(seeds),
        tuple((labels[key], seed, table.scale * better[seed][key],
               table.scale * worse[seed][key])
              for seed in seeds for key in claim.metrics
              if not better[seed][key] > worse[seed][key]),
        tuple(statistics.mean(table.scale * (better[s][key] - worse[s][key]) for s in seeds)
              for key in claim.metrics))


def differences(table: Table, rows: dict[str, RowSummary], earlier: EarlierReport
                ) -> tuple[Difference, ...]:
    """Every metric of a row run again whose mean differs from the earlier report's by more than
    the seed spread (the larger standard deviation of the two; rows of one seed on both sides
    have none and are not compared). The earlier report printed one decimal, so both sides are
    compared as printed: 94.9 against 94.8 with a spread of 0.1 is within it."""
    found = []
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
                found.append(Difference(row.name, label, (mean, std, summary.seeds),
                                        (old, old_std, before.seeds), apart, spread))
    return tuple(found)


def per_seed(table: Table, results: dict[str, list[dict]], rows: dict[str, RowSummary]
             ) -> tuple[SeedValues, ...]:
    """The first metric of every run of the rows shown from two or more runs, so that a seed
    far from the others is seen rather than only widening the spread."""
    key = table.metrics[0][0]
    found = []
    for name, summary in rows.items():
        runs = [r for r in results.get(name, []) if key in r["metrics"]]
        if not summary.earlier and len(runs) >= 2:
            found.append(SeedValues(name, tuple(r.get("seed", "?") for r in runs),
                                    tuple(table.scale * r["metrics"][key] for r in runs)))
    return tuple(found)


def run_notes(table: Table, results: dict[str, list[dict]]) -> tuple[RunNote, ...]:
    """The runs' ``notes``: a note every run shares once, others per row and seed."""
    runs = [(row.name, r) for row in table.rows for r in results.get(row.name, [])]
    notes = []
    for key in sorted({key for _, r in runs for key in r.get("notes", {})}):
        values = {(name, r.get("seed", "?")): r["notes"][key] for name, r in runs
                  if key in r.get("notes", {})}
        if len(set(values.values())) == 1 and len(values) == len(runs):
            notes.append(RunNote(key, next(iter(values.values()))))
        else:
            notes += [RunNote(key, value, name, seed) for (name, seed), value in values.items()]
    return tuple(notes)


def provenance(results: dict[str, list[dict]]) -> Provenance:
    """What the runs of ``results`` recorded."""
    runs = [r for rows in results.values() for r in rows]
    return Provenance(
        torch=tuple(sorted({r["torch"] for r in runs if "torch" in r})) or (torch.__version__,),
        threads=tuple(sorted({r.get("threads", "?") for r in runs}, key=str)),
        devices=tuple(sorted({r["device"] for r in runs if "device" in r})),
        days=tuple(sorted({r["finished"] for r in runs if "finished" in r})),
        undated=sum("finished" not in r for r in runs))


def report_of(
    table: Table, budget: str, seeds: range, results: dict[str, list[dict]],
    not_run: tuple[str, ...] = (), cached_only: bool = False,
    earlier: EarlierReport = EarlierReport(), trainer: dict[str, str] | None = None,
) -> Report:
    """The facts of the report of ``table``'s rows over ``seeds`` from ``results`` (``{row
    name: results of its runs}``): a row of the ``earlier`` report is shown instead of its runs
    while it has more seeds than they do; ``not_run``: the rows of the paper's table left out;
    ``cached_only`` and ``trainer``: the command's options."""
    rows = row_summaries(table, results, earlier)
    return Report(
        table=table, budget=budget, seeds=seeds, rows=rows, groups=group_averages(table, rows),
        claim=claim_check(table, results), differences=differences(table, rows, earlier),
        per_seed=per_seed(table, results, rows), notes=run_notes(table, results),
        provenance=provenance(results), earlier=earlier, not_run=not_run,
        cached_only=cached_only, trainer=dict(trainer or {}))


def write_report(
    path: Path, table: Table, rows: list[Row], budget: str, seeds: range,
    results: dict[str, list[dict]], earlier: EarlierReport, cached_only: bool = False,
    trainer: dict[str, str] | None = None,
) -> Path:
    """Write to ``path`` the report of the ``rows`` chosen of ``table`` from ``results``; with
    ``cached_only`` a row with neither runs nor a row of the ``earlier`` report to show is left
    out, as not run."""
    if cached_only:
        shown = not earlier.superseded
        rows = [row for row in rows if results.get(row.name)
                or (shown and row.name in earlier.rows)]
    names = {row.name for row in rows}
    not_run = tuple(row.name for row in table.rows if row.name not in names)
    facts = report_of(replace(table, rows=tuple(rows)), budget, seeds, results, not_run,
                      cached_only, earlier, trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(facts))
    return path


def render(table: Table, budget: str, seeds: range, results: dict[str, list[dict]],
           **options) -> str:
    """The Markdown of :func:`report_of` (same arguments)."""
    return markdown(report_of(table, budget, seeds, results, **options))


def verdict(table: Table, results: dict[str, list[dict]]) -> str | None:
    """One sentence on the table's claim, from the seeds run for both of its rows
    (:func:`claim_check`): held in every seed and metric (with the mean margins), or where it
    did not; None when the table makes no claim or the rows share no seed."""
    check = claim_check(table, results)
    return None if check is None else _verdict_text(check)


# The Markdown of a report, part by part.


def markdown(report: Report) -> str:
    """The report: how it was produced, then ours (mean ± std over seeds) beside the paper per
    metric and the seeds of each row, then the verdict, footnotes and notes."""
    lines = [*_preamble(report), *_table_lines(report), *_footnotes(report)]
    notes = [*_difference_lines(report.differences, report.earlier.source),
             *_per_seed_lines(report), *_note_lines(report)]
    if report.earlier.notes and _shows_earlier(report):
        notes += ["**Notes from the earlier report:**", "", *report.earlier.notes, ""]
    return "\n".join([*lines, "", *notes]).rstrip("\n") + "\n"


def _preamble(report: Report) -> list[str]:
    table, seeds = report.table, report.seeds
    cached = "; the rows show the finished runs among them (column seeds)"
    return [
        f"# {table.title}", "",
        _produced_by(report), "",
        f"**Budget `{report.budget}`:** {table.budgets[report.budget][1]}. **Seeds:** "
        f"{seeds.start}..{seeds.stop - 1}{cached if report.cached_only else ''}.", "",
        f"**Data:** {table.note}", "",
        *([f"**Rows of the paper's table not run here:** {'; '.join(report.not_run)}.", ""]
          if report.not_run else []),
        "Cells: ours, "
        + (f"the test value of the seed best on {table.select_by} / " if table.select_by else "")
        + "mean ± standard deviation over seeds"
        f" ({'in %; ' if table.scale == 100 else ''}the mean alone for one seed), then the "
        "paper's number.", "",
    ]


def _produced_by(report: Report) -> str:
    """The command, when its runs finished, torch, threads and devices."""
    seeds, ran = report.seeds, report.provenance
    command = (f"structattn reproduce {report.table.name} --budget {report.budget} --seeds "
               f"{seeds.stop}{f' --first-seed {seeds.start}' if seeds.start else ''}"
               f"{' --cached-only' if report.cached_only else ''}"
               + "".join(f" --{key} {value}" for key, value in report.trainer.items()))
    days = ran.days
    when = ("" if not days else f" on {days[0]}" if len(days) == 1
            else f" from {days[0]} to {days[-1]}")
    threads = f", {'/'.join(map(str, ran.threads))} thread(s) per run" if ran.threads else ""
    devices = f", on {' / '.join(ran.devices)}" if ran.devices else ""
    undated = ""
    if days and ran.undated:  # runs filed before results recorded their day
        undated = (" One of its runs is older and recorded no date." if ran.undated == 1
                   else f" {ran.undated} of its runs are older and recorded no date.")
    return (f"Produced by `{command}`{when} (torch {'/'.join(ran.torch)}{threads}{devices})."
            f"{undated} Wall times are as measured on a shared 2-core machine, where several "
            "runs may have run at once.")


def _table_lines(report: Report) -> list[str]:
    table = report.table
    header = ["model", *[label for _, label in table.metrics], "seeds", "wall time / run"]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *(_row_line(report, row) for row in table.rows),
            *(_group_line(report, group) for group in report.groups)]


def _row_line(report: Report, row: Row) -> str:
    summary, select_by = report.rows[row.name], report.table.select_by
    cells = []
    for key, _ in report.table.metrics:
        ours = (_shown(*summary.cells[key], select_by) if key in summary.cells
                else "— / —" if select_by else "—")
        paper = row.paper.get(key)
        cells.append(ours if paper is None else f"{ours} (paper {paper:.1f})")
    return (f"| {row.name} | " + " | ".join(cells)
            + f" | {summary.seeds}{'†' if summary.earlier else ''} | "
            f"{summary.wall_minutes:.1f} min{'*' if summary.partial_wall else ''} |")


def _shown(mean: float, std: float | None, best: float | None, select_by: str | None) -> str:
    cell = f"{mean:.1f}" if std is None else f"{mean:.1f} ± {std:.1f}"
    return f"{'—' if best is None else f'{best:.1f}'} / {cell}" if select_by else cell


def _group_line(report: Report, group: GroupAverage) -> str:
    """The averages of a row group beside the average of the paper's numbers for the same rows
    and, where the paper prints one, its own (labelled, as they may differ)."""
    cells = []
    for key, _ in report.table.metrics:
        cell = group.cells[key]
        if cell is None:
            cells.append("—")
            continue
        text = f"{cell.mean:.1f}"
        if report.table.select_by:
            text = f"{'—' if cell.best is None else f'{cell.best:.1f}'} / {text}"
        if cell.printed is not None:
            text += f" (paper: printed {cell.printed:.1f}, mean of its rows {cell.paper:.1f})"
        elif cell.paper is not None:
            text += f" (paper {cell.paper:.1f})"
        cells.append(text)
    rows = f"{group.size} row{'s' if group.size != 1 else ''}"
    return f"| average, {group.group} ({rows}) | " + " | ".join(cells) + " | — | — |"


def _verdict_text(check: ClaimCheck) -> str:
    better, worse = check.claim.better, check.claim.worse
    where = _series(list(check.labels))
    seeds = check.seeds
    runs = f"seed {seeds[0]}" if len(seeds) == 1 else f"each of the {len(seeds)} seeds"
    if check.misses:
        misses = "; ".join(f"{label}, seed {seed} ({ours:.1f} vs {theirs:.1f})"
                           for label, seed, ours, theirs in check.misses)
        return (f"**Verdict:** {better} is not above {worse} at {where} in {runs}: not at "
                f"{misses}. The paper's claim does not hold in these runs.")
    margins = _series([f"{margin:.1f}" for margin in check.margins])
    return (f"**Verdict:** {better} is above {worse} at {where} in {runs}, as the paper "
            f"reports (by {margins} points{' on average' if len(seeds) > 1 else ''}).")


def _series(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _shows_earlier(report: Report) -> bool:
    return any(summary.earlier for summary in report.rows.values())


def _footnotes(report: Report) -> list[str]:
    """The verdict, then what the marks of the table mean."""
    lines = ["", _verdict_text(report.claim)] if report.claim else []
    if any(summary.partial_wall for summary in report.rows.values()):
        lines += ["", "\\* a run of this row was interrupted and resumed from its last "
                  "checkpoint: its wall time counts only the part after the resumption."]
    if _shows_earlier(report):
        lines += ["", f"† as printed by an earlier report ({report.earlier.source}), whose "
                  "per-run results were lost with the machine that ran them; shown until as "
                  "many seeds are run again."]
    return lines


def _difference_lines(found: tuple[Difference, ...], source: str) -> list[str]:
    """The differences ``found`` from the earlier report of ``source``."""
    lines = [f"- {d.row}, {d.label}: {_spread(*d.now)} seeds here, {_spread(*d.before)} in the "
             f"earlier report: {d.apart:.1f} apart, more than the seed spread ({d.spread:.1f})"
             for d in found]
    if not lines:
        return []
    return [f"**Re-runs that differ from the earlier report ({source}) by more than the seed "
            "spread:**", "", *lines, ""]


def _spread(mean: float, std: float | None, seeds: int) -> str:
    return f"{mean:.1f} ± {'—' if std is None else f'{std:.1f}'} over {seeds}"


def _per_seed_lines(report: Report) -> list[str]:
    lines = [f"- {s.row}, seeds {', '.join(map(str, s.seeds))}: "
             + ", ".join(f"{value:.1f}" for value in s.values) for s in report.per_seed]
    label = report.table.metrics[0][1]
    return [f"**Per seed ({label}):**", "", *lines, ""] if lines else []


def _note_lines(report: Report) -> list[str]:
    lines = [f"- {n.key}: `{n.value}`" if n.row is None
             else f"- {n.row}, seed {n.seed}: {n.key}: {n.value}" for n in report.notes]
    return ["**Notes from the runs:**", "", *lines, ""] if lines else []
