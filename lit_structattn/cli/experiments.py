"""Experiments by name, from any folder: every row of the paper tables (``configs/tables``) is
an experiment ``<table>/<row>``, a stack of the configs shipped with the package plus the row's
overlay.

    structattn experiments                           # the tables and their experiments
    structattn experiments tree_transduction/structured   # its config stack and full config
    structattn fit --experiment tree_transduction/structured [--trainer.max_epochs 2 ...]
    structattn test --experiment tree_transduction/structured --ckpt_path best

A ``--config`` path that does not exist where the command runs but does under the shipped
configs (``configs/demo/needle.yaml`` or ``demo/needle.yaml``) is read from there.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..common.suggest import did_you_mean
from ..reproduce import tables
from ..reproduce.tables import CONFIGS


@dataclass(frozen=True)
class Experiment:
    """One table row as a runnable experiment: its config files and overlay arguments."""

    name: str
    title: str
    configs: tuple[Path, ...]
    overrides: tuple[str, ...]

    def arguments(self) -> list[str]:
        """The ``structattn fit`` arguments that run it."""
        return [*(a for config in self.configs for a in ("--config", str(config))),
                *self.overrides]


def slug(text: str) -> str:
    """``text`` as a name: lower case, runs of other characters as one ``_``."""
    name = "".join(c if c.isalnum() else "_" for c in text.lower())
    return "_".join(part for part in name.split("_") if part)


def experiments() -> dict[str, Experiment]:
    """Every experiment by name ``<table>/<row slug>``, tables and rows in their order (a row
    that only tests another row's checkpoint is the same experiment with its own overlay)."""
    found = {}
    for table in tables.TABLES.values():
        for row in table.rows:
            name = f"{table.name}/{slug(row.name)}"
            found[name] = Experiment(name, row.name, row.configs, row.overrides)
    return found


def find(name: str) -> Experiment:
    """The experiment ``name``; ``ValueError`` naming the experiments of its table (or the
    tables), and the closest name where one is close, otherwise."""
    known = experiments()
    if name in known:
        return known[name]
    table, _, row = name.partition("/")
    same_table = [n for n in known if n.startswith(f"{table}/")]
    listed = same_table or sorted({n.split("/")[0] for n in known})
    guess = (did_you_mean(row, [n.split("/")[1] for n in same_table],
                          show=lambda other: repr(f"{table}/{other}"))
             if same_table else did_you_mean(name, known))  # a misspelt table, or row and table
    raise ValueError(f"unknown experiment {name!r}; "
                     f"{'its table has' if same_table else 'tables:'} {', '.join(listed)}"
                     f"{guess} (structattn experiments lists them all)")


def expand(args: list[str]) -> list[str]:
    """``args`` of ``structattn fit|validate|test|predict`` with ``--experiment NAME`` replaced
    by its config stack and overlay, and ``--config`` paths missing here read from the shipped
    configs."""
    expanded, rest = [], iter(args)
    for arg in rest:
        option, _, value = arg.partition("=")
        if option in ("--experiment", "--config"):
            value = value or next(rest, None)
            if value is None:
                raise ValueError(f"{option} needs a value")
            expanded += (find(value).arguments() if option == "--experiment"
                         else ["--config", str(shipped_config(value))])
        else:
            expanded.append(arg)
    return expanded


def shipped_config(path: str) -> Path | str:
    """``path`` if it exists here (or is not a file path), else the shipped config it names
    (``configs/demo/needle.yaml`` or ``demo/needle.yaml``) when there is one."""
    if Path(path).exists() or "\n" in path:
        return path
    relative = Path(path).parts[1:] if Path(path).parts[:1] == ("configs",) else Path(path).parts
    candidate = CONFIGS.joinpath(*relative) if relative else None
    return candidate if candidate is not None and candidate.is_file() else path


def main(argv: list[str] | None = None) -> None:
    """``structattn experiments [NAME]``: list the experiments (from the table files' names
    alone: no table is checked, nothing heavy imported), or show one."""
    parser = argparse.ArgumentParser(prog="structattn experiments",
                                     description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("name", nargs="?", help="an experiment: show its configs and overlay")
    args = parser.parse_args(argv)
    if args.name is None:
        for table, (title, rows) in tables.table_index().items():
            print(f"{table}: {title}")
            for row in rows:
                print(f"  {table}/{slug(row)}  ({row})")
        print(f"\nConfigs: {CONFIGS.resolve()}\nRun one: structattn fit --experiment NAME; "
              "a whole table: structattn reproduce TABLE")
        return
    experiment = find(args.name)
    print(f"# {experiment.name}: {experiment.title}")
    print("structattn fit " + " ".join(experiment.arguments()))
    print(f"# the whole config: structattn fit --experiment {experiment.name} --print_config")
