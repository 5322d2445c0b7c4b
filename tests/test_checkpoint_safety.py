"""Checkpoints are data: no way the project opens a checkpoint runs code hidden in it, a file
that is not a checkpoint is refused in one line, and ``predict`` never damages an existing
output. The probes are a genuine needle checkpoint to which one pickled object was added whose
``__reduce__`` runs a shell command that would create a marker file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from lit_structattn.cli import command as cli
from lit_structattn.run.checkpoints import UnreadableCheckpoint, UnsafeCheckpoint, read_checkpoint
from lit_structattn.run.lightning_cli import build_cli
from lit_structattn.tasks import load_task

ROOT = Path(__file__).resolve().parent.parent
NEEDLE = ROOT / "configs" / "demo" / "needle.yaml"
SMALL = ["--config", str(NEEDLE), "--data.init_args.num_train", "64",
         "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "1",
         "--trainer.enable_model_summary", "false"]


class RunsCode:
    """Unpickling it runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The folder of a one-epoch needle fit (best.ckpt and last.ckpt under version_0)."""
    out = tmp_path_factory.mktemp("needle_run")
    fit = build_cli([*SMALL, "--trainer.default_root_dir", str(out)], run=False)
    fit.trainer.fit(fit.model, datamodule=fit.datamodule)
    return out


def genuine(run: Path) -> Path:
    return next(run.rglob("best.ckpt"))


def with_code(run: Path, path: Path, marker: Path) -> Path:
    """The genuine checkpoint with a code-running object added, saved at ``path``."""
    checkpoint = torch.load(genuine(run), map_location="cpu", weights_only=True)
    checkpoint["extra"] = RunsCode(marker)
    torch.save(checkpoint, path)
    return path


def one_line_error(args: list[str], capsys) -> str:
    """The error of ``structattn ARGS``: exit status 2, one line (and the --debug hint)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(args)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[1] == "(run with --debug for the traceback)", err[-3000:]
    return lines[0]


def test_load_task_refuses_a_checkpoint_that_would_run_code(run, tmp_path):
    marker = tmp_path / "marker"
    shared = with_code(run, tmp_path / "shared.ckpt", marker)
    with pytest.raises(UnsafeCheckpoint, match=r"shared\.ckpt: refused: .*posix\.system"):
        load_task(shared)
    assert not marker.exists()
    task = load_task(genuine(run))  # the genuine checkpoint loads and predicts
    assert task.predict_text(["5 1 7 3"])[0]["prediction"] in range(5)


def test_predict_refuses_it_in_one_line(run, tmp_path, capsys):
    marker, raw = tmp_path / "marker", tmp_path / "input.txt"
    raw.write_text("5 1 7 3\n")
    shared = with_code(run, tmp_path / "shared.ckpt", marker)
    line = one_line_error(["predict", "--ckpt_path", str(shared), "--input", str(raw),
                           "--output", str(tmp_path / "out.jsonl")], capsys)
    assert f"{shared}: refused" in line and "--trust_checkpoint" in line
    assert not marker.exists() and not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("command", ["fit", "test"])
def test_lightnings_loader_is_never_given_it(run, tmp_path, capsys, command):
    marker = tmp_path / "marker"
    shared = with_code(run, tmp_path / "shared.ckpt", marker)
    line = one_line_error([command, *SMALL, "--trainer.default_root_dir", str(tmp_path / "r"),
                           "--ckpt_path", str(shared)], capsys)
    assert f"{shared}: refused" in line
    assert not marker.exists()


def test_a_last_checkpoint_planted_in_a_run_folder_is_refused(run, tmp_path, capsys):
    """``--ckpt_path best`` reads the newest last.ckpt to find the best checkpoint."""
    marker, planted = tmp_path / "marker", tmp_path / "run"
    shutil.copytree(run, planted)
    last = next(planted.rglob("last.ckpt"))
    with_code(run, last, marker)
    line = one_line_error(["test", *SMALL, "--trainer.default_root_dir", str(planted),
                           "--ckpt_path", "best"], capsys)
    assert f"{last}: refused" in line
    assert not marker.exists()


def test_a_legacy_checkpoint_loads_only_when_trusted(run, tmp_path):
    """A task built in Python kept its model object in its hyper-parameters: refused by
    default, loaded with the documented opt-in."""
    checkpoint = torch.load(genuine(run), map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"]["model"] = load_task(genuine(run)).model
    legacy = tmp_path / "legacy.ckpt"
    torch.save(checkpoint, legacy)
    with pytest.raises(UnsafeCheckpoint, match="AttentionPoolingClassifier"):
        load_task(legacy)
    assert load_task(legacy, trusted=True).predict_text(["5 1"])[0]["prediction"] in range(5)


@pytest.mark.parametrize("damage", ["truncated", "text"])
def test_a_file_that_is_not_a_checkpoint_is_refused_in_one_line(run, tmp_path, capsys, damage):
    bad, raw = tmp_path / "bad.ckpt", tmp_path / "input.txt"
    raw.write_text("5 1 7 3\n")
    data = genuine(run).read_bytes()
    bad.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not a checkpoint\n")
    with pytest.raises(UnreadableCheckpoint):
        read_checkpoint(bad)
    line = one_line_error(["predict", "--ckpt_path", str(bad), "--input", str(raw),
                           "--output", "-"], capsys)
    assert f"{bad}: not a checkpoint" in line


def test_predict_leaves_an_existing_output_alone_until_it_succeeds(run, tmp_path, capsys):
    raw, output = tmp_path / "input.txt", tmp_path / "out.jsonl"
    output.write_text("earlier predictions\n")
    raw.write_text("5 1 7 3\n5 x 2\n")  # line 2 is not a sequence of symbol ids
    line = one_line_error(["predict", "--ckpt_path", str(genuine(run)), "--input", str(raw),
                           "--output", str(output)], capsys)
    assert line.startswith(f"structattn: error: {raw}:2: ")
    assert output.read_text() == "earlier predictions\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    raw.write_text("5 1 7 3\n2 4\n")
    cli.main(["predict", "--ckpt_path", str(genuine(run)), "--input", str(raw),
              "--output", str(output)])
    assert output.read_text().count('"prediction"') == 2


def test_binary_predict_input_names_the_file_and_line(run, tmp_path, capsys):
    raw = tmp_path / "input.bin"
    raw.write_bytes(b"5 1 7 3\n\xff\xfe 2\n")
    line = one_line_error(["predict", "--ckpt_path", str(genuine(run)), "--input", str(raw),
                           "--output", "-"], capsys)
    assert f"{raw}:2: not valid utf-8" in line
