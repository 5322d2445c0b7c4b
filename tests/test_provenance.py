"""What a run records of its code, libraries and machine (reproduce/provenance.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import lightning
import pytest
import torch

from lit_structattn.reproduce import provenance, run_table

REPOSITORY = Path(provenance.__file__).resolve().parents[2]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_run_records_the_checkout_it_ran_from(tmp_path):
    if not (REPOSITORY / ".git").exists():
        pytest.skip("an installed copy, not a checkout: the next test covers it")
    run_table("tree_transduction", "ci", seeds=1, rows=["simple"], root=tmp_path,
              report=tmp_path / "report.md")
    result = json.loads(next(tmp_path.rglob("result.json")).read_text())
    assert result["commit"] == _git("rev-parse", "HEAD")
    assert result["dirty"] == bool(_git("status", "--porcelain", "--untracked-files=no"))
    assert result["torch"] == torch.__version__
    assert result["lightning"] == lightning.__version__
    assert result["threads"] == torch.get_num_threads() and result["device"] == "cpu"
    assert len(result["finished"]) == 10  # YYYY-MM-DD


def test_a_copy_outside_a_checkout_records_its_version_not_a_commit(tmp_path):
    """A package that is not the lit_structattn folder of a git checkout (an installed wheel;
    here a copy inside an unrelated repository) records no commit."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    shutil.copytree(REPOSITORY / "lit_structattn", tmp_path / "vendored" / "lit_structattn",
                    ignore=shutil.ignore_patterns("__pycache__", "datamodules", "configs"))
    code = ("from lit_structattn.reproduce.provenance import run_provenance; import json; "
            "print(json.dumps(run_provenance('cpu')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "vendored",
                         capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(tmp_path / "vendored"), "PATH": "/usr/bin:/bin"})
    recorded = json.loads(out.stdout)
    assert "commit" not in recorded and "dirty" not in recorded
    assert recorded["version"] and recorded["torch"] == torch.__version__
