"""``structattn reproduce <table>``: train the rows of a paper's table, evaluate them, and
write a report with our mean and spread over seeds beside the paper's numbers.

Three parts: :mod:`.runner` runs rows and tables (and is the command), :mod:`.ledger` knows
where results are stored and writes the reports a ledger gives alone, :mod:`.report` computes a
report's facts and prints them; :mod:`.tables` reads the tables, :mod:`.claims` judges their
claims and :mod:`.provenance` says what a run ran on."""

import importlib
from typing import Any

__all__ = ["main", "run_table", "TABLES", "Row", "Table"]

_HOME = {"main": ".runner", "run_table": ".runner", "TABLES": ".tables", "Row": ".tables",
         "Table": ".tables"}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use: ``.tables`` alone (the listing of
    ``structattn experiments``) imports no Lightning."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name], __name__), name)
