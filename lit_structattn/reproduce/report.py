"""The report of a table: its facts as data, then their Markdown.

Problem: a report says a great deal (the verdict on each of the paper's claims, our mean and
spread beside the paper per row and metric, the seed best on validation, group averages beside
the paper's, re-runs that differ from an earlier report, each seed, the runs' notes, the code,
libraries and machines the runs recorded), and what it says must be tested apart from how it is
printed.

Method: :func:`report_of` computes a :class:`Report` from the runs' results alone (the stored
``result.json`` of each run, and the ledger's :class:`EarlierReport`), its claims' verdicts by
:mod:`.claims`; :func:`markdown` prints one, a short function per part. :func:`shown_report`
chooses the rows a report shows, :func:`write_report` writes it.

Contract: a report is a function of the table, the budget, the seeds, the results, the earlier
report, the verdicts of the claims its claims ``see`` in other tables, and the command's
options; nothing of the process that writes it (its torch version, its machine) enters it: the
same ledger writes the same bytes (``tests/test_ledger_reports.py``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from .claims import UNTESTABLE, Sample, Verdict, verdicts
from .tables import Comparison, GroupComparison, Row, Table, Value

#: the fields of a run's provenance (:mod:`.provenance`) a report prints, in its order
PROVENANCE_FIELDS = ("finished", "commit", "torch", "lightning", "python", "threads", "device")

#: ``{(table, claim name): ((budget, verdict), ...)}``: the verdicts of claims of other tables
#: (at each budget with runs; none when not run), as a claim's ``see`` cites them
Cited = dict[tuple[str, str], tuple[tuple[str, Verdict], ...]]


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
    """What the report's ``runs`` recorded (:mod:`.provenance`): per field of
    :data:`PROVENANCE_FIELDS`, its distinct values with their numbers of runs, in value order
    (the runs without one: ``runs`` minus their sum)."""

    runs: int
    recorded: dict[str, tuple[tuple[str, int], ...]]


@dataclass(frozen=True)
class Report:
    """The facts of a report of ``table`` (its rows: those shown) at ``budget`` over ``seeds``."""

    table: Table
    budget: str
    seeds: range
    rows: dict[str, RowSummary]
    groups: tuple[GroupAverage, ...]
    claims: tuple[Verdict, ...]
    differences: tuple[Difference, ...]
    per_seed: tuple[SeedValues, ...]
    notes: tuple[RunNote, ...]
    provenance: Provenance
    earlier: EarlierReport
    not_run: tuple[str, ...] = ()  # rows of the paper's table not run here
    cached_only: bool = False
    trainer: dict[str, str] = field(default_factory=dict)
    cited: Cited = field(default_factory=dict)  # the verdicts the claims' ``see`` names


def _best_of(runs: list[dict], key: str, select_by: str, top: int = 1) -> float | None:
    """Test value ``key`` of the run with the best validation ``select_by`` (the lowest seed on
    ties), or the mean over the ``top`` best runs; None when no run has both."""
    ranked = sorted((r for r in runs if key in r["metrics"]
                     and select_by in r.get("validation", {})),
                    key=lambda r: -r["validation"][select_by])  # stable: seed order on ties
    if not ranked:
        return None
    return statistics.mean(r["metrics"][key] for r in ranked[:top])


def summarize(table: Table, runs: list[dict]) -> RowSummary:
    """The summary of one row's finished runs (at least one)."""
    cells = {}
    for key, _ in table.metrics:
        values = [table.scale * r["metrics"][key] for r in runs if key in r["metrics"]]
        if values:
            best = (_best_of(runs, key, table.select_by, table.select_top.get(key, 1))
                    if table.select_by else None)
            cells[key] = (statistics.mean(values),
                          statistics.stdev(values) if len(values) > 1 else None,
                          None if best is None else table.scale * best)
    return RowSummary(cells, len(runs), statistics.mean(r["wall_seconds"] for r in runs) / 60,
                      any("resumed_from" in r and "wall_seconds_before_resume" not in r
                          for r in runs))


def row_summaries(table: Table, results: dict[str, list[dict]], earlier: EarlierReport
                  ) -> dict[str, RowSummary]:
    """Per row, the summary of its runs, or the ``earlier`` report's row while that has more
    seeds (and is not superseded); a row with neither has none."""
    rows = {}
    for row in table.rows:
        runs = results.get(row.name, [])
        before = None if earlier.superseded else earlier.rows.get(row.name)
        if before is not None and before.seeds > len(runs):
            rows[row.name] = before
        elif runs:
            rows[row.name] = summarize(table, runs)
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


def claim_verdicts(table: Table, results: dict[str, list[dict]], rows: dict[str, RowSummary]
                   ) -> tuple[Verdict, ...]:
    """The verdict on each claim of ``table`` (:func:`.claims.verdicts`) from ``results`` and,
    for a row shown from an earlier report, its mean, spread and seeds there (``rows``: the row
    summaries a report shows)."""
    earlier = {name: {key: Sample(mean, None if std is None else std**2, summary.seeds)
                      for key, (mean, std, _) in summary.cells.items()}
               for name, summary in rows.items() if summary.earlier}
    return verdicts(table, results, earlier)


def table_verdicts(table: Table, results: dict[str, list[dict]], earlier: EarlierReport
                   ) -> tuple[Verdict, ...]:
    """The verdicts of ``table``'s report over all its rows from ``results`` and ``earlier``."""
    return claim_verdicts(table, results, row_summaries(table, results, earlier))


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
    """What the runs of ``results`` recorded: only that, never what this process runs on."""
    runs = [r for rows in results.values() for r in rows]
    return Provenance(len(runs), {
        name: tuple(sorted(Counter(v for r in runs if (v := _recorded(r, name)) is not None
                                   ).items()))
        for name in PROVENANCE_FIELDS})


def _recorded(run: dict, name: str) -> str | None:
    """Field ``name`` of a run's provenance as a report prints it (None when not recorded): a
    commit as its first 10 hex digits, marked when tracked files differed from it, or the
    version of an installed package."""
    if name != "commit":
        return None if run.get(name) is None else str(run[name])
    if run.get("commit"):
        return run["commit"][:10] + (" (uncommitted changes)" if run.get("dirty") else "")
    return None if run.get("version") is None else f"installed version {run['version']}"


def report_of(
    table: Table, budget: str, seeds: range, results: dict[str, list[dict]],
    not_run: tuple[str, ...] = (), cached_only: bool = False,
    earlier: EarlierReport = EarlierReport(), trainer: dict[str, str] | None = None,
    cited: Cited | None = None,
) -> Report:
    """The facts of the report of ``table``'s rows over ``seeds`` from ``results`` (``{row
    name: results of its runs}``): a row of the ``earlier`` report is shown instead of its runs
    while it has more seeds than they do; ``not_run``: the rows of the paper's table left out;
    ``cached_only`` and ``trainer``: the command's options; ``cited``: the verdicts of the
    claims of other tables that its claims ``see`` (not run where absent)."""
    rows = row_summaries(table, results, earlier)
    return Report(
        table=table, budget=budget, seeds=seeds, rows=rows, groups=group_averages(table, rows),
        claims=claim_verdicts(table, results, rows),
        differences=differences(table, rows, earlier),
        per_seed=per_seed(table, results, rows), notes=run_notes(table, results),
        provenance=provenance(results), earlier=earlier, not_run=not_run,
        cached_only=cached_only, trainer=dict(trainer or {}), cited=dict(cited or {}))


def shown_report(
    table: Table, rows: list[Row], budget: str, seeds: range, results: dict[str, list[dict]],
    earlier: EarlierReport, cached_only: bool = False, trainer: dict[str, str] | None = None,
    cited: Cited | None = None,
) -> Report:
    """The report of the ``rows`` chosen of ``table`` (:func:`report_of`); with
    ``cached_only`` a row with neither runs nor a row of the ``earlier`` report to show is left
    out, as not run."""
    if cached_only:
        shown = not earlier.superseded
        rows = [row for row in rows if results.get(row.name)
                or (shown and row.name in earlier.rows)]
    names = {row.name for row in rows}
    not_run = tuple(row.name for row in table.rows if row.name not in names)
    return report_of(replace(table, rows=tuple(rows)), budget, seeds, results, not_run,
                     cached_only, earlier, trainer, cited)


def write_report(path: Path, report: Report) -> Path:
    """Write the Markdown of ``report`` to ``path``; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(report))
    return path


def render(table: Table, budget: str, seeds: range, results: dict[str, list[dict]],
           **options) -> str:
    """The Markdown of :func:`report_of` (same arguments)."""
    return markdown(report_of(table, budget, seeds, results, **options))


# The Markdown of a report, part by part.


def markdown(report: Report) -> str:
    """The report: the verdicts on the paper's claims, how it was produced, then ours (mean ±
    std over seeds) beside the paper per metric and the seeds of each row, footnotes and
    notes."""
    lines = [*_preamble(report), *_table_lines(report), *_footnotes(report)]
    notes = [*_difference_lines(report.differences, report.earlier.source),
             *_per_seed_lines(report), *_note_lines(report)]
    if report.earlier.notes and _shows_earlier(report):
        notes += ["**Notes from the earlier report:**", "", *report.earlier.notes, ""]
    return "\n".join([*lines, "", *notes]).rstrip("\n") + "\n"


def _preamble(report: Report) -> list[str]:
    table, seeds = report.table, report.seeds
    cached = "; the rows show the finished runs among them (column seeds)"
    of_a_paper = any(row.paper for row in table.rows)
    return [
        f"# {table.title}", "",
        *(claims_table(report.claims) if of_a_paper or report.claims else
          ["**Claims:** none: this table compares this library's own rows, with no paper's "
           "numbers beside them.", ""]),
        *_bug_or_budget(report),
        _produced_by(report), "",
        *_provenance_lines(report.provenance),
        f"**Budget `{report.budget}`:** {table.budgets[report.budget][1]}. **Seeds:** "
        f"{seeds.start}..{seeds.stop - 1}{cached if report.cached_only else ''}.", "",
        f"**Data:** {table.note}", "",
        *([f"**Rows of the paper's table not run here:** {'; '.join(report.not_run)}.", ""]
          if report.not_run else []),
        "Cells: ours, "
        + (f"the test value of the seed best on {table.select_by}{_top_text(table)} / "
           if table.select_by else "")
        + "mean ± standard deviation over seeds"
        f" ({'in %; ' if table.scale == 100 else ''}the mean alone for one seed)"
        + (", then the paper's number." if of_a_paper else "."), "",
    ]


#: the verdict rule in one sentence, under every claims table
RULE = (
    "Paper and ours: A − B for a comparison of rows A and B (of row groups: its mean over the "
    "groups' paired rows, e.g. one task each), the row's mean for a value; the verdict, by one "
    "rule (`lit_structattn/reproduce/claims.py`), takes t = our difference in the paper's "
    "direction over its standard error across seeds (Welch) and says reproduced "
    "for t ≥ 2, same sign within spread for 0 < t < 2, reversed within spread for −2 < t ≤ 0 "
    "and contradicted for t ≤ −2 (a value: reproduced when within its tolerance plus 2 SE), "
    "and untestable where the claim says so, or a row was not run or has fewer than 2 seeds.")


def claims_table(found: tuple[Verdict, ...]) -> list[str]:
    """The verdicts ``found`` as a Markdown table with the rule under it, or one line when the
    table states no claims."""
    if not found:
        return ["**Claims:** this table states no claims of the paper yet.", ""]
    return ["| claim | paper | ours | SE | seeds won | verdict |", "|---|---|---|---|---|---|",
            *(f"| {v.claim.name}{f' ({v.claim.source})' if v.claim.source else ''} | "
              f"{_paper_cell(v)} | {_ours_cell(v)} | {_number(v.se, '.2f')} | {_won(v)} | "
              f"{_verdict_cell(v)} |" for v in found), "", RULE, ""]


def _paper_cell(found: Verdict) -> str:
    states = found.claim.states
    if isinstance(states, Value):
        return f"{states.value:.1f} (tolerance {states.tolerance:.1f})"
    return _number(found.paper, "+.1f")


def _ours_cell(found: Verdict) -> str:
    signed = isinstance(found.claim.states, Comparison | GroupComparison)
    return _number(found.ours, "+.1f" if signed else ".1f")


def _number(value: float | None, form: str) -> str:
    return "—" if value is None else format(value, form)


def _won(found: Verdict) -> str:
    return "—" if found.won is None else f"{found.won[0]} of {found.won[1]}"


def _verdict_cell(found: Verdict) -> str:
    if found.verdict == UNTESTABLE:
        return f"untestable: {found.reason}"
    return f"{found.verdict} ({found.reason})"


def _bug_or_budget(report: Report) -> list[str]:
    """For each claim with ``evidence`` or ``see``: its evidence and the verdicts of the same
    claim in the other tables it names."""
    lines = []
    for found in report.claims:
        claim = found.claim
        if not claim.evidence and not claim.see:
            continue
        lines.append(f"- **{claim.name}:**{''.join(f' {text}' for text in claim.evidence)}")
        for other_table, other_claim in claim.see:
            cited = report.cited.get((other_table, other_claim), ())
            lines += [f"  - {other_table} (budget `{budget}`), {other_claim}: {_cited(v)}"
                      for budget, v in cited] or [f"  - {other_table}, {other_claim}: not run."]
    return ["**Bug or budget:**", "", *lines, ""] if lines else []


def _cited(found: Verdict) -> str:
    """A verdict cited from another table, with its numbers."""
    numbers = [f"paper {_paper_cell(found)}", f"ours {_ours_cell(found)}",
               f"SE {_number(found.se, '.2f')}", f"seeds won {_won(found)}"]
    return f"{_verdict_cell(found)}; {', '.join(numbers)}."


def _top_text(table: Table) -> str:
    """`` (facts: the mean of the 10 best)`` for the metrics with a ``select_top``."""
    labels = dict(table.metrics)
    parts = [f"{labels[key]}: the mean of the {top} best" for key, top in table.select_top.items()]
    return f" ({'; '.join(parts)})" if parts else ""


def _produced_by(report: Report) -> str:
    """The command."""
    seeds = report.seeds
    command = (f"structattn reproduce {report.table.name} --budget {report.budget} --seeds "
               f"{seeds.stop}{f' --first-seed {seeds.start}' if seeds.start else ''}"
               f"{' --cached-only' if report.cached_only else ''}"
               + "".join(f" --{key} {value}" for key, value in report.trainer.items()))
    return (f"Produced by `{command}`. Wall times are as measured on a shared 2-core machine, "
            "where several runs may have run at once.")


def _provenance_lines(ran: Provenance) -> list[str]:
    """Per field, the values the runs recorded with their numbers of runs, and how many runs
    recorded none."""
    if not ran.runs:
        return ["**Provenance:** the report shows no run of its own.", ""]
    lines = []
    for name, values in ran.recorded.items():
        missing = ran.runs - sum(count for _, count in values)
        shown = [f"{value} ({_runs(count)})" for value, count in values]
        if missing:
            shown.append(f"not recorded ({_runs(missing)})")
        lines.append(f"- {name}: {'; '.join(shown)}")
    return [f"**Provenance, as its {_runs(ran.runs)} recorded it:**", "", *lines, ""]


def _runs(count: int) -> str:
    return f"{count} run{'s' if count != 1 else ''}"


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


def _shows_earlier(report: Report) -> bool:
    return any(summary.earlier for summary in report.rows.values())


def _footnotes(report: Report) -> list[str]:
    """What the marks of the table mean."""
    lines = []
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
