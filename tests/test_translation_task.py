"""The translation application end to end (configs/translation through LightningCLI, in process)
on a generated corpus: fit + test with every metric, constrained attention with GUIDED and
PREDICTED fertilities (the task trains the predictor), COVPENALTY tuning, the runner's test-only
rows, figures, a falling loss and clear errors for mismatched settings."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch

from lit_structattn.figures.plots import AttentionMap, plot_figure
from lit_structattn.models.seq2seq import Seq2Seq
from lit_structattn.reproduce import runner
from lit_structattn.reproduce.ledger import cached_result, ledger_file
from lit_structattn.reproduce.report import render
from lit_structattn.reproduce.tables import TABLES
from lit_structattn.run.lightning_cli import build_cli
from lit_structattn.tasks.schedules import DecayFrom
from lit_structattn.tasks.translation import TranslationTask, repeated_positions

from .logged_metrics import logged
from .translation_corpus import write_corpus

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "translation"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("translation")
    write_corpus(folder / "corpus")
    return folder


def tiny(corpus: Path, out: Path, row: str, *extra: str) -> list[str]:
    """Arguments of a tiny run of a translation row on the generated corpus."""
    return [
        "--config", str(CONFIGS / "base.yaml"), "--config", str(CONFIGS / "rows" / f"{row}.yaml"),
        "--trainer.default_root_dir", str(out), "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
        "--data.init_args.data_dir", str(corpus / "corpus"),
        "--data.init_args.cache_dir", str(corpus / "cache"),
        "--data.init_args.prefixes", "[train, val, test]",
        "--data.init_args.bpe_size", "60", "--data.init_args.batch_size", "32",
        "--model.init_args.predictor_epochs", "1",
        "--model.init_args.model.init_args.embed_dim", "16",
        "--model.init_args.model.init_args.hidden_dim", "16",
        "--model.init_args.model.init_args.encoder.hidden_dim", "8",
        "--model.init_args.test_beam", "3", "--model.init_args.max_decode_len", "30",
        *extra,
    ]


def cli_for(args: list[str]):
    return build_cli(args, run=False)


@pytest.mark.parametrize("row", ["softmax", "csparsemax_guided", "csparsemax_predicted"])
def test_fit_and_test_report_every_metric(corpus, tmp_path, row):
    cli = cli_for(tiny(corpus, tmp_path, row, "--trainer.max_epochs", "2"))
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert {"val/bleu", "val/chrf", "val/ppl", "val/loss", "val/score"} <= set(
        cli.trainer.callback_metrics)
    (metrics,) = cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path="best",
                                  verbose=False)
    assert set(metrics) == {"test/bleu", "test/chrf", "test/rep", "test/drop", "test/ppl",
                            "test/sparsity", "test/score"}
    assert metrics["test/score"] == metrics["test/bleu"]
    assert 0 <= metrics["test/bleu"] <= 100 and 0 <= metrics["test/drop"] <= 100
    assert 1 < metrics["test/ppl"] < 60  # better than uniform over the vocabulary
    assert cli.model.report_notes["BLEU"].startswith("nrefs:1|case:mixed")
    (translations,) = tmp_path.rglob("test_translations.txt")
    assert len(translations.read_text().splitlines()) == 40
    events = list(tmp_path.rglob("events.out.tfevents.*"))
    assert any(b"attention/example_0" in path.read_bytes() for path in events)


@pytest.mark.parametrize(("row", "extra"), [
    ("hard", ()),
    ("beam_joint", ("--model.init_args.model.init_args.joint_k", "3",
                    "--model.init_args.test_joint_k", "1")),
    ("segmentation", ("--config", str(CONFIGS / "characters.yaml"),
                      "--data.init_args.word_vocab_size", "12")),
])
def test_joint_outputs_and_character_sources_fit_and_test(corpus, tmp_path, row, extra):
    """Issue 7's rows through the CLI: hard attention (REINFORCE), beam-joint decoded with
    another K, segmentation attention from character sources to target words."""
    cli = cli_for(tiny(corpus, tmp_path, row, "--trainer.max_epochs", "1",
                       "--model.init_args.drop_score", "false", *extra))
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    (metrics,) = cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path="best",
                                  verbose=False)
    assert set(metrics) == {"test/bleu", "test/chrf", "test/rep", "test/ppl", "test/sparsity",
                            "test/score"}
    assert 1 < metrics["test/ppl"] < 60
    if row == "segmentation":
        batch = next(iter(cli.datamodule.test_dataloader()))
        pieces = cli.datamodule.subwords.pieces(batch["src"][0, : batch["src_lengths"][0]])
        assert all(len(piece) == 1 for piece in pieces)
        assert cli.model.model.output_layer.generator.out_features == 12
        assert cli.model.model.encoder.embed.weight is not cli.model.model.tgt_embed.weight
        (translations,) = tmp_path.rglob("test_translations.txt")
        assert "▁" not in translations.read_text()  # detokenized words
    if row == "beam_joint":
        assert cli.model.model.joint_k == 3


def test_covpenalty_grid_is_tuned_on_validation(corpus, tmp_path):
    cli = cli_for(tiny(corpus, tmp_path, "softmax", "--trainer.max_epochs", "1"))
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    best = cli.trainer.checkpoint_callback.best_model_path
    tuned = cli_for(tiny(corpus, tmp_path / "tuned", "softmax_covpenalty",
                         "--model.init_args.drop_score", "false"))
    tuned.trainer.test(tuned.model, datamodule=tuned.datamodule, ckpt_path=best, verbose=False)
    note = tuned.model.report_notes["COVPENALTY"]
    assert note.count("): ") == 9 and "chosen (" in note
    assert tuned.model.penalty["length_penalty"] == "wu"


def test_runner_tests_the_checkpoint_of_another_row(corpus, tmp_path):
    """A ``test_of`` row trains nothing: it tests the best checkpoint of its row."""
    table = TABLES["sparse_constrained_nmt"]
    overrides = tuple(tiny(corpus, tmp_path, "softmax")[4:])  # all but the configs
    overrides = tuple(a for a in overrides if a not in ("--trainer.default_root_dir",
                                                       str(tmp_path)))
    rows = tuple(replace(r, overrides=overrides) for r in table.rows[:2])
    table = replace(table, rows=rows)
    covpenalty = runner.run_one(table, rows[1], "ci", 0, tmp_path)
    softmax = cached_result(table, rows[0], "ci", 0, tmp_path)
    assert softmax is not None and "tested_checkpoint" not in softmax
    assert "/softmax/seed0/" in covpenalty["tested_checkpoint"]
    assert "chosen" in covpenalty["notes"]["COVPENALTY"]
    report = render(table, "ci", range(1), {r.name: [cached_result(
        table, r, "ci", 0, tmp_path)] for r in rows})
    assert "- BLEU: `nrefs:1|case:mixed" in report
    assert "- softmax + COVPENALTY, seed 0: COVPENALTY: alpha, beta tuned" in report
    assert json.loads(next((tmp_path / table.name).rglob("result.json")).read_text())["seed"] == 0


def test_a_row_whose_checkpoint_is_gone_is_retrained_for_its_test_of_row(corpus, tmp_path):
    """The ledger holds a row's result but not its checkpoint: a ``test_of`` row trains it again
    under its root, leaves the ledger's result as it was and names the retraining in a note."""
    table = TABLES["sparse_constrained_nmt"]
    overrides = tuple(a for a in tiny(corpus, tmp_path, "softmax")[4:]
                      if a not in ("--trainer.default_root_dir", str(tmp_path)))
    table = replace(table, rows=tuple(replace(r, overrides=overrides) for r in table.rows[:2]))
    trained, tester = table.rows
    ledger, first, second = tmp_path / "ledger", tmp_path / "first", tmp_path / "second"
    filed = runner.run_one(table, tester, "ci", 0, first, ledger)
    assert "tested model" not in filed["notes"]  # it tested the run the ledger holds
    entry = ledger_file(table, trained, "ci", 0, ledger)
    kept = entry.read_text()
    ledger_file(table, tester, "ci", 0, ledger).unlink()
    retested = runner.run_one(table, tester, "ci", 0, second, ledger)  # `first` is lost
    assert entry.read_text() == kept
    assert "/second/" in retested["tested_checkpoint"]
    note = retested["notes"]["tested model"]
    assert note.startswith(f"{trained.name} retrained for this row, seed 0") and "BLEU" in note


def test_loss_falls_on_a_tiny_batch(corpus, tmp_path):
    cli = cli_for(tiny(corpus, tmp_path, "csparsemax_predicted",
                       "--model.init_args.model.init_args.dropout", "0.0"))
    cli.datamodule.setup("fit")
    cli.model.give_fertilities(cli.datamodule)  # PREDICTED: the task's predictor gives them
    batch = next(iter(cli.datamodule.train_dataloader()))
    assert "fertility" in batch
    model = cli.model
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(60):
        loss = model.training_step(batch, 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_sizes_and_sink_come_from_the_data(corpus, tmp_path):
    """The model's vocabulary sizes, joint vocabulary and <SINK> are the data's (linked by
    the CLI, saved in the model's configuration); a corpus too small for ``bpe_size`` is
    refused with the size to set."""
    cli = cli_for(tiny(corpus, tmp_path, "csparsemax_constant_f2"))
    model, config = cli.model.model, cli.model.hparams["model"]["init_args"]
    assert model.sink and config["sink"] is True
    assert (config["src_vocab"], config["tgt_vocab"], config["joint_vocab"]) == (60, 60, True)
    assert model.encoder.embed.weight is model.tgt_embed.weight  # one joint vocabulary
    words = cli_for(tiny(corpus, tmp_path, "softmax", "--data.init_args.target_units", "words",
                         "--data.init_args.word_vocab_size", "12"))
    assert words.model.hparams["model"]["init_args"]["tgt_vocab"] == 12
    with pytest.raises(ValueError, match="needs sink=True"):
        cli_for(tiny(corpus, tmp_path, "csparsemax_constant_f2", "--data.init_args.sink",
                     "false"))
    cli = cli_for(tiny(corpus, tmp_path, "softmax", "--data.init_args.bpe_size", "400",
                       "--trainer.max_epochs", "1"))
    with pytest.raises(ValueError, match=r"set --data.init_args.bpe_size \d+"):
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)


def test_repeated_output_words_are_highlighted():
    assert repeated_positions(["a", "b", "a", "c", "b", "a"]) == [2, 4, 5]
    amap = AttentionMap("t", torch.rand(4, 3), ["x", "y", "x", "</s>"], ["p", "q", "r"],
                        highlight_rows=[2])
    labels = plot_figure(amap).axes[0].get_yticklabels()
    assert [label.get_color() for label in labels] == ["black", "black", "tab:red", "black"]


def test_unknown_attention_lists_the_valid_ones(corpus, tmp_path):
    with pytest.raises(Exception, match="tsallismax") as error:
        cli_for(tiny(corpus, tmp_path, "softmax", "--model.init_args.model.init_args.attention",
                     "tsallismax"))
    assert "csparsemax" in str(error.value)


@pytest.mark.slow
def test_ddp_validation_scores_the_whole_split_once(corpus, tmp_path):
    """Under DDP (2 CPU processes) each process decodes half of the validation sentences (the
    sampler pads the shorter half with a repeat); the gathered scores must be exactly those of
    one process decoding them all with the same weights (chrF: the BLEU of a barely trained
    model is 0 on any subset)."""
    import subprocess
    import sys

    odd = tmp_path / "odd"  # 41 validation sentences: the halves differ, one is padded
    odd.mkdir()
    write_corpus(odd / "corpus", pairs_per_split=(300, 41, 40))
    args = tiny(odd, tmp_path, "softmax", "--trainer.max_epochs", "1",
                "--trainer.limit_train_batches", "4", "--trainer.devices", "2",
                "--trainer.strategy", "ddp", "--trainer.callbacks", "[]",
                "--trainer.enable_checkpointing", "true",
                "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
                "--trainer.logger.save_dir", str(tmp_path))
    run = subprocess.run([sys.executable, "-m", "lit_structattn.cli", "fit", *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    ddp_chrf = logged(tmp_path, "val/chrf")[0]
    (checkpoint,) = tmp_path.rglob("*.ckpt")
    single = cli_for(tiny(odd, tmp_path / "single", "softmax", "--trainer.logger", "false",
                          "--trainer.callbacks", "[]"))
    (validated,) = single.trainer.validate(single.model, datamodule=single.datamodule,
                                           ckpt_path=str(checkpoint), verbose=False)
    assert validated["val/chrf"] == pytest.approx(ddp_chrf, abs=1e-4) and ddp_chrf > 1


def test_learning_rate_decays_from_the_chosen_epoch():
    task = TranslationTask(Seq2Seq(20, 20, embed_dim=4, hidden_dim=4),
                           optimizer=partial(torch.optim.Adam, lr=0.01),
                           lr_scheduler=partial(DecayFrom, start=2, factor=0.5))
    config = task.configure_optimizers()
    optimizer, schedule = config["optimizer"], config["lr_scheduler"]
    rates = []
    for _ in range(4):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates == pytest.approx([0.01, 0.01, 0.005, 0.0025])
    constant = TranslationTask(Seq2Seq(20, 20, embed_dim=4, hidden_dim=4))
    assert isinstance(constant.configure_optimizers(), torch.optim.Adam)
