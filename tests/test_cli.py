"""The structattn command end to end: fit, resume from the last checkpoint, test, help and
version, and user errors (bad names, keys and abbreviations) as one short message."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "demo" / "needle.yaml"


def structattn(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lit_structattn.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300,
        env=None if env is None else {**os.environ, **env},
    )


def small_run(tmp_path: Path) -> list[str]:
    return [
        "--config", str(CONFIG),
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.callbacks.init_args.dirpath", str(tmp_path / "checkpoints"),
        "--data.init_args.num_train", "256",
        "--trainer.enable_progress_bar", "false",
    ]


def test_fit_resume_and_test(tmp_path):
    fit = structattn("fit", *small_run(tmp_path), "--trainer.max_epochs", "2", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    assert "LightningCLI's args parameter" not in fit.stderr  # no warning on every command
    last = next(tmp_path.rglob("last.ckpt"))
    resumed = structattn("fit", *small_run(tmp_path), "--trainer.max_epochs", "3",
                         "--ckpt_path", str(last), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Restored all states" in resumed.stderr + resumed.stdout
    test = structattn("test", *small_run(tmp_path), "--ckpt_path", str(last), cwd=tmp_path)
    assert test.returncode == 0, test.stderr[-3000:]
    assert "test/acc" in test.stdout
    assert list(tmp_path.rglob("events.out.tfevents.*"))


def test_resumed_fit_keeps_its_checkpoint_folder(tmp_path):
    """With checkpoints in the logger's folder (no dirpath), a resumed fit logs to version_1
    but keeps writing checkpoints beside the one it resumed from, so Lightning keeps its record
    of the best checkpoint from before the interruption."""
    run = [*small_run(tmp_path), "--trainer.callbacks.init_args.dirpath", "null"]
    fit = structattn("fit", *run, "--trainer.max_epochs", "1", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    resumed = structattn("fit", *run, "--trainer.max_epochs", "2", "--ckpt_path", "last",
                         cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "dirpath has changed" not in resumed.stderr + resumed.stdout
    assert list(tmp_path.rglob("version_1"))  # the resumed fit's logs
    assert not list(tmp_path.rglob("version_1/checkpoints"))


def test_print_config_and_unknown_transform(tmp_path):
    shown = structattn("fit", "--config", str(CONFIG), "--print_config", cwd=tmp_path)
    assert shown.returncode == 0 and "NeedleDataModule" in shown.stdout
    assert "LightningCLI's args parameter" not in shown.stderr
    bad = structattn("fit", *small_run(tmp_path), "--model.init_args.model.init_args.transform",
                     "hardmax", cwd=tmp_path)
    assert bad.returncode == 2
    assert ("valid: centmax15, csoftmax, csparsemax, entmax, entmax15, sigmoid, softmax, "
            "sparsemax") in bad.stderr
    assert "hardmax" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) <= 4, bad.stderr
    for debug in ({"args": ["--debug"]}, {"env": {"STRUCTATTN_DEBUG": "1"}}):
        shown = structattn("fit", *small_run(tmp_path),
                           "--model.init_args.model.init_args.transform", "hardmax",
                           *debug.get("args", []), cwd=tmp_path, env=debug.get("env"))
        assert shown.returncode != 0 and "Traceback" in shown.stderr, debug


def test_help_version_and_no_abbreviations(tmp_path):
    shown = structattn("--help", cwd=tmp_path)
    assert shown.returncode == 0
    assert "{fit,validate,test,predict,reproduce,experiments}" in shown.stdout
    assert "--version" in shown.stdout and "--debug" in shown.stdout
    assert "LightningCLI's args parameter" not in shown.stderr
    printed = structattn("--version", cwd=tmp_path)
    assert printed.returncode == 0 and version("lit_structattn") in printed.stdout
    # an option is never taken for a longer one it begins
    abbreviated = structattn("fit", "--config", str(CONFIG), "--trainer.max_epoch", "1",
                             "--print_config", cwd=tmp_path)
    assert abbreviated.returncode == 2 and "max_epochs: 1" not in abbreviated.stdout
    assert "unrecognized arguments: --trainer.max_epoch 1" in abbreviated.stderr.lower()
    assert len(abbreviated.stderr.strip().splitlines()) <= 3, abbreviated.stderr


def test_unknown_config_key_lists_the_valid_ones(tmp_path):
    bad = structattn("fit", "--config", str(CONFIG), "--model.init_args.hidden", "8",
                     cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "Option 'hidden' is not accepted" in bad.stderr
    assert "valid: model, optimizer, lr_scheduler" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) <= 3, bad.stderr
