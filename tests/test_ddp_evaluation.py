"""DDP counts every evaluation example once: validating (or testing) one checkpoint on an
odd-sized split with 1 and with 2 CPU (gloo) processes logs the same metrics (the padded
DistributedSampler would evaluate one example twice; :class:`~lit_structattn.datamodules.batching.
EvaluationShard`), the loss included (a torchmetrics mean weighted by what the loss averages:
examples, or the target tokens of an encoder-decoder; ``Task.log_validation_loss``), one test
per task family (QA's: ``tests/test_babi_ddp.py``). On a machine with GPUs, the same over all of
them after a DDP fit there (marked ``cuda``)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from lit_structattn.run.lightning_cli import build_cli

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


def evaluated_metrics(args: list[str], checkpoint: Path, out: Path, devices: int,
                      accelerator: str = "cpu", subcommand: str = "validate") -> dict:
    """The metrics ``structattn <subcommand>`` (``validate`` or ``test``) logs for
    ``checkpoint`` on ``devices`` processes."""
    ddp = ["--trainer.strategy", "ddp"] if devices > 1 else []
    run = subprocess.run(
        [sys.executable, "-m", "lit_structattn.cli", subcommand, *args,
         "--ckpt_path", str(checkpoint), "--trainer.accelerator", accelerator,
         "--trainer.devices", str(devices), *ddp, "--trainer.callbacks", "[]",
         "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
         "--trainer.logger.save_dir", str(out), "--trainer.enable_progress_bar", "false"],
        cwd=out.parent, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    (metrics,) = out.rglob("metrics.csv")
    with metrics.open() as lines:
        (row,) = [r for r in csv.DictReader(lines) if any(r.values())]
    return {key: float(value) for key, value in row.items() if value and key != "step"}


def fitted(args: list[str], root: Path) -> Path:
    """A checkpoint of one short epoch of the run ``args``, fitted in this process."""
    cli = build_cli([*args, "--trainer.default_root_dir", str(root), "--trainer.logger",
                     "false", "--trainer.callbacks", "[]", "--trainer.max_epochs", "1",
                     "--trainer.enable_progress_bar", "false"], run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    checkpoint = root / "fitted.ckpt"
    cli.trainer.save_checkpoint(checkpoint)
    return checkpoint


def assert_one_and_two_processes_agree(args: list[str], tmp_path: Path, counted: str,
                                       loss: str = "val/loss",
                                       subcommand: str = "validate") -> None:
    """One checkpoint of ``args`` evaluated by ``subcommand`` with 1 and with 2 processes logs
    the same ``counted`` metric and ``loss`` (and the same everything else)."""
    checkpoint = fitted(args, tmp_path / "fit")
    one = evaluated_metrics(args, checkpoint, tmp_path / "one", 1, subcommand=subcommand)
    two = evaluated_metrics(args, checkpoint, tmp_path / "two", 2, subcommand=subcommand)
    assert counted in one and loss in one and set(one) == set(two)
    for key, value in one.items():  # losses, perplexities: the same sum in another order
        summed = key.endswith(("loss", "ppl"))
        assert two[key] == (pytest.approx(value, rel=1e-6) if summed else value), (key, one, two)


@pytest.mark.slow
def test_tagger(tmp_path):
    from tests.test_tagging_raw import NER, SMALL, write_conll

    folder = tmp_path / "conll"
    folder.mkdir()
    write_conll(folder / "eng.train", NER + NER)
    write_conll(folder / "eng.testa", NER[:3])  # 3 sentences: 2 processes would pad to 4
    write_conll(folder / "eng.testb", NER[:2])
    easy = CONFIGS / "easy_first"
    args = ["--config", str(easy / "common.yaml"), "--config", str(easy / "ner_en.yaml"),
            "--config", str(easy / "rows" / "nef_crf_f_5.yaml"), *SMALL,
            "--data.init_args.data_dir", str(folder), "--data.init_args.batch_size", "2",
            "--model.init_args.metric", "accuracy"]
    assert_one_and_two_processes_agree(args, tmp_path, "val/accuracy")


NEEDLE = ["--config", str(CONFIGS / "demo" / "needle.yaml"), "--data.init_args.num_train", "64",
          "--data.init_args.num_val", "33", "--data.init_args.batch_size", "4"]


@pytest.mark.slow
def test_needle_classifier(tmp_path):
    assert_one_and_two_processes_agree(NEEDLE, tmp_path, "val/accuracy")


def test_tree_transduction(tmp_path):
    """15 validation formulas of 5 depths in batches of 4 by length: the processes' batches are
    not the one process's, so a loss averaged per batch, not per target token, would differ."""
    args = ["--config", str(CONFIGS / "tree_transduction" / "base.yaml"), "--config",
            str(CONFIGS / "tree_transduction" / "none.yaml"),
            "--data.init_args.train_per_depth", "10", "--data.init_args.eval_per_depth", "3",
            "--data.init_args.batch_size", "4", "--model.init_args.max_decode_len", "40"]
    assert_one_and_two_processes_agree(args, tmp_path, "val/ltf")


@pytest.mark.cuda
def test_ddp_over_every_gpu(tmp_path):
    """A DDP fit over all the GPUs of the machine (one GPU runs the DDP strategy too), then the
    checkpoint validated on one GPU and on all: the same metrics."""
    import torch

    gpus = torch.cuda.device_count()
    run = subprocess.run(
        [sys.executable, "-m", "lit_structattn.cli", "fit", *NEEDLE, "--trainer.accelerator",
         "cuda", "--trainer.devices", str(gpus), "--trainer.strategy", "ddp",
         "--trainer.max_epochs", "2", "--trainer.logger", "false", "--trainer.callbacks", "[]",
         "--trainer.default_root_dir", str(tmp_path / "fit"), "--trainer.enable_progress_bar",
         "false"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    (checkpoint,) = (tmp_path / "fit").rglob("*.ckpt")
    one = evaluated_metrics(NEEDLE, checkpoint, tmp_path / "one", 1, "cuda")
    every = evaluated_metrics(NEEDLE, checkpoint, tmp_path / "every", gpus, "cuda")
    assert "val/accuracy" in one and set(one) == set(every)
    assert all(every[key] == pytest.approx(value, rel=1e-6) for key, value in one.items())


@pytest.mark.slow
def test_nli(tmp_path):
    from tests.test_nli_cli import tiny

    args = tiny(tmp_path, "structured", "--data.init_args.batch_size", "2",
                "--data.init_args.val_fraction", "0.5")  # 15 validation pairs
    assert_one_and_two_processes_agree(args, tmp_path, "val/accuracy")


@pytest.mark.slow
@pytest.mark.parametrize(("subcommand", "counted", "loss"),
                         [("validate", "val/chrf", "val/loss"), ("test", "test/chrf", "test/ppl")])
def test_translation(tmp_path, subcommand, counted, loss):
    """The token-weighted NLL of 41 sentences in batches of 4 (val/loss; at test time the
    perplexity), and the scores of their decoded translations."""
    from tests.test_translation_task import tiny
    from tests.translation_corpus import write_corpus

    write_corpus(tmp_path / "corpus", pairs_per_split=(100, 41, 41))
    args = tiny(tmp_path, tmp_path / "run", "softmax", "--data.init_args.batch_size", "4",
                "--data.init_args.eval_batch_size", "4", "--model.init_args.drop_score",
                "false")
    assert_one_and_two_processes_agree(args, tmp_path, counted, loss, subcommand)
