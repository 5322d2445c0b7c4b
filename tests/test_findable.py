"""Everything findable from the command (issue 47, items 2 and 3): the first commands answer
without importing torch, a misspelt option, transform or experiment gets a "did you mean", a
missing dataset says how to give it, and ``fit --help`` says how to list the data options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lit_structattn.attention.transforms import get_transform
from lit_structattn.cli import command as cli
from lit_structattn.cli import experiments
from lit_structattn.datamodules.babi import BabiDataModule
from lit_structattn.datamodules.translation import TranslationDataModule
from lit_structattn.datamodules.ud_pos import UDPOSDataModule

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "demo" / "needle.yaml"

FAST_COMMANDS = """
import contextlib, io, json, sys
from lit_structattn.cli import main
for args in (["--version"], ["--help"], ["experiments"], ["predict", "--help"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(args)
print(json.dumps([name for name in ("torch", "lightning") if name in sys.modules]))
"""


def test_the_first_commands_import_no_torch(tmp_path):
    ran = subprocess.run([sys.executable, "-c", FAST_COMMANDS], cwd=tmp_path, text=True,
                         capture_output=True, timeout=120, env={"PYTHONPATH": str(ROOT)})
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == []


def refused(capsys, *args: str) -> str:
    """The one-line error of ``structattn ARGS`` (exit status 2)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(list(args))
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_a_misspelt_option_gets_did_you_mean(capsys):
    error = refused(capsys, "fit", "--config", str(CONFIG), "--trainer.max_epoch", "1")
    assert "unrecognized arguments: --trainer.max_epoch 1" in error
    assert "did you mean --trainer.max_epochs?" in error
    error = refused(capsys, "fit", "--config", str(CONFIG), "--data.init_args.num_trian", "9")
    assert "Option 'num_trian' is not accepted" in error and "did you mean 'num_train'?" in error
    assert "batch_size" in error  # options a DataModule passes on by **kwargs are valid too


def test_an_unknown_transform_gets_did_you_mean(capsys):
    with pytest.raises(ValueError, match=r"unknown attention transform 'sparsmax'; valid: .*; "
                       r"did you mean 'sparsemax'\?$"):
        get_transform("sparsmax")
    with pytest.raises(ValueError) as far:
        get_transform("hardmax")
    assert "did you mean" not in str(far.value)  # nothing close: no guess
    error = refused(capsys, "fit", "--config", str(CONFIG),
                    "--model.init_args.model.init_args.transform", "sparsmax")
    assert "unknown value 'sparsmax'; valid: " in error and "did you mean 'sparsemax'?" in error


def test_an_unknown_experiment_gets_did_you_mean():
    with pytest.raises(ValueError, match=r"did you mean 'tree_transduction/simple'\?"):
        experiments.find("tree_transdution/simple")  # the table misspelt
    with pytest.raises(ValueError, match=r"did you mean 'nli/structured_snli'\?"):
        experiments.find("nli/structured_snl")
    with pytest.raises(ValueError) as far:
        experiments.find("tree_transduction/deep")
    assert "did you mean" not in str(far.value)


@pytest.mark.parametrize(("build", "source"), [
    (lambda folder: UDPOSDataModule(data_dir=str(folder)), "universaldependencies.org"),
    (lambda folder: BabiDataModule(data_dir=str(folder)), "research.facebook.com"),
    (lambda folder: TranslationDataModule(data_dir=str(folder)), "github.com/multi30k"),
], ids=["ud_pos", "babi", "translation"])
def test_missing_data_says_how_to_give_it(tmp_path, monkeypatch, build, source):
    monkeypatch.setenv("STRUCTATTN_DATA", str(tmp_path / "datasets"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError) as missing:
        build(tmp_path / "empty").setup("fit")
    message = str(missing.value)
    assert source in message
    assert "--data.init_args.data_dir" in message
    assert f"STRUCTATTN_DATA to the folder holding the datasets' folders (now {tmp_path}" in message


def test_fit_help_says_how_to_list_the_data_options(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["fit", "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "structattn fit --data.help CLASS" in shown
    assert "structattn fit --config CFG --print_config" in shown
    with pytest.raises(SystemExit):
        cli.main(["fit", "--config", str(CONFIG), "--help"])
    shown = capsys.readouterr().out
    assert ("data options of this config (lit_structattn.datamodules.synthetic.NeedleDataModule)"
            in shown)
    assert "num_train" in shown.split("data options of this config")[1]
    with pytest.raises(SystemExit) as exited:  # jsonargparse's help of a DataModule
        cli.main(["fit", "--data.help", "lit_structattn.datamodules.synthetic.NeedleDataModule"])
    assert exited.value.code == 0 and "--data.num_train" in capsys.readouterr().out


def test_predict_help_points_to_the_formats(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["predict", "--help"])
    assert exited.value.code == 0 and "structattn predict --formats" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        cli.main(["predict", "--formats"])
    assert exited.value.code == 0 and "translation: " in capsys.readouterr().out
