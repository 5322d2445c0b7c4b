"""Easy-first tagging end to end through ``structattn`` on a slice of the real UD English data:
fit with raindrop figures in TensorBoard, test from the best checkpoint, predict to JSONL; and
the QE row in process on generated files: what the CLI links from the data (sizes, tag names) is
in the checkpoint, which alone rebuilds the task; a task refuses data with other tags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch

from lit_structattn.datamodules.files import data_root

ROOT = Path(__file__).resolve().parent.parent
EASY = ROOT / "configs" / "easy_first"

needs_ud = pytest.mark.skipif(not (data_root() / "ud_english_ewt").is_dir(),
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


@needs_ud
def test_fit_test_predict_nef(tmp_path):
    fit = structattn("fit", *tiny(tmp_path, "nef_f_csoftmax"), cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    assert "raindrop/example_0" in events.Tags()["images"]

    # the checkpoint alone rebuilds the tagger: the sizes and tags linked from the data are in
    # its hyper-parameters
    from lit_structattn.datamodules.ud_pos import UDPOSDataModule
    from lit_structattn.tasks import TaggingTask

    checkpoint = next(tmp_path.rglob("last.ckpt"))
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    hparams = saved["hyper_parameters"]
    assert "data_sizes" not in saved
    with mock.patch.object(UDPOSDataModule, "setup", side_effect=AssertionError("data read")):
        loaded = TaggingTask.load_from_checkpoint(checkpoint, map_location="cpu")
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, saved["state_dict"][name]), name
    tagger = hparams["model"]["init_args"]
    encoder = loaded.model.encoder
    assert tagger["vocab_size"] == encoder.word_embedding.num_embeddings > 2
    assert tagger["affix_vocab_size"] == encoder.prefix_embedding.num_embeddings > 2
    assert tagger["num_tags"] == loaded.model.num_tags == len(hparams["tag_names"])
    assert hparams["tag_names"][0] == "<pad>" and "VERB" in hparams["tag_names"]
    assert loaded.tag_names == hparams["tag_names"]
    assert "first_step_on_verb" in loaded.metrics["test"]

    test = structattn("test", *tiny(tmp_path, "nef_f_csoftmax"), "--ckpt_path", "best",
                      cwd=tmp_path)
    assert test.returncode == 0, test.stderr[-3000:]
    assert "test/accuracy" in test.stdout

    output = tmp_path / "predictions.jsonl"
    predict = structattn("predict", *tiny(tmp_path, "nef_f_csoftmax"), "--ckpt_path", "last",
                         "--trainer.callbacks+=lit_structattn.run.callbacks.JsonlPredictionWriter",
                         "--trainer.callbacks.output_path", str(output), cwd=tmp_path)
    assert predict.returncode == 0, predict.stderr[-3000:]
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == 2 * 16  # two predict batches
    for record in records:
        length = len(record["words"])
        assert len(record["tags"]) == length and len(record["attention"]) == length  # N=L
        cumulative = [sum(column) for column in zip(*record["attention"], strict=True)]
        assert all(c <= 1 + 1e-4 for c in cumulative)  # csoftmax: at most one unit per word


@needs_ud
def test_wrong_row_for_checkpoint_is_refused(tmp_path):
    fit = structattn("fit", *tiny(tmp_path, "bilstm"), cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    test = structattn("test", *tiny(tmp_path, "nef_f_csoftmax"), "--ckpt_path", "last",
                      cwd=tmp_path)
    assert test.returncode != 0
    assert "model.decoder.steps: 0 in the checkpoint, 'L' now" in test.stderr


def test_qe_checkpoint_keeps_what_the_data_gave(tmp_path):
    from lit_structattn.datamodules.word_qe import WordQEDataModule
    from lit_structattn.run.lightning_cli import build_cli
    from lit_structattn.tasks import TaggingTask

    from .test_vectors import tiny_qe

    tiny_qe(tmp_path)
    run = tmp_path / "run"
    cli = build_cli([
        "fit", "--config", str(EASY / "common.yaml"), "--config", str(EASY / "qe.yaml"),
        "--config", str(EASY / "rows" / "nef_crf_f_5.yaml"),
        "--data.init_args.data_dir", str(tmp_path), "--trainer.default_root_dir", str(run),
        "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false",
    ])
    data = cli.datamodule
    checkpoint = next(run.rglob("last.ckpt"))
    hparams = torch.load(checkpoint, map_location="cpu", weights_only=True)["hyper_parameters"]
    tagger = hparams["model"]["init_args"]
    assert (tagger["vocab_size"], tagger["num_tags"], tagger["source_vocab_size"]) == (
        data.vocab_size, data.num_tags, data.source_vocab_size)
    assert hparams["tag_names"] == ["<pad>", "BAD", "OK"]
    with mock.patch.object(WordQEDataModule, "setup", side_effect=AssertionError("data read")):
        loaded = TaggingTask.load_from_checkpoint(checkpoint, map_location="cpu")
    encoder = loaded.model.encoder
    assert encoder.source_embedding.num_embeddings == data.source_vocab_size
    assert encoder.prefix_embedding is None  # qe.yaml: use_affixes false
    assert loaded.tag_names == data.tag_names and loaded.loss_weights.tolist() == [1, 5, 1]



def test_task_refuses_data_with_other_tags(tmp_path):
    import lightning as L

    from lit_structattn.datamodules.word_qe import WordQEDataModule
    from lit_structattn.tasks import TaggingTask

    from .test_vectors import tiny_qe, tiny_tagger

    tiny_qe(tmp_path)
    module = WordQEDataModule(str(tmp_path), batch_size=2)
    swapped = TaggingTask(tiny_tagger(module, word_dim=3).model, ["<pad>", "OK", "BAD"],
                          metric="f1_mult")
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    with pytest.raises(ValueError, match=r"the task's tags \['<pad>', 'OK', 'BAD'\] are not "
                       r"the data's \['<pad>', 'BAD', 'OK'\]"):
        trainer.validate(swapped, datamodule=module)
