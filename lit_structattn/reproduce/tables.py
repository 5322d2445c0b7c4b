"""The paper tables the runner knows, read from ``configs/tables/*.yaml``: their rows (a stack of
config files plus a config overlay), the metrics to report, the paper's numbers, and the overlay
of each budget and the paper's claims, as the dataclasses :class:`Table`, :class:`Row` and
:class:`Claim` the runner reads.

Method: every mapping of a file has a dataclass of its form (``_TableEntry``, ``_RowEntry``,
...) whose types jsonargparse checks, the parser the configs go through; by hand are checked
only the keys, the config files, the budget names and what spans rows, claims and tables
(unique row and claim names, the rows and metrics a ``test_of``, a claim or ``same_run_as``
names, the paper's numbers of the table's metrics, the claims a ``see`` names). The loader then
turns overlays into the CLI arguments the runner passes. A bad file raises
:class:`TableFileError` naming the file, the table / row / claim and the key.

A table file has ``tables: {name: table}`` and may have ``shared:``, a free section for the YAML
anchors its tables share (``&note``, ``*note``, ``<<: *budgets``). A table::

    title: ...
    note: ...                  # a string, or a list of strings joined with a space
    metrics: [{key: test/bleu, label: BLEU}, ...]
    scale: 1                   # optional, default 100 (fractions -> %)
    select_by: val/accuracy    # optional
    select_top: {test/facts: 10}  # optional, with select_by: a metric's mean over the N best
    claims:                    # optional: the paper's claims, each judged by reproduce/claims.py
      - {name: ..., compare: [row A, row B], metric: key, direction: higher}  # paper_gap: optional
      - {name: ..., compare_groups: [group A, group B], metric: key, direction: higher}  # idem
      - {name: ..., row: row, metric: key, tolerance: 5.0}                    # value: optional
      - {name: ..., untestable: why this set-up cannot test it}
      # each may have source: ..., evidence: [markdown sentence, ...], see: [[table, claim]]
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

import copy
import functools
import re
import statistics
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml
from jsonargparse import ArgumentError, ArgumentParser

CONFIGS = Path(__file__).resolve().parents[1] / "configs"  # shipped with the package
TABLE_FILES = CONFIGS / "tables"
BUDGETS = ("ci", "demo", "cpu", "paper")
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when it is built


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


DIRECTIONS = ("higher", "lower")


@dataclass(frozen=True)
class Comparison:
    """The paper's row ``rows[0]`` (A) above (``direction`` ``higher``) or below (``lower``) its
    row ``rows[1]`` (B) on ``metric``; ``paper_gap``: the paper's A - B in the report's units
    (None when the file gives none and a row has no paper number for the metric)."""

    rows: tuple[str, str]
    metric: str
    direction: str
    paper_gap: float | None


@dataclass(frozen=True)
class GroupComparison:
    """The paper's row group ``groups[0]`` (A) above or below its group ``groups[1]`` (B) on
    ``metric``, on average over the groups' rows: ``pairs`` pairs each row of A with the row of
    B of the same item (one task under two models: "task 02, MemN2N" with "task 02, Binary
    CRF"; the item is a row's name less its group's). ``paper_gap``: the paper's A - B, its
    printed averages' difference, else that of its row numbers (None when some are missing)."""

    groups: tuple[str, str]
    pairs: tuple[tuple[str, str], ...]
    metric: str
    direction: str
    paper_gap: float | None


@dataclass(frozen=True)
class Value:
    """The paper's number ``value`` for ``row`` on ``metric``, which ours should match within
    ``tolerance`` (both in the report's units)."""

    row: str
    metric: str
    value: float
    tolerance: float


@dataclass(frozen=True)
class Untestable:
    """A claim this set-up cannot test, and why."""

    reason: str


@dataclass(frozen=True)
class Claim:
    """A claim of the paper (:mod:`.claims` judges it): its name in the report, what it states,
    where the paper says it, bug-or-budget ``evidence`` (markdown sentences) and the same claim
    in other tables, ``see``: ``((table, claim name), ...)``."""

    name: str
    states: Comparison | GroupComparison | Value | Untestable
    source: str | None = None
    evidence: tuple[str, ...] = ()
    see: tuple[tuple[str, str], ...] = ()


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
    # Metrics whose "best" cell is the mean test value of the N seeds best on ``select_by``
    # (Kim et al.'s bAbI facts: the mean of the 10 best of 20 initializations), not the best's.
    select_top: dict[str, int] = field(default_factory=dict)
    claims: tuple[Claim, ...] = ()  # judged in the report's claims table
    # The averages the paper prints for a row group (which may differ from the mean of the
    # paper's numbers for its rows), with the group's number of rows: shown beside that mean,
    # both labelled, when a report shows the whole group.
    printed_averages: dict[str, tuple[int, dict[str, float]]] = field(default_factory=dict)
    seeds: int = 3  # the seeds 0 .. seeds-1 of the committed reports (reports/results)


class TableFileError(ValueError):
    """A table file that does not describe valid tables; the message names the file, the table /
    row and the key."""


def _as_written(**default: Any) -> Any:
    """A field of a table file's form whose value is kept as the file wrote it, once jsonargparse
    checked its type: in such a type (``Any`` inside, or a union of a string with another type)
    jsonargparse reads some strings as YAML, as it does on a command line (``'null'`` as None,
    ``'[a, b]'`` as a list, ``'a: b'`` directly inside a mapping of ``Any`` as a mapping). A
    collection of mappings is one too, each mapping parsed on its own so that an error names its
    row, budget or metric."""
    return field(metadata={"as_written": True}, **default)


# The form of each mapping of a table file, as jsonargparse checks it.


@dataclass(frozen=True)
class _FileEntry:
    tables: dict[str, dict[str, Any]] = _as_written()  # each a _TableEntry
    shared: Any = _as_written(default=None)  # the YAML anchors the tables share


@dataclass(frozen=True)
class _TableEntry:
    title: str
    note: str | list[str] = _as_written()  # a list of strings is joined with a space
    metrics: list[dict[str, Any]] = _as_written()  # each a _MetricEntry
    budgets: dict[str, dict[str, Any]] = _as_written()  # {budget name: _BudgetEntry}
    rows: list[dict[str, Any]] = _as_written()  # each a _RowEntry
    scale: float = 100.0
    select_by: str | None = _as_written(default=None)
    select_top: dict[str, int] = field(default_factory=dict)
    claims: list[dict[str, Any]] = _as_written(default_factory=list)  # each a _ClaimEntry
    printed_averages: dict[str, dict[str, float]] = field(default_factory=dict)
    seeds: int = 3


@dataclass(frozen=True)
class _MetricEntry:
    key: str
    label: str


@dataclass(frozen=True)
class _BudgetEntry:
    describe: str
    overlay: dict[str, Any] = _as_written(default_factory=dict)


@dataclass(frozen=True)
class _RowEntry:
    name: str
    configs: list[str]  # under the configs folder
    overlay: dict[str, Any] = _as_written(default_factory=dict)
    paper: dict[str, float] = field(default_factory=dict)
    test_of: str | None = _as_written(default=None)
    same_run_as: tuple[str, str] | None = None
    group: str | None = _as_written(default=None)


@dataclass(frozen=True)
class _ClaimEntry:
    name: str
    compare: tuple[str, str] | None = _as_written(default=None)  # a comparison of rows [A, B]
    compare_groups: tuple[str, str] | None = _as_written(default=None)  # of row groups [A, B]
    row: str | None = _as_written(default=None)  # a value of a row
    untestable: str | None = _as_written(default=None)  # the reason
    metric: str | None = _as_written(default=None)
    direction: str | None = _as_written(default=None)
    paper_gap: float | None = None
    value: float | None = None
    tolerance: float | None = None
    source: str | None = _as_written(default=None)
    evidence: list[str] = _as_written(default_factory=list)
    see: list[tuple[str, str]] = _as_written(default_factory=list)


#: the keys of each kind of claim, beside name, source, evidence and see
_CLAIM_KEYS = {"compare": {"metric", "direction", "paper_gap"},
               "compare_groups": {"metric", "direction", "paper_gap"},
               "row": {"metric", "value", "tolerance"}, "untestable": set()}

_Entry = TypeVar("_Entry")


def _parsed(kind: type[_Entry], value: object, where: str) -> _Entry:
    """The mapping ``value`` at ``where`` in a table file as the dataclass ``kind`` (a key whose
    value is null counts as absent): its keys are checked here (jsonargparse ignores an unknown
    key whose value is empty), the types of its values by jsonargparse;
    :class:`TableFileError` at ``where`` otherwise."""
    if not isinstance(value, dict):
        raise TableFileError(f"{where}: expected a mapping, got {value!r}")
    declared = fields(kind)
    unknown = sorted(set(value) - {f.name for f in declared}, key=str)
    if unknown:
        raise TableFileError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; valid "
                             f"keys: {', '.join(sorted(f.name for f in declared))}")
    given = {key: item for key, item in value.items() if item is not None}
    missing = [f.name for f in declared if f.name not in given
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise TableFileError(f"{where}: missing key(s) {', '.join(map(repr, missing))}")
    try:
        # a copy: jsonargparse rewrites the strings it reads as YAML in place
        parsed = _parser(kind).parse_object({"entry": copy.deepcopy(given)}, defaults=False).entry
    except ArgumentError as error:  # 'Parser key "entry.note": ...' (the key of the mapping)
        key = re.match(r'Parser key "entry\.([^".]+)', str(error))
        if key is None:
            raise TableFileError(f"{where}: {error}") from None
        expected = next(f.type for f in declared if f.name == key[1])
        raise TableFileError(f"{where}, {key[1]}: expected {expected}, got {given[key[1]]!r}"
                             ) from None
    return kind(**{f.name: given[f.name] if f.metadata.get("as_written") else parsed[f.name]
                   for f in declared if f.name in given})


@functools.cache
def _parser(kind: type) -> ArgumentParser:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--entry", type=kind)
    return parser


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
    for key, value in overlay.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            arguments += overlay_arguments(value, where, f"{name}.")
        elif isinstance(value, list):
            raise TableFileError(f"{where}: {name} is a list, which an override cannot be; put "
                                 "it in a config file of the row")
        else:
            arguments += [f"--{name}", cli_value(value)]
    return tuple(arguments)


def _config(path: str, where: str, configs: Path) -> Path:
    """``configs / path``, which must be a file."""
    config = configs / path
    if not config.is_file():
        raise TableFileError(f"{where}: config {path!r} does not exist (looked for {config})")
    return config


def _row(spec: dict, index: int, where: str, configs: Path) -> Row:
    """Row number ``index`` (from 1) of the table at ``where``."""
    name = spec.get("name")
    at = f"{where}, row {name!r}" if isinstance(name, str) else f"{where}, row {index}"
    entry = _parsed(_RowEntry, spec, at)
    return Row(
        name=entry.name,
        configs=tuple(_config(path, f"{at}, configs", configs) for path in entry.configs),
        overrides=overlay_arguments(entry.overlay, f"{at}, overlay"),
        paper=entry.paper, test_of=entry.test_of, same_run_as=entry.same_run_as,
        group=entry.group,
    )


def _budgets(spec: dict[str, dict], where: str) -> dict[str, tuple[tuple[str, ...], str]]:
    """``{budget: (CLI overrides, description)}`` of a table's ``budgets`` mapping."""
    budgets = {}
    for budget, value in spec.items():
        if budget not in BUDGETS:
            raise TableFileError(f"{where}: unknown budget {budget!r}; budgets: "
                                 f"{', '.join(BUDGETS)}")
        entry = _parsed(_BudgetEntry, value, f"{where}, {budget}")
        budgets[budget] = (overlay_arguments(entry.overlay, f"{where}, {budget}, overlay"),
                           entry.describe)
    return budgets


def _check_rows(table: Table, where: str) -> None:
    """Row names are unique; ``test_of`` and the paper's numbers name rows and metrics of the
    table."""
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


def _table(name: str, spec: object, where: str, configs: Path) -> Table:
    """Table ``name`` of a table file, checked."""
    entry = _parsed(_TableEntry, spec, where)
    rows = tuple(_row(row, index, where, configs) for index, row in enumerate(entry.rows, start=1))
    table = Table(
        name=name,
        title=entry.title,
        rows=rows,
        metrics=tuple((metric.key, metric.label) for metric in (
            _parsed(_MetricEntry, spec, f"{where}, metrics") for spec in entry.metrics)),
        budgets=_budgets(entry.budgets, f"{where}, budgets"),
        note=entry.note if isinstance(entry.note, str) else " ".join(entry.note),
        scale=entry.scale,
        select_by=entry.select_by,
        select_top=entry.select_top,
        printed_averages={group: (sum(row.group == group for row in rows), values)
                          for group, values in entry.printed_averages.items()},
        seeds=entry.seeds,
    )
    _check_rows(table, where)
    _check_printed_averages(table, where)
    _check_select_top(table, where)
    claims = tuple(_claim(claim, index, table, where)
                   for index, claim in enumerate(entry.claims, start=1))
    names = [claim.name for claim in claims]
    for claim in names:
        if names.count(claim) > 1:
            raise TableFileError(f"{where}: two claims are named {claim!r}")
    return replace(table, claims=claims)


def _claim(spec: dict, index: int, table: Table, where: str) -> Claim:
    """Claim number ``index`` (from 1) of ``table`` at ``where``: exactly one of ``compare``,
    ``row`` and ``untestable``, with the keys of its kind, naming rows and metrics of the
    table."""
    name = spec.get("name") if isinstance(spec, dict) else None
    at = f"{where}, claim {name!r}" if isinstance(name, str) else f"{where}, claim {index}"
    entry = _parsed(_ClaimEntry, spec, at)
    given = {key for key, value in spec.items() if value is not None}
    kinds = [kind for kind in _CLAIM_KEYS if kind in given]
    if len(kinds) != 1:
        given_kinds = f" (given: {', '.join(kinds)})" if kinds else ""
        raise TableFileError(f"{at}: give exactly one of {', '.join(_CLAIM_KEYS)}{given_kinds}")
    kind = kinds[0]
    foreign = sorted(given & (set().union(*_CLAIM_KEYS.values()) - _CLAIM_KEYS[kind]))
    if foreign:
        raise TableFileError(f"{at}, {foreign[0]}: not a key of a claim with {kind}")
    if kind == "untestable":
        states = Untestable(entry.untestable)
    elif kind == "compare_groups":
        states = _group_comparison(entry, table, at)
    else:
        rows = {row.name: row for row in table.rows}
        named = entry.compare if kind == "compare" else (entry.row,)
        for row in named:
            if row not in rows:
                raise TableFileError(f"{at}, {kind}: {row!r} names no row of the table; rows: "
                                     f"{', '.join(rows)}")
        _check_metric(entry, table, at)
        papers = [rows[row].paper.get(entry.metric) for row in named]
        states = (_comparison(entry, papers, at) if kind == "compare"
                  else _value(entry, papers[0], at))
    return Claim(entry.name, states, entry.source, tuple(entry.evidence),
                 tuple(tuple(pair) for pair in entry.see))


def _comparison(entry: _ClaimEntry, papers: list[float | None], at: str) -> Comparison:
    """The comparison of ``entry``, whose rows have the paper's numbers ``papers`` (None where
    a row has none) for its metric."""
    a, b = entry.compare
    if a == b:
        raise TableFileError(f"{at}, compare: a row compared with itself ({a!r})")
    gap = entry.paper_gap
    if gap is None and None not in papers:
        gap = papers[0] - papers[1]
    _check_direction(entry, gap, at)
    return Comparison((a, b), entry.metric, entry.direction, gap)


def _group_comparison(entry: _ClaimEntry, table: Table, at: str) -> GroupComparison:
    """The comparison of row groups of ``entry``: two groups of ``table`` whose rows are the
    same items (:func:`_item`), paired by item, on a metric of the table."""
    groups = tuple(entry.compare_groups)
    if groups[0] == groups[1]:
        raise TableFileError(f"{at}, compare_groups: a group compared with itself "
                             f"({groups[0]!r})")
    members = {group: [row for row in table.rows if row.group == group] for group in groups}
    known = sorted({row.group for row in table.rows if row.group})
    for group, rows in members.items():
        if not rows:
            raise TableFileError(f"{at}, compare_groups: {group!r} is no row group; groups: "
                                 f"{', '.join(known)}")
    a, b = _pair_by_item(members, at)
    _check_metric(entry, table, at)
    gap = entry.paper_gap
    printed = [table.printed_averages.get(group, (0, {}))[1].get(entry.metric)
               for group in groups]
    papers = [[row.paper.get(entry.metric) for row in rows] for rows in (a, b)]
    if gap is None and None not in printed:
        gap = printed[0] - printed[1]
    elif gap is None and None not in papers[0] + papers[1]:
        gap = statistics.mean(papers[0]) - statistics.mean(papers[1])
    _check_direction(entry, gap, at)
    return GroupComparison(groups, tuple((x.name, y.name) for x, y in zip(a, b, strict=True)),
                           entry.metric, entry.direction, gap)


def _pair_by_item(members: dict[str, list[Row]], at: str) -> tuple[list[Row], list[Row]]:
    """The rows of two groups (``members``: group -> its rows), paired by :func:`_item`: A's
    rows in the table's order and B's row of the same item beside each."""
    by_item = [{_item(row): row for row in rows} for rows in members.values()]
    if by_item[0].keys() != by_item[1].keys() or any(
            len(items) != len(rows) for items, rows in zip(by_item, members.values(), strict=True)):
        listed = "; ".join(f"{group!r}: {', '.join(repr(_item(row)) for row in rows)}"
                           for group, rows in members.items())
        raise TableFileError(f"{at}, compare_groups: the groups' rows are not the same items, "
                             f"once each (a row's item is its name less its group's): {listed}")
    return list(by_item[0].values()), [by_item[1][item] for item in by_item[0]]


def _item(row: Row) -> str:
    """What a row of a group is about: its name less its group's name at its end or start and
    the punctuation there ("task 02, MemN2N" in group "MemN2N": "task 02")."""
    name, group = row.name, row.group
    item = name.removesuffix(group) if name.endswith(group) else name.removeprefix(group)
    return item.strip(" ,;:-()")


def _check_metric(entry: _ClaimEntry, table: Table, at: str) -> None:
    """The claim's metric is one of the table's."""
    if entry.metric not in dict(table.metrics):
        raise TableFileError(f"{at}, metric: {entry.metric!r} is not a metric of the "
                             f"table; metrics: {', '.join(dict(table.metrics))}")


def _check_direction(entry: _ClaimEntry, gap: float | None, at: str) -> None:
    """The claim's direction is one of :data:`DIRECTIONS` and agrees with the paper's gap."""
    if entry.direction not in DIRECTIONS:
        raise TableFileError(f"{at}, direction: expected one of {', '.join(DIRECTIONS)}, got "
                             f"{entry.direction!r}")
    if gap is not None and (gap if entry.direction == "higher" else -gap) < 0:
        raise TableFileError(f"{at}, direction: the paper's gap A - B is {gap:g}, which is not "
                             f"{entry.direction}")


def _value(entry: _ClaimEntry, paper: float | None, at: str) -> Value:
    """The value claim of ``entry``, whose row's paper number for its metric is ``paper``."""
    value = paper if entry.value is None else entry.value
    if value is None:
        raise TableFileError(f"{at}, value: not given, and row {entry.row!r} has no paper "
                             f"number for {entry.metric}")
    if entry.tolerance is None or entry.tolerance < 0:
        raise TableFileError(f"{at}, tolerance: a value claim needs a tolerance >= 0 (in the "
                             "report's units)")
    return Value(entry.row, entry.metric, value, entry.tolerance)


def _check_select_top(table: Table, where: str) -> None:
    """``select_top`` names metrics of the table, each with N >= 1, and needs ``select_by``."""
    if table.select_top and table.select_by is None:
        raise TableFileError(f"{where}, select_top: needs select_by (the validation metric "
                             "that ranks the seeds)")
    for key, top in table.select_top.items():
        if key not in {k for k, _ in table.metrics}:
            raise TableFileError(f"{where}, select_top: {key!r} is not a metric of the table")
        if top < 1:
            raise TableFileError(f"{where}, select_top, {key}: expected N >= 1, got {top}")


def _check_printed_averages(table: Table, where: str) -> None:
    """The paper's printed averages are of row groups and metrics of the table."""
    groups = {row.group for row in table.rows}
    for group, (_, values) in table.printed_averages.items():
        if group not in groups:
            raise TableFileError(f"{where}, printed_averages: {group!r} is no row group; "
                                 f"groups: {', '.join(sorted(g for g in groups if g))}")
        unknown = set(values) - {key for key, _ in table.metrics}
        if unknown:
            raise TableFileError(f"{where}, printed_averages, {group}: {sorted(unknown)} are "
                                 "not metrics of the table")


def read_table_file(path: Path, configs: Path = CONFIGS) -> dict[str, Table]:
    """The tables of one file, in its order; config paths are relative to ``configs``."""
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise TableFileError(f"{path}: not valid YAML: {error}") from error
    tables = _parsed(_FileEntry, document, str(path)).tables
    return {name: _table(name, table, f"{path}: table {name!r}", configs)
            for name, table in tables.items()}


def _check_cited_claims(tables: dict[str, Table], files: dict[str, Path]) -> None:
    """Every ``see`` of a claim names a claim of a known table."""
    for table in tables.values():
        for claim in table.claims:
            for other_table, other_claim in claim.see:
                at = (f"{files[table.name]}: table {table.name!r}, claim {claim.name!r}, see "
                      f"[{other_table!r}, {other_claim!r}]")
                other = tables.get(other_table)
                if other is None:
                    raise TableFileError(f"{at}: no such table ({', '.join(sorted(tables))})")
                if other_claim not in [c.name for c in other.claims]:
                    raise TableFileError(f"{at}: no such claim of {other_table} "
                                         f"({', '.join(c.name for c in other.claims) or 'none'})")


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
    _check_cited_claims(tables, files)
    return tables



@functools.cache
def shipped_tables() -> dict[str, Table]:
    """Every table of the shipped table files (:func:`load_tables`), read on first use."""
    return load_tables()


def __getattr__(name: str) -> Any:
    """``TABLES`` is :func:`shipped_tables`, read when first asked for: importing this module
    (the cheap listing of ``structattn experiments``) checks no table file."""
    if name == "TABLES":
        return shipped_tables()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def table_index(folder: Path = TABLE_FILES) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``{table name: (title, row names)}`` of the ``*.yaml`` files of ``folder``, in the order
    :func:`load_tables` gives, read as plain YAML without checking them (milliseconds, where
    :func:`load_tables` takes about half a second): the listing of ``structattn experiments``.
    """
    index = {}
    for path in sorted(folder.glob("*.yaml")):
        document = yaml.load(path.read_text(), Loader=_YAML_LOADER)
        for name, table in document["tables"].items():
            index[name] = (table["title"], tuple(row["name"] for row in table["rows"]))
    return index

