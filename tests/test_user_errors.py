"""Every user error of issue 44 (item 5) ends ``structattn`` with one short line and exit status
2, naming the file and line, or the key, where there is one: a trainer option Lightning refuses,
an unreadable data file, a run folder this user may not write, a config file that is not YAML,
a value of the wrong type, a line of only whitespace inside a CoNLL sentence; and a fit whose
training loss becomes NaN stops there, naming the step, while one that grows 100 times warns.

The command runs in this process (:func:`lit_structattn.cli.main`) on tiny generated data.
"""

from __future__ import annotations

import gzip
import math
import os
import pathlib
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from lit_structattn.cli import command as cli
from lit_structattn.datamodules.conll_ner import read_conll_ner
from lit_structattn.datamodules.files import MalformedLine, UnreadableFile, open_text
from lit_structattn.datamodules.ud_pos import read_conllu
from lit_structattn.run.training_guards import FiniteLoss, NonFiniteLoss
from lit_structattn.tasks import SequenceClassifier

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
NEEDLE = CONFIGS / "demo" / "needle.yaml"
NER_LINES = "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\nPeter NNP I-NP I-PER\n"
CONLLU_WORD = "{}\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_\n"


def structattn_error(args: list[str], capsys) -> str:
    """Run ``structattn ARGS`` in this process; it must exit with status 2 and at most 3 lines
    on stderr (the message and the ``--debug`` hint), without a traceback: returns stderr."""
    with pytest.raises(SystemExit) as exited:
        cli.main(args)
    stderr = capsys.readouterr().err
    assert exited.value.code == 2, stderr
    assert stderr.startswith("structattn: error: "), stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) <= 3, stderr
    return stderr


def needle(tmp_path: Path, *args: str) -> list[str]:
    """``fit`` of the needle demo, small, writing only under ``tmp_path / "run"``."""
    return ["fit", "--config", str(NEEDLE), "--trainer.default_root_dir", str(tmp_path / "run"),
            "--trainer.callbacks.init_args.dirpath", str(tmp_path / "run" / "checkpoints"),
            "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
            "--data.init_args.num_train", "128", "--trainer.max_epochs", "1", *args]


def ner_validate(tmp_path: Path, train: str = NER_LINES) -> list[str]:
    """``validate`` of the easy-first NER config on a tiny folder whose training file is
    ``train`` (the DataModule reads its files when the CLI links its sizes to the model)."""
    folder = tmp_path / "ner"
    folder.mkdir()
    for name, text in (("eng.train", train), ("eng.testa", NER_LINES), ("eng.testb", NER_LINES)):
        (folder / name).write_text(text, encoding="utf-8")
    easy_first = CONFIGS / "easy_first"
    return ["validate", "--config", str(easy_first / "common.yaml"),
            "--config", str(easy_first / "ner_en.yaml"), "--data.init_args.data_dir", str(folder),
            "--data.init_args.min_count", "1", "--trainer.default_root_dir",
            str(tmp_path / "run"), "--trainer.logger", "false"]


# ----------------------------------------------------------------------------- a. Lightning


def test_a_trainer_option_lightning_refuses_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stderr = structattn_error(needle(tmp_path, "--trainer.max_epochs", "-5"), capsys)
    assert "`max_epochs` must be a non-negative integer or -1. You passed in -5" in stderr


# ----------------------------------------------------------------------------- b. permissions


def test_b_unreadable_data_file_is_named_with_what_to_do(tmp_path, monkeypatch, capsys):
    args = ner_validate(tmp_path)
    opened = pathlib.Path.open

    def refuse_the_data(path, *rest, **kwargs):
        if path.parent.name == "ner":
            raise PermissionError(13, "Permission denied", str(path))
        return opened(path, *rest, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", refuse_the_data)
    monkeypatch.chdir(tmp_path)
    stderr = structattn_error(args, capsys)
    assert f"{tmp_path / 'ner'}{os.sep}eng." in stderr
    assert "permission denied: this user may not read the file" in stderr
    assert "chmod" in stderr and "data_dir" in stderr
    with pytest.raises(UnreadableFile, match=r"eng\.train: permission denied"):
        open_text(tmp_path / "ner" / "eng.train")


def test_b_run_folder_that_cannot_be_written_is_named_with_what_to_do(tmp_path, monkeypatch,
                                                                       capsys):
    run = tmp_path / "run"
    make_folder = os.mkdir

    def read_only_run_folder(path, *rest, **kwargs):
        if Path(path) == run or run in Path(path).parents:
            raise PermissionError(13, "Permission denied", str(path))
        return make_folder(path, *rest, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only_run_folder)
    monkeypatch.chdir(tmp_path)
    stderr = structattn_error(needle(tmp_path), capsys)
    assert f"permission denied: {run}" in stderr
    assert "chmod" in stderr and "--trainer.default_root_dir" in stderr


# ----------------------------------------------------------------------------- c. YAML syntax


def test_c_yaml_syntax_error_names_the_config_file_and_line(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_epochs: 1\n  devices: 1: 2\n")
    monkeypatch.chdir(tmp_path)
    stderr = structattn_error(needle(tmp_path, "--config", str(bad)), capsys)
    assert f"{bad}:3:" in stderr and "not valid YAML" in stderr
    assert "<unicode string>" not in stderr


def test_c_yaml_problem_names_where_an_unclosed_construct_starts(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  devices: [1,\nmodel: x\n")
    with pytest.raises(ValueError, match=rf"{bad.name}:4:1: not valid YAML: .*\(while parsing "
                                         r"a flow sequence at line 2, column 12\)"):
        cli.check_config_files(["fit", "--config", str(bad)])
    cli.check_config_files(["fit", "--config", str(NEEDLE), "--config", "trainer: {a: [}"])


# ----------------------------------------------------------------------------- d. value types


@pytest.mark.parametrize("where", ["config", "command line"])
def test_d_a_value_of_the_wrong_type_names_key_value_and_type(tmp_path, monkeypatch, capsys,
                                                              where):
    config = tmp_path / "lr.yaml"
    config.write_text("model:\n  init_args:\n    optimizer:\n      init_args:\n        lr: fast\n")
    given = (["--config", str(config)] if where == "config" else
             ["--model.init_args.optimizer.init_args.lr", "fast"])
    monkeypatch.chdir(tmp_path)
    stderr = structattn_error(needle(tmp_path, *given), capsys)
    assert ("the value of model.init_args.optimizer.init_args.lr must be a float, not 'fast'"
            in stderr)
    assert "Expected a path" not in stderr


def test_d_plain_keys_say_every_type_they_take(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stderr = structattn_error(needle(tmp_path, "--trainer.gradient_clip_val", "big"), capsys)
    assert "trainer.gradient_clip_val must be a float, an int or null, not 'big'" in stderr


# ----------------------------------------------------------------------------- e. CoNLL lines


@pytest.mark.parametrize("blank", [" ", "\t", " \t "])
def test_e_whitespace_line_inside_a_sentence_is_refused_with_file_and_line(tmp_path, blank):
    ner = tmp_path / "eng.train"
    ner.write_text(f"EU NNP I-NP I-ORG\nrejects VBZ I-VP O\n{blank}\ncall NN I-NP O\n")
    with pytest.raises(MalformedLine, match=r"eng\.train:3: a line of only whitespace inside "
                                            "a sentence; sentences are separated by empty lines"):
        read_conll_ner(ner)
    conllu = tmp_path / "ud.conllu.gz"
    with gzip.open(conllu, "wt", encoding="utf-8") as f:
        f.write(f"# sent_id = 1\n{CONLLU_WORD.format(1)}{blank}\n{CONLLU_WORD.format(2)}\n")
    with pytest.raises(MalformedLine, match=r"ud\.conllu\.gz:3: a line of only whitespace"):
        read_conllu(conllu)


def test_e_whitespace_line_between_sentences_separates_them(tmp_path):
    ner = tmp_path / "eng.train"
    ner.write_text(f"{NER_LINES}\n \t\n{NER_LINES}")
    assert [len(s.words) for s in read_conll_ner(ner)] == [2, 1, 2, 1]


def test_e_whitespace_line_through_the_command(tmp_path, monkeypatch, capsys):
    args = ner_validate(tmp_path, train=NER_LINES.replace("\n\n", "\n  \n"))
    monkeypatch.chdir(tmp_path)
    stderr = structattn_error(args, capsys)
    assert f"{tmp_path / 'ner' / 'eng.train'}:3: a line of only whitespace" in stderr


# ----------------------------------------------------------------------------- f. the loss


class Losses(L.LightningModule):
    """A module whose training loss at batch ``i`` of the first epoch is ``losses[i]``."""

    def __init__(self, losses: list[float]) -> None:
        super().__init__()
        self.losses = losses
        self.weight = torch.nn.Parameter(torch.ones(1))

    def training_step(self, batch, batch_idx):
        return self.weight.sum() * 0 + self.losses[batch_idx]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self):
        return DataLoader(range(len(self.losses)), batch_size=1)


def fit_losses(losses: list[float], guard: FiniteLoss) -> None:
    trainer = L.Trainer(max_epochs=1, callbacks=[guard], logger=False, accelerator="cpu",
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Losses(losses))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("every_n_batches", [None, 5])  # after each batch (CPU), or deferred
def test_f_non_finite_loss_stops_the_fit_naming_the_step(bad, every_n_batches):
    losses = [1.0, 1.0, 1.0, bad, 1.0, 1.0, 1.0]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*grew from")  # a bad loss has not grown
        with pytest.raises(NonFiniteLoss, match=rf"became {bad} at step 4 \(epoch 0, batch 3\)"):
            fit_losses(losses, FiniteLoss(every_n_batches))


def test_f_non_finite_loss_through_the_command(tmp_path, monkeypatch, capsys):
    train = SequenceClassifier.training_step

    def nan_from_batch_2(self, batch, batch_idx):
        loss = train(self, batch, batch_idx)
        return loss * math.nan if batch_idx >= 2 else loss

    monkeypatch.setattr(SequenceClassifier, "training_step", nan_from_batch_2)
    monkeypatch.chdir(tmp_path)
    stderr = structattn_error(needle(tmp_path), capsys)
    assert "the training loss became nan at step 3 (epoch 0, batch 2)" in stderr


def test_f_growing_loss_warns_once():
    with pytest.warns(UserWarning, match=r"grew from 1 \(its first value\) to 150 at step 3 "
                                         r"\(epoch 0, batch 2\), over 100 times") as caught:
        fit_losses([1.0, 50.0, 150.0, 300.0, 2000.0], FiniteLoss())
    assert sum("grew from" in str(w.message) for w in caught) == 1
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*grew from")
        fit_losses([1.0, 50.0, 99.0, 0.5], FiniteLoss())
