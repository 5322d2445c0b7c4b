"""The seq2seq application end to end through ``structattn``: fit with TensorBoard figures,
predict to JSONL, a clear error for an incompatible checkpoint, and DDP on 2 CPU processes
reaching the validation loss of one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.logged_metrics import logged

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs" / "tree_transduction"


def structattn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # this checkout's package (not an installed one) and tests/ (for the crashing callback)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    return subprocess.run(
        [sys.executable, "-m", "lit_structattn.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=600, env=env,
    )


def tiny(row: str, out: Path, *extra: str) -> list[str]:
    """Arguments of a tiny run of a tree-transduction row writing everything under ``out``."""
    return [
        "--config", str(CONFIGS / "base.yaml"), "--config", str(CONFIGS / f"{row}.yaml"),
        "--trainer.default_root_dir", str(out),
        "--data.init_args.train_per_depth", "30",
        "--data.init_args.eval_per_depth", "4",
        "--model.init_args.max_decode_len", "60",
        "--trainer.enable_progress_bar", "false",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A structured model fitted for one epoch; returns its run folder."""
    out = tmp_path_factory.mktemp("structured")
    fit = structattn("fit", *tiny("structured", out, "--trainer.max_epochs", "1"), cwd=out)
    assert fit.returncode == 0, fit.stderr[-3000:]
    return out


def test_fit_logs_attention_figures(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next(trained.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    tags = set(events.Tags()["images"])
    assert {"attention/example_0", "self_attention/example_0", "parse/example_0"} <= tags


def test_predict_writes_jsonl(trained, tmp_path):
    last = next(trained.rglob("last.ckpt"))
    output = tmp_path / "predictions.jsonl"
    run = structattn("predict", *tiny("structured", tmp_path), "--ckpt_path", str(last),
                     "--trainer.callbacks+=lit_structattn.run.callbacks.JsonlPredictionWriter",
                     "--trainer.callbacks.output_path", str(output), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == 5 * 4  # the test split: depths 2-6, 4 formulas each
    for record in records:
        source, steps = record["input"].split(), len(record["prediction"].split()) + 1
        assert source[0] == "(" and len(record["attention"]) == min(steps, 60)  # + <eos>
        for row in record["attention"]:
            assert len(row) == len(source) and abs(sum(row) - 1) < 1e-3


def test_incompatible_checkpoint_names_the_hyperparameter(trained, tmp_path):
    last = next(trained.rglob("last.ckpt"))
    run = structattn("test", *tiny("structured", tmp_path), "--ckpt_path", str(last),
                     "--model.init_args.model.init_args.hidden_dim", "32", cwd=tmp_path)
    assert run.returncode != 0
    assert "model.hidden_dim: 50 in the checkpoint, 32 now" in run.stderr


def test_unknown_names_list_the_valid_ones(tmp_path):
    for option, valid in [
        ("--model.init_args.model.init_args.attention=hardmax",
         "valid: centmax15, csoftmax, csparsemax, entmax, entmax15, segmentation"),
        ("--model.init_args.model.init_args.encoder.source_attention=tree",
         "valid: none, simple, structured"),
    ]:
        run = structattn("fit", *tiny("simple", tmp_path), option, "--trainer.max_epochs", "1",
                         cwd=tmp_path)
        assert run.returncode != 0 and valid in run.stderr, run.stderr[-2000:]


def test_interrupted_fit_resumes_from_last(tmp_path):
    args = tiny("simple", tmp_path, "--trainer.max_epochs", "3")
    crash = structattn("fit", *args, "--trainer.callbacks+=crashing_callback.CrashAtEpoch",
                       "--trainer.callbacks.epoch", "2", cwd=tmp_path)
    assert crash.returncode == 17, crash.stderr[-3000:]
    import torch

    last = next(tmp_path.rglob("last.ckpt"))
    saved = torch.load(last, map_location="cpu", weights_only=True)
    assert saved["epoch"] == 1
    resumed = structattn("fit", *args, "--ckpt_path", "last", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Restored all states" in resumed.stderr + resumed.stdout
    newest = max(tmp_path.rglob("last.ckpt"), key=lambda path: path.stat().st_mtime)
    final = torch.load(newest, map_location="cpu", weights_only=True)
    assert final["epoch"] == 2 and final["global_step"] == 3 * saved["global_step"] // 2


def test_test_with_best_checkpoint_alias(trained, tmp_path):
    run = structattn("test", *tiny("structured", trained), "--ckpt_path", "best",
                     "--model.init_args.test_beam", "2", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "test/ltf_d6" in run.stdout


def final_val_loss(out: Path) -> float:
    return logged(out, "val/loss")[-1]


@pytest.mark.slow
def test_ddp_two_processes_match_one(tmp_path):
    """The same global batch (2 x 10 vs 1 x 20) and steps: DDP reaches the single-process
    validation loss within tolerance (the data order differs, so not exactly)."""
    losses = {}
    for name, devices, batch in [("single", "1", "20"), ("ddp", "2", "10")]:
        out = tmp_path / name
        args = tiny("simple", out, "--trainer.max_epochs", "4",
                    "--data.init_args.train_per_depth", "100", "--data.init_args.batch_size", batch,
                    "--trainer.devices", devices, "--trainer.strategy",
                    "ddp" if devices == "2" else "auto",
                    "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
                    "--trainer.logger.save_dir", str(out), "--trainer.callbacks", "[]",
                    "--model.init_args.optimizer", "torch.optim.Adam",
                    "--model.init_args.optimizer.init_args.lr", "0.01",
                    "--model.init_args.lr_scheduler", "null")
        out.mkdir()
        run = structattn("fit", *args, cwd=out)
        assert run.returncode == 0, run.stderr[-3000:]
        losses[name] = final_val_loss(out)
    assert losses["ddp"] < 2.0 and losses["single"] < 2.0, losses  # both learned (start ~3.3)
    assert abs(losses["ddp"] - losses["single"]) < 0.25 * losses["single"], losses
