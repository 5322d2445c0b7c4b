"""The structattn command end to end: fit, resume from the last checkpoint, test, bad names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "demo" / "needle.yaml"


def structattn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lit_structattn.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )


def small_run(tmp_path: Path) -> list[str]:
    return [
        "--config", str(CONFIG),
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--trainer.callbacks.init_args.dirpath", str(tmp_path / "checkpoints"),
        "--data.init_args.num_train", "256",
        "--trainer.enable_progress_bar", "false",
    ]


def test_fit_resume_and_test(tmp_path):
    fit = structattn("fit", *small_run(tmp_path), "--trainer.max_epochs", "2", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
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
    bad = structattn("fit", *small_run(tmp_path), "--model.init_args.transform", "hardmax",
                     cwd=tmp_path)
    assert bad.returncode != 0
    assert "valid: csoftmax, csparsemax, sigmoid, softmax, sparsemax" in bad.stderr
