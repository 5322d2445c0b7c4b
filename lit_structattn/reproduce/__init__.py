"""``structattn reproduce <table>``: train the rows of a paper's table, evaluate them, and
write a report with our mean and spread over seeds beside the paper's numbers.

Three parts: :mod:`.runner` runs rows and tables (and is the command), :mod:`.ledger` knows
where results are stored and writes the reports a ledger gives alone, :mod:`.report` computes a
report's facts and prints them; :mod:`.tables` reads the tables."""

from .runner import main, run_table
from .tables import TABLES, Row, Table

__all__ = ["main", "run_table", "TABLES", "Row", "Table"]
