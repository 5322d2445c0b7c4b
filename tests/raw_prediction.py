"""What the raw-text tests of every family share: a fresh process without data, and
``structattn predict`` on a raw file, succeeding (its JSONL records) or refusing a bad line, and
the records' line numbers set apart."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lit_structattn.cli import command as cli
from tests.test_seq2seq_cli import ROOT, structattn


def no_data_env(tmp_path: Path) -> dict:
    """The environment of a fresh process that can find no data and no cache (this
    checkout's package on its path)."""
    empty = tmp_path / "no_data"
    empty.mkdir(exist_ok=True)
    return {"PYTHONPATH": str(ROOT), "STRUCTATTN_DATA": str(empty),
            "STRUCTATTN_CACHE": str(empty), "PATH": "/usr/bin:/bin"}


def fresh_process(tmp_path: Path, code: str) -> dict:
    """What ``code`` prints last (JSON), run by a new Python in an empty folder under
    ``tmp_path`` that can find no data (:func:`no_data_env`)."""
    cwd = tmp_path / "fresh"
    cwd.mkdir(exist_ok=True)
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                         capture_output=True, text=True, timeout=300,
                         env={**no_data_env(tmp_path), "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def predict_raw(checkpoint: Path, raw: Path, tmp_path: Path) -> list[dict]:
    """The records ``structattn predict`` (a subprocess) writes for the raw file ``raw``."""
    output = tmp_path / "out" / "predictions.jsonl"
    run = structattn("predict", "--ckpt_path", str(checkpoint), "--input", str(raw),
                     "--output", str(output), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in output.read_text().splitlines()]


def numbered(records: list[dict]) -> tuple[list[int], list[dict]]:
    """The ``line`` of every record, and the records without it (as a family's ``records``
    makes them)."""
    return ([record["line"] for record in records],
            [{key: value for key, value in record.items() if key != "line"}
             for record in records])


def refused(checkpoint: Path, raw: Path, line: int, capsys) -> str:
    """The error of ``structattn predict`` on a malformed ``raw`` (exit status 2, naming
    ``raw:line``), run in this process (a subprocess costs the imports again)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["predict", "--ckpt_path", str(checkpoint), "--input", str(raw), "--output",
                  "-"])
    stderr = capsys.readouterr().err
    assert exited.value.code == 2, stderr
    assert f"structattn: error: {raw}:{line}: " in stderr
    return stderr
