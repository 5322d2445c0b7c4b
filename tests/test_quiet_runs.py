"""Quiet runs (lit_structattn/run/quiet.py, run/progress.py): through the ``structattn``
command with stdout piped, a fit prints its folder, one line per epoch and its best checkpoint,
and none of Lightning's chatter or the known third-party warnings; ``--verbose`` brings them
back; plain progress lines come at a steady rate during an epoch; a reproduction says its
threads and, on a busy machine, that its timings will be longer and why."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "demo" / "needle.yaml"

#: What Lightning prints on every run that a quiet run leaves out (the model summary by its
#: "Trainable params" line, the deprecation warning by its torch class)
CHATTER = ("Seed set to", "GPU available", "TPU available", "Tip:", "Trainable params",
           "LeafSpec", "logging interval")


def needle(subcommand: str, tmp_path: Path, *extra: str) -> list[str]:
    """``structattn SUBCOMMAND`` on a tiny needle task (2 epochs of 4 batches)."""
    return [sys.executable, "-m", "lit_structattn.cli", subcommand, "--config", str(CONFIG),
            "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "2",
            "--data.init_args.num_train", "128", *extra]


def piped(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``command`` run with stdout and stderr to pipes (not terminals)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("STRUCTATTN_VERBOSE", None)
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_a_piped_fit_prints_its_folder_a_line_per_epoch_and_no_chatter(tmp_path):
    run = piped(needle("fit", tmp_path), tmp_path)
    lines = run.stdout.splitlines()
    assert lines[0] == f"fit: run folder {tmp_path / 'lightning_logs' / 'version_0'}"
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 1/2", "epoch 2/2"], run.stdout
    for line in epochs:
        assert re.search(r": train/loss [\d.]+, val/loss [\d.]+, val/score [\d.]+, "
                         r"val/accuracy [\d.]+; [\d.]+ s", line), line
    assert "ETA" in epochs[0] and "ETA" not in epochs[1]  # nothing left after the last
    assert lines[-1].startswith("fit: done; best checkpoint ") and "(val/score " in lines[-1]
    assert "\r" not in run.stdout and "it/s" not in run.stdout  # no bar in a log
    for text in CHATTER:
        assert text not in run.stdout + run.stderr, (text, run.stderr)
    assert run.stderr == "", run.stderr
    # its test: the folder and checkpoint, the scores, no warning about the fit's checkpoints
    tested = piped(needle("test", tmp_path, "--ckpt_path", "last"), tmp_path)
    lines = tested.stdout.splitlines()
    assert lines[0].startswith(f"test: run folder {tmp_path / 'lightning_logs' / 'version_1'}, "
                               "checkpoint ") and lines[0].endswith("last.ckpt"), lines
    assert "test/score" in tested.stdout and tested.stderr == "", tested.stderr


def test_verbose_anywhere_brings_lightnings_messages_back(tmp_path):
    command = needle("fit", tmp_path)
    command.insert(command.index("--config"), "--verbose")
    run = piped(command, tmp_path)
    for text in ("Seed set to", "GPU available", "TPU available", "Tip:", "Trainable params"):
        assert text in run.stdout + run.stderr, text
    assert sum(line.startswith("epoch ") for line in run.stdout.splitlines()) == 2


def test_plain_progress_comes_at_a_steady_rate_within_an_epoch(tmp_path, capsys):
    """Under pytest stdout is no terminal: the trainer's progress is :class:`PlainProgress`;
    every batch is late for a line when ``every_seconds`` is 0."""
    from lit_structattn.run.lightning_cli import build_cli
    from lit_structattn.run.progress import PlainProgress

    cli = build_cli(["--config", str(CONFIG), "--trainer.default_root_dir", str(tmp_path),
                     "--trainer.max_epochs", "1", "--data.init_args.num_train", "96",
                     "--data.init_args.batch_size", "32"], run=False)
    progress = cli.trainer.progress_bar_callback
    assert isinstance(progress, PlainProgress)
    progress.every_seconds = 0.0
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    lines = capsys.readouterr().out.splitlines()
    steps = [line for line in lines if line.startswith("epoch 1/1: ") and "batches" in line]
    assert [line.split(",")[0] for line in steps] == [
        "epoch 1/1: 33% (1/3 batches)", "epoch 1/1: 67% (2/3 batches)",
        "epoch 1/1: 100% (3/3 batches)"], lines
    assert all("batches/s, train/loss " in line for line in steps)
    assert any(line.startswith("validation: 100% (") for line in lines), lines
    assert not any("Sanity" in line for line in lines)


def test_the_known_warnings_are_filtered_at_their_source():
    """The filter of Lightning's deprecated LeafSpec catches the warning as Lightning raises
    it (and only with the filters on: the test can fail)."""
    from lightning.pytorch.utilities._pytree import _tree_flatten

    from lit_structattn.run.quiet import quiet_output

    with warnings.catch_warnings(record=True) as loud:
        warnings.simplefilter("always")
        _tree_flatten(1)
    assert any("LeafSpec" in str(w.message) for w in loud)
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        quiet_output()
        _tree_flatten(1)
    assert not [w for w in quiet if "LeafSpec" in str(w.message)]


def test_lightnings_info_lines_go_ours_stay():
    """Quiet, ``rank_zero_info`` drops the lines Lightning logs ("GPU available: ...") and
    keeps this project's (translations written, BLEU, ...); verbose keeps both."""
    import lightning as L
    from lightning.pytorch.utilities import rank_zero_info

    from lit_structattn.run.quiet import quiet_output

    def logged(verbose: bool) -> list[str]:
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append
        lightnings = logging.getLogger("lightning.pytorch")  # where its loggers' lines go
        lightnings.addHandler(handler)
        try:
            quiet_output(verbose)
            rank_zero_info("ours: BLEU 12.3")
            L.Trainer(logger=False, enable_checkpointing=False, accelerator="cpu")
        finally:
            lightnings.removeHandler(handler)
            quiet_output(verbose=True)  # Lightning's own levels, as before the test
        return [record.getMessage() for record in records]

    assert logged(verbose=False) == ["ours: BLEU 12.3"]
    shown = logged(verbose=True)
    assert shown[0] == "ours: BLEU 12.3" and any("GPU available" in line for line in shown)


@pytest.mark.parametrize("load, busy", [(9.0, True), (1.5, False)])
def test_the_reproduction_says_its_threads_and_when_the_machine_is_busy(monkeypatch, load,
                                                                       busy):
    import torch

    from lit_structattn.reproduce import runner

    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    lines = runner.machine_notice()
    assert lines[0] == (f"threads: {torch.get_num_threads()} per run on 2 cores (set "
                        "OMP_NUM_THREADS to change it)")
    assert len(lines) == 1 + busy
    if busy:
        assert lines[1].startswith("the machine is busy (load 9.0 on 2 cores): other processes "
                                   "share the cores, so the runs take longer")
        assert "OMP_NUM_THREADS=1" in lines[1]


@pytest.mark.slow
def test_a_reproduction_prints_the_notice_then_quiet_runs(tmp_path, monkeypatch, capsys):
    """Through ``structattn reproduce`` (in process, the load made high): the notice first,
    then each run's folder and epoch lines, and no warning about testing the "best"
    checkpoint among several checkpoint callbacks."""
    from lit_structattn.cli import main

    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["reproduce", "tree_transduction", "--budget", "ci", "--seeds", "1", "--rows",
              "simple", "--root", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("threads: ") and out[1].startswith("the machine is busy (load 64")
    assert any(line.startswith("fit: run folder ") for line in out)
    assert any(line.startswith("epoch 1/1: train/loss ") for line in out)
    assert any(line.startswith("test: run folder ") for line in out)
    assert not [w for w in caught if 'ckpt_path="best"' in str(w.message)]
