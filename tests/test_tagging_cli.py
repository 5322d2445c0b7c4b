"""Easy-first tagging end to end through ``structattn`` on a slice of the real UD English data:
fit with raindrop figures in TensorBoard, test from the best checkpoint, predict to JSONL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from datamodules.files import data_root

ROOT = Path(__file__).resolve().parent.parent
EASY = ROOT / "configs" / "easy_first"

pytestmark = pytest.mark.skipif(not (data_root() / "ud_english_ewt").is_dir(),
                                reason="UD English-EWT not available")


def structattn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lit_structattn.cli", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def tiny(out: Path, row: str) -> list[str]:
    return [
        "--config", str(EASY / "common.yaml"), "--config", str(EASY / "pos.yaml"),
        "--config", str(EASY / "rows" / f"{row}.yaml"),
        "--trainer.default_root_dir", str(out), "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "8", "--trainer.limit_val_batches", "3",
        "--trainer.limit_test_batches", "3", "--trainer.limit_predict_batches", "2",
        "--data.init_args.batch_size", "16", "--trainer.enable_progress_bar", "false",
    ]


def test_fit_test_predict_nef(tmp_path):
    fit = structattn("fit", *tiny(tmp_path, "nef_f_csoftmax"), cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    assert "raindrop/example_0" in events.Tags()["images"]

    # the checkpoint alone rebuilds the tagger (vocabulary sizes and tags are kept in it)
    from lit_structattn.tasks import TaggingTask

    checkpoint = next(tmp_path.rglob("last.ckpt"))
    loaded = TaggingTask.load_from_checkpoint(checkpoint, map_location="cpu")
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, state[name]), name
    assert "VERB" in loaded.data_sizes["tags"] and "test_first_verb" in loaded.metrics

    test = structattn("test", *tiny(tmp_path, "nef_f_csoftmax"), "--ckpt_path", "best",
                      cwd=tmp_path)
    assert test.returncode == 0, test.stderr[-3000:]
    assert "test/accuracy" in test.stdout

    output = tmp_path / "predictions.jsonl"
    predict = structattn("predict", *tiny(tmp_path, "nef_f_csoftmax"), "--ckpt_path", "last",
                         "--trainer.callbacks+=lit_structattn.callbacks.JsonlPredictionWriter",
                         "--trainer.callbacks.output_path", str(output), cwd=tmp_path)
    assert predict.returncode == 0, predict.stderr[-3000:]
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == 2 * 16  # two predict batches
    for record in records:
        length = len(record["words"])
        assert len(record["prediction"]) == length and len(record["attention"]) == length  # N=L
        cumulative = [sum(column) for column in zip(*record["attention"], strict=True)]
        assert all(c <= 1 + 1e-4 for c in cumulative)  # csoftmax: at most one unit per word


def test_wrong_row_for_checkpoint_is_refused(tmp_path):
    fit = structattn("fit", *tiny(tmp_path, "bilstm"), cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    test = structattn("test", *tiny(tmp_path, "nef_f_csoftmax"), "--ckpt_path", "last",
                      cwd=tmp_path)
    assert test.returncode != 0
    assert "steps: 0 in the checkpoint, 'L' now" in test.stderr
