"""`.ci/child_venv.py`, with which `make test-lower-bounds` and `make test-wheel` build their
venvs: made from inside a venv, the new venv sees that venv's packages (torch, the test tools)
after its own, its pip counts that torch as installed, and it refuses to start without a torch."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import venv
from pathlib import Path

HELPER = Path(__file__).resolve().parent.parent / ".ci" / "child_venv.py"


def run(python: Path | str, *args: str | Path) -> subprocess.CompletedProcess:
    """`python args...`, its output captured as text."""
    return subprocess.run([str(python), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def child_venv(python: Path | str, path: Path, *pip_args: str) -> Path:
    """The interpreter of the venv that the helper, run by `python`, made at `path`."""
    result = run(python, HELPER, path, *pip_args)
    assert result.returncode == 0, result.stderr
    return path / "bin" / "python"


def site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(run(python, "-c", code).stdout.strip())


def test_a_venv_made_from_a_venv_sees_its_packages_after_its_own(tmp_path):
    parent = child_venv(sys.executable, tmp_path / "parent")
    (site_packages(parent) / "only_parent44.py").write_text("")
    (site_packages(parent) / "both44.py").write_text("WHERE = 'parent'\n")
    child = child_venv(parent, tmp_path / "child")
    (site_packages(child) / "both44.py").write_text("WHERE = 'child'\n")

    code = ("import importlib.util as u, both44, only_parent44; "
            "print(both44.WHERE, u.find_spec('torch').origin)")
    result = run(child, "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["child", importlib.util.find_spec("torch").origin]


def test_pip_in_the_new_venv_counts_our_torch_as_installed(tmp_path):
    # --report lists what pip would install: nothing, so no torch is ever downloaded
    report = tmp_path / "report.json"
    child_venv(sys.executable, tmp_path / "child", "--dry-run", "--no-index", "--report",
               str(report), "torch")
    assert json.loads(report.read_text())["install"] == []
    pin = (tmp_path / "child" / "torch-pin.txt").read_text()
    assert pin == f"torch=={importlib.metadata.version('torch')}\n"


def test_an_interpreter_without_torch_is_refused_in_one_line(tmp_path):
    venv.create(tmp_path / "bare")
    result = run(tmp_path / "bare" / "bin" / "python", HELPER, tmp_path / "child")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "has no torch to share" in result.stderr
    assert not (tmp_path / "child").exists()
