"""``structattn reproduce <table>``: train the rows of a paper's table, evaluate them, and
write ``reports/<table>.md`` with our mean and spread over seeds beside the paper's numbers."""

from .runner import main, run_table
from .tables import TABLES, Row, Table

__all__ = ["main", "run_table", "TABLES", "Row", "Table"]
