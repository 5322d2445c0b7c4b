"""Where the results of a reproduction live, and the reports a ledger gives alone.

Run folders: each run of a table's row writes ``<root>/<table>/<budget>/<row>/seed<k>/`` (its
logs and checkpoints) and, once finished, ``result.json`` there; a ``same_run_as`` row reads and
writes the folder of the other table's row.

The ledger: ``<results>/<table>/<budget>/<row>/seed<k>.json``, one file per finished run, which
maintainers commit beside the reports (``reports/results``), so that a report can be written
again, and finished runs skipped, on a machine whose run folders are gone. Its
``<table>/<budget>/earlier.json`` holds rows of an earlier report whose per-run results were
lost, as that report printed them: the report shows such a row until as many seeds are run
again, and notes where a re-run differs from it by more than the seed spread. Once every row of
it is run again, the file is renamed ``superseded.json``: no row is shown from it, only those
notes.

Verdict drift: :func:`write_ledger_reports` writes ``<table>/<budget>/verdicts.json`` beside
the ledger's results, ``{"ledger": digest, "verdicts": {claim: verdict}}``, where the digest is
the SHA-256 of the results and earlier reports of every ledger folder the report reads: its own,
those it shares runs with and those of the tables its claims cite (:func:`read_folders`,
:func:`ledger_digest`). A verdict that changes while the digest stays the same changed by code
or by a claim's definition, not by a run: :func:`write_ledger_reports` refuses it
(:class:`VerdictDrift`) unless told to accept it.

Contract: every folder is an argument; nothing here knows where a repository or its
``reports/`` is.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .report import (
    Cited,
    EarlierReport,
    Report,
    RowSummary,
    shown_report,
    table_verdicts,
    write_report,
)
from .tables import BUDGETS, TABLES, Row, Table

VERDICTS_FILE = "verdicts.json"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")


def row_folder(table: Table, row: Row, budget: str, base: Path) -> Path:
    """``base/<table>/<budget>/<row>``, of the other table for a ``same_run_as`` row."""
    if row.same_run_as is not None:
        table, row = _shared_row(table, row)
    return base / table.name / budget / _slug(row.name)


def run_dir(table: Table, row: Row, budget: str, seed: int, root: Path) -> Path:
    """The run folder of ``row`` and ``seed`` under ``root``."""
    return row_folder(table, row, budget, root) / f"seed{seed}"


def ledger_file(table: Table, row: Row, budget: str, seed: int, results: Path) -> Path:
    """The entry of ``row`` and ``seed`` in the ledger ``results``."""
    return row_folder(table, row, budget, results) / f"seed{seed}.json"


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


def cached_result(
    table: Table, row: Row, budget: str, seed: int, root: Path | None,
    results: Path | None = None,
) -> dict | None:
    """The stored result of one finished run (in its run folder under ``root``, else in the
    ledger ``results``), or None."""
    candidates = [*([run_dir(table, row, budget, seed, root) / "result.json"] if root else []),
                  *([ledger_file(table, row, budget, seed, results)] if results else [])]
    for result_file in candidates:
        if result_file.exists():
            return json.loads(result_file.read_text())
    return None


def file_result(result: dict, table: Table, row: Row, budget: str, seed: int,
                results: Path | None) -> None:
    """Write ``result`` into the ledger ``results`` (if given and not there yet)."""
    if results is None:
        return
    entry = ledger_file(table, row, budget, seed, results)
    if not entry.exists():
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text(json.dumps(result, indent=2) + "\n")


def stored(
    table: Table, row: Row, budget: str, seed: int, root: Path | None, results: Path | None,
) -> dict | None:
    """:func:`cached_result`, filed in the ledger ``results`` when found."""
    result = cached_result(table, row, budget, seed, root, results)
    if result is not None:
        file_result(result, table, row, budget, seed, results)
    return result


def stored_runs(
    table: Table, rows: list[Row], budget: str, seeds: range, root: Path | None,
    results: Path | None, file: bool = True,
) -> dict[str, list[dict]]:
    """``{row name: the stored results among seeds}`` of each of ``rows``: :func:`stored`, or
    with ``file=False`` :func:`cached_result` (nothing filed in the ledger)."""
    find = stored if file else cached_result
    found = {row.name: [find(table, row, budget, seed, root, results) for seed in seeds]
             for row in rows}
    return {name: [r for r in runs if r is not None] for name, runs in found.items()}


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


def cited_verdicts(table: Table, root: Path | None, results: Path | None) -> Cited:
    """The verdicts of the claims of other tables that ``table``'s claims ``see``, at each
    budget of the other table with runs stored under ``root`` or in the ledger ``results``
    (over its report's seeds, with its earlier report), as its own report computes them; none
    where it has no run. Nothing is filed in the ledger."""
    cited: Cited = {}
    for other_name, claim in {pair for c in table.claims for pair in c.see}:
        other = TABLES[other_name]
        found = []
        for budget in (b for b in BUDGETS if b in other.budgets):
            runs = stored_runs(other, list(other.rows), budget, range(other.seeds), root,
                               results, file=False)
            earlier = earlier_report(other, budget, results)
            if any(runs.values()) or earlier.rows:
                found += [(budget, v) for v in table_verdicts(other, runs, earlier)
                          if v.claim.name == claim]
        cited[other_name, claim] = tuple(found)
    return cited


def ledger_report_name(table: str, budget: str) -> str:
    """The committed report of ``table`` at ``budget``: ``<table>.md`` for the ``cpu`` budget
    (the reports beside the papers' tables), ``<table>_<budget>.md`` for the others."""
    return f"{table}.md" if budget == "cpu" else f"{table}_{budget}.md"


class VerdictDrift(RuntimeError):
    """Verdicts that changed while the ledger they come from did not."""


def read_folders(table: Table, budget: str, results: Path) -> list[Path]:
    """The ledger folders that ``table``'s report at ``budget`` reads, those that exist: its
    own ``<results>/<table>/<budget>``, the same budget's of the tables its rows share runs with
    (``same_run_as``), and every budget's of the tables its claims cite (``see``)."""
    names = {(table.name, budget)}
    names |= {(row.same_run_as[0], budget) for row in table.rows if row.same_run_as}
    names |= {(other, b) for claim in table.claims for other, _ in claim.see for b in BUDGETS}
    return [results / name / b for name, b in sorted(names) if (results / name / b).is_dir()]


def ledger_digest(results: Path, folders: list[Path]) -> str:
    """The SHA-256 over the sorted ``(path relative to results, bytes)`` of the ledger
    ``folders``' results (``<row>/seed*.json``) and earlier reports (``earlier.json`` or
    ``superseded.json``), each path and content preceded by its length."""
    files = [path for folder in folders
             for path in (*folder.glob("*/seed*.json"),
                          *(folder / name for name in ("earlier.json", "superseded.json")))]
    digest = hashlib.sha256()
    for path in sorted(p.relative_to(results).as_posix() for p in files if p.is_file()):
        data = (results / path).read_bytes()
        for part in (path.encode(), data):
            digest.update(b"%d:" % len(part) + part)
    return digest.hexdigest()


def ledger_folders(results: Path) -> list[tuple[str, str]]:
    """``(table, budget)`` of every folder ``<table>/<budget>/`` of the ledger ``results``,
    sorted."""
    return [(name, budget) for name in sorted(p.name for p in results.iterdir() if p.is_dir())
            for budget in sorted(p.name for p in (results / name).iterdir() if p.is_dir())]


def ledger_report(table: Table, budget: str, results: Path) -> Report:
    """The report of ``table`` at ``budget`` from the ledger ``results`` alone (as
    ``--cached-only`` over the table's ``seeds``)."""
    seeds = range(table.seeds)
    return shown_report(
        table, list(table.rows), budget, seeds,
        stored_runs(table, list(table.rows), budget, seeds, None, results),
        earlier_report(table, budget, results), cached_only=True,
        cited=cited_verdicts(table, None, results))


def write_ledger_reports(results: Path, reports: Path, accept_verdict_changes: bool = False
                         ) -> list[Path]:
    """Write the report of every table and budget of the ledger ``results`` from it alone
    (:func:`ledger_report`) into the folder ``reports``, and each ledger folder's
    ``verdicts.json``; returns the reports' paths. What is committed in ``reports/`` must equal
    what this writes from ``reports/results`` (``tests/test_ledger_reports.py``; ``make
    reports`` rewrites them). :class:`VerdictDrift`, before anything is written, when a
    verdict differs from that of the folder's ``verdicts.json`` of the same ledger digest,
    unless ``accept_verdict_changes`` (``make reports ACCEPT_VERDICTS=1``)."""
    found = {}  # report path -> (report, ledger folder, verdicts record)
    for name, budget in ledger_folders(results):
        report = ledger_report(TABLES[name], budget, results)
        folder = results / name / budget
        record = {"ledger": ledger_digest(results, read_folders(TABLES[name], budget, results)),
                  "verdicts": {v.claim.name: v.verdict for v in report.claims}}
        found[reports / ledger_report_name(name, budget)] = (report, folder, record)
    drift = [f"{folder.parent.name} ({folder.name}), {claim}: {old} -> {new}"
             for _, folder, record in found.values()
             for claim, old, new in _changed_verdicts(folder, record)]
    if drift and not accept_verdict_changes:
        raise VerdictDrift(
            "verdicts changed while their ledger did not (a change of code or of a claim; "
            "accept with write_ledger_reports(..., accept_verdict_changes=True), `make "
            "reports ACCEPT_VERDICTS=1`):\n" + "\n".join(f"  {line}" for line in drift))
    for path, (report, folder, record) in found.items():
        write_report(path, report)
        (folder / VERDICTS_FILE).write_text(json.dumps(record, indent=2, ensure_ascii=False)
                                            + "\n")
    return list(found)


def _changed_verdicts(folder: Path, record: dict) -> list[tuple[str, str, str]]:
    """``(claim, old, new)`` for each claim whose verdict in ``record`` differs from the one
    of the folder's ``verdicts.json`` of the same ledger digest (none when there is no such
    file, or its digest differs)."""
    path = folder / VERDICTS_FILE
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    if old.get("ledger") != record["ledger"]:
        return []
    return [(claim, old["verdicts"][claim], new) for claim, new in record["verdicts"].items()
            if claim in old.get("verdicts", {}) and old["verdicts"][claim] != new]
