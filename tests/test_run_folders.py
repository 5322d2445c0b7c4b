"""A run never writes into another run's folder: runs on one root get their own version
folders, a run without a logger locks its root, every shipped config honours
``--trainer.default_root_dir``, and a reproduction waits for a run another process is doing."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from lit_structattn.cli import command as cli
from lit_structattn.reproduce import runner
from lit_structattn.reproduce.ledger import run_dir
from lit_structattn.reproduce.tables import TABLES
from lit_structattn.run.folders import FIT_LOCK, FolderBusy, folder_lock
from lit_structattn.run.lightning_cli import build_cli

ROOT = Path(__file__).resolve().parent.parent
NEEDLE = ROOT / "configs" / "demo" / "needle.yaml"
SMALL = ["--config", str(NEEDLE), "--data.init_args.num_train", "64",
         "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "1",
         "--trainer.enable_model_summary", "false"]


def test_trainers_built_on_one_root_take_their_own_versions(tmp_path):
    """Lightning numbers a run when it first logs, by listing the folders: two runs that
    start together would both take version_0."""
    first, second = (build_cli([*SMALL, "--trainer.default_root_dir", str(tmp_path)],
                               run=False) for _ in range(2))
    assert (first.trainer.logger.version, second.trainer.logger.version) == (0, 1)
    assert first.trainer.log_dir != second.trainer.log_dir


def test_two_fits_started_together_keep_their_own_checkpoints(tmp_path):
    command = [sys.executable, "-m", "lit_structattn.cli", "fit", *SMALL,
               "--trainer.default_root_dir", str(tmp_path)]
    fits = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for fit in fits:
        assert fit.wait(timeout=300) == 0, fit.stderr.read()[-3000:]
    versions = sorted(p.name for p in (tmp_path / "lightning_logs").iterdir())
    assert versions == ["version_0", "version_1"]
    for version in versions:
        folder = tmp_path / "lightning_logs" / version
        assert (folder / "config.yaml").is_file()
        assert {p.name for p in (folder / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt"}


def test_a_run_without_a_logger_is_refused_a_root_in_use(tmp_path, capsys):
    with folder_lock(tmp_path, FIT_LOCK, wait=False):
        with pytest.raises(SystemExit) as exited:
            cli.main(["fit", *SMALL, "--trainer.logger", "false",
                      "--trainer.default_root_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert f"{tmp_path} is in use by another run" in err.splitlines()[0]
    assert not (tmp_path / "config.yaml").exists()
    with pytest.raises(FolderBusy), folder_lock(tmp_path, "x.lock", wait=False), \
            folder_lock(tmp_path, "x.lock", wait=False):
        pass


def shipped_configs() -> list[Path]:
    return sorted((ROOT / "configs").rglob("*.yaml"))


def paths_in(node, key: str = "") -> list[str]:
    """The values of every ``dirpath`` / ``save_dir`` key in a parsed YAML tree."""
    if isinstance(node, dict):
        return [v for k, value in node.items() for v in paths_in(value, k)]
    if isinstance(node, list):
        return [v for item in node for v in paths_in(item, key)]
    return [str(node)] if key in ("dirpath", "save_dir") and node is not None else []


@pytest.mark.parametrize("config", shipped_configs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_config_writes_under_its_default_root_dir(config):
    """No logger or checkpoint folder pinned in a config: ``--trainer.default_root_dir``
    decides where a run writes."""
    assert paths_in(yaml.safe_load(config.read_text())) == []


def test_a_second_reproduction_of_a_running_seed_waits_and_takes_its_result(
        tmp_path, monkeypatch, capsys):
    table = TABLES["tree_transduction"]
    row = table.rows[0]
    trained = []
    monkeypatch.setattr(runner, "_fit_and_test", lambda *args: trained.append(args) or {})
    out = run_dir(table, row, "ci", 0, tmp_path)
    holding = threading.Event()

    def first_process():
        with folder_lock(out.parent, ".seed0.lock", wait=False):
            holding.set()
            time.sleep(0.5)
            out.mkdir(parents=True)
            (out / "result.json").write_text('{"metrics": {"test/ltf": 0.5}}')

    other = threading.Thread(target=first_process)
    other.start()
    holding.wait()
    result = runner.run_one(table, row, "ci", 0, tmp_path)
    other.join()
    assert result == {"metrics": {"test/ltf": 0.5}} and not trained
    assert "running in another process" in capsys.readouterr().err
