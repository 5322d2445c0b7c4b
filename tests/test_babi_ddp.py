"""QATask under DDP (2 CPU processes): the logged validation answer and fact accuracies and the
validation loss are those of the whole validation split, not of one process's half."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lit_structattn.datamodules.files import data_root
from lit_structattn.run.lightning_cli import build_cli
from tests.logged_metrics import logged

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "babi"
BABI = data_root() / "babi_v1.2_en"


def _args(root: Path, *extra: str) -> list[str]:
    return ["--config", str(CONFIGS / "base.yaml"), "--config",
            str(CONFIGS / "rows" / "binary_crf.yaml"),
            "--data.init_args.data_dir", str(BABI), "--data.init_args.task", "2",
            "--model.init_args.linear_start_epochs", "0",
            "--trainer.default_root_dir", str(root), "--trainer.callbacks", "[]",
            "--trainer.enable_progress_bar", "false", *extra]


@pytest.mark.slow
@pytest.mark.skipif(not BABI.is_dir(), reason="../shared/data/babi_v1.2_en is absent")
def test_ddp_validation_accuracies_cover_the_whole_split(tmp_path):
    """100 validation questions, 50 per process. The halves' accuracies differ from the whole's
    after a little training, so a metric that were not summed across processes would fail the
    comparison with one process validating the saved weights."""
    run = subprocess.run(
        [sys.executable, "-m", "lit_structattn.cli", "fit",
         *_args(tmp_path / "ddp", "--trainer.max_epochs", "1", "--trainer.limit_train_batches",
                "10", "--trainer.devices", "2", "--trainer.strategy", "ddp",
                "--trainer.enable_checkpointing", "true",
                "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
                "--trainer.logger.save_dir", str(tmp_path / "ddp"))],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    values = {name: logged(tmp_path / "ddp", name)
              for name in ("val/accuracy", "val/fact_accuracy", "val/loss")}
    (checkpoint,) = (tmp_path / "ddp").rglob("*.ckpt")
    single = build_cli(_args(tmp_path / "single", "--trainer.logger", "false"), run=False)
    (validated,) = single.trainer.validate(single.model, datamodule=single.datamodule,
                                           ckpt_path=str(checkpoint), verbose=False)
    for name, (value,) in values.items():  # logged once, by the one validation
        assert validated[name] == pytest.approx(value, rel=1e-6, abs=1e-6), name
