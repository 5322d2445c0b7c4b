"""The paper tables the runner knows, read from ``configs/tables/*.yaml``: their rows (a stack of
config files plus a config overlay), the metrics to report, the paper's numbers, and the overlay
of each budget. This module keeps what YAML cannot say: the dataclasses, the budget names and
the loader, which checks every file and turns overlays into the CLI arguments the runner passes.

A table file has ``tables: {name: table}`` and may have ``shared:``, a free section for the YAML
anchors its tables share (``&note``, ``*note``, ``<<: *budgets``). A table::

    title: ...
    note: ...                  # a string, or a list of strings joined with a space
    metrics: [{key: test/bleu, label: BLEU}, ...]
    scale: 1                   # optional, default 100 (fractions -> %)
    select_by: val/accuracy    # optional
    claim: {better: row, worse: row, metrics: [key, ...]}        # optional
    printed_averages: {group: {key: number}}  # optional: the paper's own average of a group
    seeds: 5                   # optional, default 3: the seeds of the committed report
    budgets: {ci: {describe: ..., overlay: {trainer: {max_epochs: 1}}}, cpu: ...}
    rows:
      - name: ...
        configs: [translation/base.yaml, translation/rows/softmax.yaml]  # under configs/
        overlay: {model: {init_args: {test_beam: 1}}}   # optional
        paper: {test/bleu: 28.5}                         # optional
        test_of: row           # optional: tests that row's best checkpoint
        same_run_as: [table, row]                        # optional
        group: ...                                       # optional
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"  # shipped with the package
TABLE_FILES = CONFIGS / "tables"
BUDGETS = ("ci", "demo", "cpu", "paper")


@dataclass(frozen=True)
class Row:
    """One row: config files (later ones override earlier ones), the CLI overrides of its
    overlay, and the paper's numbers per metric key. A row with ``test_of`` trains nothing: it
    tests the best checkpoint of that row (same seed) under its own configuration (e.g. a
    decoding option). A row with ``same_run_as = (table, row)`` is that row of another table
    (same configs and overrides, checked): both tables read and write the same runs."""

    name: str
    configs: tuple[Path, ...]
    overrides: tuple[str, ...] = ()
    paper: dict[str, float] = field(default_factory=dict)
    test_of: str | None = None
    same_run_as: tuple[str, str] | None = None  # (table, row) with the same configuration
    group: str | None = None  # rows of a group are also averaged together in the report


@dataclass(frozen=True)
class Claim:
    """A claim of the paper that the report checks run by run: row ``better`` above row
    ``worse`` on every metric key of ``metrics``, in every seed."""

    better: str
    worse: str
    metrics: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    """A paper table: rows, metrics ``(logged key, column label)``, budgets (the CLI overrides
    of their overlay and a sentence describing them), and a note on the data and protocol."""

    name: str
    title: str
    rows: tuple[Row, ...]
    metrics: tuple[tuple[str, str], ...]
    budgets: dict[str, tuple[tuple[str, ...], str]]
    note: str
    scale: float = 100.0  # metric values -> the numbers shown (fractions -> %)
    # A validation metric the runs' ModelCheckpoint monitors: cells then also show the test
    # value of the seed best on it (the best-of-N-initializations protocol of some papers).
    select_by: str | None = None
    claim: Claim | None = None  # checked in the report's verdict
    # The averages the paper prints for a row group (which may differ from the mean of the
    # paper's numbers for its rows), with the group's number of rows: shown beside that mean,
    # both labelled, when a report shows the whole group.
    printed_averages: dict[str, tuple[int, dict[str, float]]] = field(default_factory=dict)
    seeds: int = 3  # the seeds 0 .. seeds-1 of the committed reports (reports/results)


class TableFileError(ValueError):
    """A table file that does not describe valid tables; the message names the file and the
    table / row."""


# (required keys, optional keys) of each mapping of a table file
_FILE_KEYS = ({"tables"}, {"shared"})
_TABLE_KEYS = ({"title", "note", "metrics", "budgets", "rows"},
               {"scale", "select_by", "claim", "printed_averages", "seeds"})
_METRIC_KEYS = ({"key", "label"}, set())
_CLAIM_KEYS = ({"better", "worse", "metrics"}, set())
_BUDGET_KEYS = ({"describe"}, {"overlay"})
_ROW_KEYS = ({"name", "configs"}, {"overlay", "paper", "test_of", "same_run_as", "group"})


def cli_value(value: object) -> str:
    """A YAML scalar as the CLI reads it: ``true`` / ``false``, ``null``, numbers and strings
    as written."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def overlay_arguments(overlay: Mapping, where: str = "overlay", prefix: str = ""
                      ) -> tuple[str, ...]:
    """A nested config mapping as CLI overrides, in document order:
    ``{"model": {"init_args": {"test_beam": 1}}}`` -> ``("--model.init_args.test_beam", "1")``;
    ``prefix``: the dotted path of ``overlay`` itself (``"model.init_args."``), ``where``: its
    place in a table file, for errors."""
    arguments: list[str] = []
    for key, value in _typed(overlay, dict, where).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            arguments += overlay_arguments(value, where, f"{name}.")
        elif isinstance(value, list):
            raise TableFileError(f"{where}: {name} is a list, which an override cannot be; put "
                                 "it in a config file of the row")
        else:
            arguments += [f"--{name}", cli_value(value)]
    return tuple(arguments)


def _typed(value, kind: type, where: str):
    """``value`` if it is a ``kind``, else a :class:`TableFileError` at ``where``."""
    if not isinstance(value, kind):
        names = {dict: "a mapping", list: "a list", str: "a string"}
        raise TableFileError(f"{where}: expected {names.get(kind, kind.__name__)}, got "
                             f"{value!r}")
    return value


def _checked(value, keys: tuple[set[str], set[str]], where: str) -> dict:
    """The mapping ``value`` with its keys checked against ``(required, optional)``."""
    required, optional = keys
    mapping = _typed(value, dict, where)
    unknown = sorted(set(mapping) - required - optional, key=str)
    if unknown:
        raise TableFileError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; valid "
                             f"keys: {', '.join(sorted(required | optional))}")
    missing = sorted(required - set(mapping))
    if missing:
        raise TableFileError(f"{where}: missing key(s) {', '.join(map(repr, missing))}")
    return mapping


def _text(value, where: str) -> str:
    """A string, or a list of strings joined with a single space."""
    if isinstance(value, list):
        return " ".join(_typed(part, str, where) for part in value)
    return _typed(value, str, where)


def _number(value, where: str) -> float:
    """An int or float (not a boolean) as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TableFileError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _config(path: str, where: str, configs: Path) -> Path:
    """``configs / path``, which must be a file."""
    config = configs / _typed(path, str, where)
    if not config.is_file():
        raise TableFileError(f"{where}: config {path!r} does not exist (looked for {config})")
    return config


def _pair(value, where: str) -> tuple[str, str]:
    """``[table, row]`` as a tuple."""
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise TableFileError(f"{where}: expected [table, row], got {value!r}")
    return value[0], value[1]


def _row(spec, index: int, where: str, configs: Path) -> Row:
    """Row number ``index`` (from 1) of the table at ``where``."""
    name = spec.get("name") if isinstance(spec, dict) else None
    at = f"{where}, row {name!r}" if isinstance(name, str) else f"{where}, row {index}"
    spec = _checked(spec, _ROW_KEYS, at)
    return Row(
        name=_typed(name, str, f"{at}, name"),
        configs=tuple(_config(path, f"{at}, configs", configs)
                      for path in _typed(spec["configs"], list, f"{at}, configs")),
        overrides=overlay_arguments(spec.get("overlay", {}), f"{at}, overlay"),
        paper={key: _number(value, f"{at}, paper, {key}")
               for key, value in _typed(spec.get("paper", {}), dict, f"{at}, paper").items()},
        test_of=spec.get("test_of"),
        same_run_as=(_pair(spec["same_run_as"], f"{at}, same_run_as")
                     if "same_run_as" in spec else None),
        group=spec.get("group"),
    )


def _budgets(spec, where: str) -> dict[str, tuple[tuple[str, ...], str]]:
    """``{budget: (CLI overrides, description)}`` of a table's ``budgets`` mapping."""
    budgets = {}
    for budget, value in _typed(spec, dict, where).items():
        if budget not in BUDGETS:
            raise TableFileError(f"{where}: unknown budget {budget!r}; budgets: "
                                 f"{', '.join(BUDGETS)}")
        value = _checked(value, _BUDGET_KEYS, f"{where}, {budget}")
        budgets[budget] = (
            overlay_arguments(value.get("overlay", {}), f"{where}, {budget}, overlay"),
            _typed(value["describe"], str, f"{where}, {budget}, describe"))
    return budgets


def _metric(spec, where: str) -> tuple[str, str]:
    """``(logged key, column label)``."""
    spec = _checked(spec, _METRIC_KEYS, where)
    return _typed(spec["key"], str, f"{where}, key"), _typed(spec["label"], str, f"{where}, label")


def _claim(spec, where: str) -> Claim:
    """A table's ``claim`` mapping."""
    spec = _checked(spec, _CLAIM_KEYS, where)
    return Claim(spec["better"], spec["worse"],
                 tuple(_typed(spec["metrics"], list, f"{where}, metrics")))


def _check_rows(table: Table, where: str) -> None:
    """Row names are unique; ``test_of``, the claim and the paper's numbers name rows and
    metrics of the table."""
    names = [row.name for row in table.rows]
    for name in names:
        if names.count(name) > 1:
            raise TableFileError(f"{where}: two rows are named {name!r}")
    for row in table.rows:
        if row.test_of is not None and row.test_of not in names:
            raise TableFileError(f"{where}, row {row.name!r}: test_of {row.test_of!r} names no "
                                 f"row of the table; rows: {', '.join(names)}")
        unknown = sorted(set(row.paper) - {key for key, _ in table.metrics})
        if unknown:
            raise TableFileError(f"{where}, row {row.name!r}: paper numbers for {unknown}, "
                                 "which are not metrics of the table")
    claim = table.claim
    if claim is not None and not {claim.better, claim.worse} <= set(names):
        raise TableFileError(f"{where}, claim: {claim.better!r} and {claim.worse!r} must be "
                             f"rows of the table; rows: {', '.join(names)}")
    if claim is not None and not set(claim.metrics) <= {key for key, _ in table.metrics}:
        raise TableFileError(f"{where}, claim: metrics {list(claim.metrics)} must be metrics "
                             "of the table")


def _table(name: str, spec, where: str, configs: Path) -> Table:
    """Table ``name`` of a table file, checked."""
    spec = _checked(spec, _TABLE_KEYS, where)
    rows = tuple(_row(row, index, where, configs) for index, row
                 in enumerate(_typed(spec["rows"], list, f"{where}, rows"), start=1))
    printed = _printed_averages(spec.get("printed_averages", {}), f"{where}, printed_averages")
    table = Table(
        name=name,
        title=_typed(spec["title"], str, f"{where}, title"),
        rows=rows,
        metrics=tuple(_metric(metric, f"{where}, metrics")
                      for metric in _typed(spec["metrics"], list, f"{where}, metrics")),
        budgets=_budgets(spec["budgets"], f"{where}, budgets"),
        note=_text(spec["note"], f"{where}, note"),
        scale=_number(spec.get("scale", 100), f"{where}, scale"),
        select_by=spec.get("select_by"),
        claim=_claim(spec["claim"], f"{where}, claim") if "claim" in spec else None,
        printed_averages={group: (sum(row.group == group for row in rows), values)
                          for group, values in printed.items()},
        seeds=_typed(spec.get("seeds", 3), int, f"{where}, seeds"),
    )
    _check_rows(table, where)
    groups = {row.group for row in table.rows}
    for group, (_, values) in table.printed_averages.items():
        if group not in groups:
            raise TableFileError(f"{where}, printed_averages: {group!r} is no row group; "
                                 f"groups: {', '.join(sorted(g for g in groups if g))}")
        unknown = set(values) - {key for key, _ in table.metrics}
        if unknown:
            raise TableFileError(f"{where}, printed_averages, {group}: {sorted(unknown)} are "
                                 "not metrics of the table")
    return table


def _printed_averages(spec, where: str) -> dict[str, dict[str, float]]:
    """``{group: {metric key: number}}``, checked."""
    return {group: {key: _number(value, f"{where}, {group}, {key}")
                    for key, value in _typed(values, dict, f"{where}, {group}").items()}
            for group, values in _typed(spec, dict, where).items()}


def read_table_file(path: Path, configs: Path = CONFIGS) -> dict[str, Table]:
    """The tables of one file, in its order; config paths are relative to ``configs``."""
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise TableFileError(f"{path}: not valid YAML: {error}") from error
    spec = _checked(document, _FILE_KEYS, str(path))
    return {name: _table(name, table, f"{path}: table {name!r}", configs)
            for name, table in _typed(spec["tables"], dict, f"{path}: tables").items()}


def _check_shared_runs(tables: dict[str, Table], files: dict[str, Path]) -> None:
    """Every ``same_run_as`` names a row of a known table."""
    for table in tables.values():
        for row in table.rows:
            if row.same_run_as is None:
                continue
            other_table, other_row = row.same_run_as
            other = tables.get(other_table)
            if other is None or other_row not in [r.name for r in other.rows]:
                raise TableFileError(f"{files[table.name]}: table {table.name!r}, row "
                                     f"{row.name!r}: same_run_as [{other_table!r}, "
                                     f"{other_row!r}] names no row of the tables "
                                     f"({', '.join(sorted(tables))})")


def load_tables(folder: Path = TABLE_FILES, configs: Path = CONFIGS) -> dict[str, Table]:
    """Every table of the ``*.yaml`` files of ``folder`` (files in name order), checked;
    :class:`TableFileError` names the file and the table / row of the first problem."""
    tables: dict[str, Table] = {}
    files: dict[str, Path] = {}
    for path in sorted(folder.glob("*.yaml")):
        for name, table in read_table_file(path, configs).items():
            if name in tables:
                raise TableFileError(f"{path}: table {name!r} is also defined in {files[name]}")
            tables[name], files[name] = table, path
    _check_shared_runs(tables, files)
    return tables


TABLES: dict[str, Table] = load_tables()
