"""What a run logged with Lightning's CSVLogger, for the end-to-end tests."""

from __future__ import annotations

import csv
from pathlib import Path


def logged(folder: Path, name: str) -> list[float]:
    """The values of metric ``name`` in the one ``metrics.csv`` under ``folder``, in logging
    order (rows that did not log it are skipped)."""
    (metrics,) = Path(folder).rglob("metrics.csv")
    with metrics.open() as lines:
        return [float(row[name]) for row in csv.DictReader(lines) if row.get(name)]
