"""Nothing lost on interruption (issue 29): SIGINT/SIGTERM writes a checkpoint at the training
step, a fit resumed from it ends with the weights of the uninterrupted fit, checkpoints are
written whole and a broken ``last.ckpt`` is skipped for the newest intact one; the same inside
``structattn reproduce``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from lit_structattn.run.checkpoints import AtomicCheckpointIO, resolve_checkpoint
from lit_structattn.run.interruption import FitInterrupted

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs" / "tree_transduction"
SLOW_STEPS = ("--trainer.callbacks+=crashing_callback.SignalAtStep",
              "--trainer.callbacks.pause", "0.1")


def tiny(out: Path, *extra: str) -> list[str]:
    """A 3-epoch fit of the tree-transduction "simple" row on 90 formulas (5 batches an
    epoch) writing under ``out``."""
    return [
        "fit", "--config", str(CONFIGS / "base.yaml"), "--config", str(CONFIGS / "simple.yaml"),
        "--trainer.default_root_dir", str(out), "--trainer.max_epochs", "3",
        "--data.init_args.train_per_depth", "30", "--data.init_args.eval_per_depth", "4",
        "--model.init_args.max_decode_len", "60", "--trainer.enable_progress_bar", "false",
        *extra,
    ]


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "lit_structattn.cli", *args], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=600)
    return process.returncode, stderr


def newest_last(out: Path) -> Path:
    return max(out.rglob("last.ckpt"), key=lambda path: path.stat().st_mtime)


def weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(newest_last(out), map_location="cpu", weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """The uninterrupted 3-epoch fit."""
    out = tmp_path_factory.mktemp("straight")
    code, stderr = finish(start(tiny(out, *SLOW_STEPS), out))
    assert code == 0, stderr[-3000:]
    return out


def test_sigint_mid_epoch_then_resume_gives_the_uninterrupted_weights(straight, tmp_path):
    fit = start(tiny(tmp_path, *SLOW_STEPS), tmp_path)
    deadline = time.monotonic() + 300
    while not list(tmp_path.rglob("epoch=0-*.ckpt")):  # one epoch done: stop in the second
        assert fit.poll() is None and time.monotonic() < deadline, fit.communicate()[1][-3000:]
        time.sleep(0.02)
    time.sleep(0.25)
    fit.send_signal(signal.SIGINT)
    code, stderr = finish(fit)
    assert code == 130, stderr[-3000:]
    assert "SIGINT: stopped at epoch 1, step" in stderr and "--ckpt_path last" in stderr
    saved = torch.load(newest_last(tmp_path), map_location="cpu", weights_only=True)
    assert saved["epoch"] == 1 and 5 < saved["global_step"] < 10  # mid-epoch

    code, stderr = finish(start(tiny(tmp_path, *SLOW_STEPS, "--ckpt_path", "last"), tmp_path))
    assert code == 0, stderr[-3000:]
    resumed, uninterrupted = weights(tmp_path), weights(straight)
    assert resumed.keys() == uninterrupted.keys()
    for name, value in uninterrupted.items():
        assert torch.equal(resumed[name], value), name


def test_sigterm_stops_at_the_step_with_a_checkpoint(tmp_path):
    code, stderr = finish(start(tiny(tmp_path, "--trainer.callbacks+=crashing_callback"
                                     ".SignalAtStep", "--trainer.callbacks.step", "7",
                                     "--trainer.callbacks.signal_name", "SIGTERM"), tmp_path))
    assert code == 130, stderr[-3000:]
    assert "SIGTERM: stopped at epoch 1, step 7" in stderr
    saved = torch.load(newest_last(tmp_path), map_location="cpu", weights_only=True)
    assert (saved["epoch"], saved["global_step"]) == (1, 7)


def test_an_empty_or_cut_last_checkpoint_is_skipped_for_the_newest_intact_one(
        straight, tmp_path, capsys):
    run = tmp_path / "run" / "checkpoints"
    run.mkdir(parents=True)
    source = newest_last(straight)
    older, newer = run / "epoch=0-step=5.ckpt", run / "epoch=1-step=10.ckpt"
    for age, path in ((30, older), (20, newer)):
        path.write_bytes(source.read_bytes())
        os.utime(path, (time.time() - age, time.time() - age))
    last = run / "last.ckpt"
    last.write_bytes(b"")
    assert resolve_checkpoint("last", tmp_path) == str(newer)
    assert f"{last} is empty; resuming from {newer}" in capsys.readouterr().err
    last.write_bytes(source.read_bytes()[:5000])
    assert resolve_checkpoint("last", tmp_path) == str(newer)
    assert "is incomplete" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no intact last.ckpt"):
        resolve_checkpoint("last", tmp_path / "run" / "nothing")


def test_the_cli_resumes_past_an_empty_last_checkpoint(straight, tmp_path):
    copy = tmp_path / "run"
    for path in straight.rglob("*.ckpt"):
        target = copy / path.relative_to(straight)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"" if path.name == "last.ckpt" else path.read_bytes())
    code, stderr = finish(start(tiny(copy, "--ckpt_path", "last", "--trainer.max_epochs", "4"),
                                tmp_path))
    assert code == 0, stderr[-3000:]
    assert "last.ckpt is empty; resuming from" in stderr


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("interrupted while writing")


def test_a_failed_write_leaves_the_previous_checkpoint_whole(tmp_path):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1}, path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="interrupted while writing"):
        io.save_checkpoint({"step": 2, "broken": Unpicklable()}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left


def test_reproduce_resumes_an_interrupted_run(tmp_path, monkeypatch):
    from lit_structattn.reproduce import runner
    from lit_structattn.reproduce.tables import TABLES

    monkeypatch.chdir(tmp_path)
    table = TABLES["tree_transduction"]
    budget = ("--trainer.max_epochs", "2", "--data.init_args.train_per_depth", "30",
              "--data.init_args.eval_per_depth", "4", "--model.init_args.test_beam", "1",
              "--model.init_args.max_decode_len", "60")
    interrupted = replace(table, budgets={"ci": (
        (*budget, "--trainer.callbacks+=tests.crashing_callback.SignalAtStep",
         "--trainer.callbacks.step", "7"), "")})
    row = next(r for r in table.rows if r.name == "simple")
    with pytest.raises(FitInterrupted):
        runner.run_one(interrupted, row, "ci", 0, tmp_path / "runs")
    result = runner.run_one(replace(table, budgets={"ci": (budget, "")}), row, "ci", 0,
                            tmp_path / "runs")
    assert result["resumed_from"].endswith("last.ckpt") and result["epochs"] == 2
    # the step clock kept the steps before the interruption: one timed step per training step
    assert result["metrics"][runner.STEP_TIME] > 0
    (last,) = (tmp_path / "runs").rglob("version_*/checkpoints/last.ckpt")
    checkpoint = torch.load(last, weights_only=False)
    (clock,) = (state for name, state in checkpoint["callbacks"].items() if "FitClock" in name)
    assert clock["steps"] == checkpoint["global_step"] and clock["step_seconds"] > 0
