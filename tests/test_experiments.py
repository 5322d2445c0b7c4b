"""Experiments by name from any folder (issue 31, item 1): every table row is an experiment, its
config stack ships with the package, and ``--config configs/...`` finds the shipped file."""

from __future__ import annotations

from pathlib import Path

import pytest

from lit_structattn.cli import command as cli
from lit_structattn.cli import experiments
from lit_structattn.reproduce.tables import CONFIGS, TABLES


def test_every_row_is_an_experiment_with_shipped_configs():
    found = experiments.experiments()
    assert len(found) == sum(len(table.rows) for table in TABLES.values())
    structured = found["tree_transduction/structured"]
    assert structured.configs == (CONFIGS / "tree_transduction" / "base.yaml",
                                  CONFIGS / "tree_transduction" / "structured.yaml")
    assert found["babi_qa/task_16_binary_crf"].overrides == (
        "--data.init_args.task", "16", "--model.init_args.model.init_args.hops", "3")
    assert CONFIGS.parent.name == "lit_structattn"  # inside the package, shipped with it


def test_expand_replaces_the_experiment_and_finds_shipped_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty folder: no configs/ here
    args = experiments.expand(["fit", "--experiment=nli/structured_snli", "--trainer.max_epochs",
                               "1", "--config", "configs/demo/needle.yaml"])
    stack = experiments.find("nli/structured_snli").arguments()
    assert args == ["fit", *stack, "--trainer.max_epochs", "1",
                    "--config", str(CONFIGS / "demo" / "needle.yaml")]
    own = tmp_path / "configs" / "demo" / "needle.yaml"  # a file of that name here wins
    own.parent.mkdir(parents=True)
    own.write_text("seed_everything: 1\n")
    assert experiments.expand(["--config", "configs/demo/needle.yaml"])[1] == \
        "configs/demo/needle.yaml"


def test_unknown_experiment_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown experiment 'nli/attention'; its table has "
                       r"nli/no_attention_snli, "):
        experiments.find("nli/attention")
    with pytest.raises(ValueError, match="tables: babi_qa, "):
        experiments.find("nmt/softmax")


def test_experiments_command_lists_and_shows(capsys):
    cli.main(["experiments"])
    listed = capsys.readouterr().out
    assert "tree_transduction/structured  (structured)" in listed and "Configs: " in listed
    cli.main(["experiments", "tree_transduction/simple"])
    shown = capsys.readouterr().out
    assert f"--config {CONFIGS / 'tree_transduction' / 'simple.yaml'}" in shown
    with pytest.raises(SystemExit) as exited:
        cli.main(["experiments", "tree_transduction/deep"])
    assert exited.value.code == 2 and "unknown experiment" in capsys.readouterr().err


def test_fit_an_experiment_from_an_empty_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli.main(["fit", "--experiment", "tree_transduction/simple",
              "--data.init_args.train_per_depth", "10", "--data.init_args.eval_per_depth", "2",
              "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false",
              "--trainer.callbacks", "null", "--model.init_args.test_beam", "1"])
    assert list(Path("runs").rglob("*.ckpt"))  # outputs in the working directory


def test_data_is_found_beside_a_checkout_or_in_the_user_cache(tmp_path, monkeypatch):
    from lit_structattn.datamodules import files

    monkeypatch.delenv("STRUCTATTN_DATA", raising=False)
    monkeypatch.setenv("STRUCTATTN_CACHE", str(tmp_path / "cache"))
    installed = tmp_path / "venv" / "lib" / "site-packages" / "datamodules" / "files.py"
    monkeypatch.setattr(files, "__file__", str(installed))  # a pip install: no pyproject.toml
    assert files.data_root() == tmp_path / "cache" / "data"
    checkout = tmp_path / "repo" / "datamodules" / "files.py"
    checkout.parent.mkdir(parents=True)
    (tmp_path / "repo" / "pyproject.toml").write_text("")
    monkeypatch.setattr(files, "__file__", str(checkout))
    assert files.data_root() == tmp_path / "shared" / "data"
    monkeypatch.setenv("STRUCTATTN_DATA", str(tmp_path / "mine"))
    assert files.data_root() == tmp_path / "mine"


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    """``structattn experiments | head -1``: the listing stops quietly when the pipe closes."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    listing = subprocess.Popen(
        [sys.executable, "-m", "lit_structattn.cli", "experiments"], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
        env={**os.environ, "PYTHONPATH": str(root)})
    listing.stdout.close()  # the reader leaves before the command writes
    stderr = listing.stderr.read().decode()
    assert listing.wait(timeout=120) == 141  # as a shell reports a command stopped by SIGPIPE
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
