"""NLI end to end through the project's LightningCLI at tiny size (in process, as the runner
runs it): fit the structured row on a generated SNLI folder with the parse and soft-parent figures
in TensorBoard, then test the best checkpoint; the runner's ``nli`` table; and the supervised
parser, trained only by the task's preparation step (``prepare_data``) and read from the cache
when the model is built."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lit_structattn.models.decomposable import DecomposableAttention
from lit_structattn.models.parser import DependencyParser, ParserOptions
from lit_structattn.prepare import parser as parser_training
from lit_structattn.prepare.parser import parser_path, parser_settings
from lit_structattn.reproduce.tables import TABLES
from lit_structattn.run.lightning_cli import build_cli
from lit_structattn.tasks import NLITask
from tests.test_cache_keys import cache_parser, write_treebank
from tests.test_nli_data import snli_folder

ROOT = Path(__file__).resolve().parent.parent
NLI = ROOT / "configs" / "nli"


def tiny(tmp_path: Path, row: str, *extra: str) -> list[str]:
    """Arguments of a tiny run of an SNLI row on a generated SNLI folder in ``tmp_path``,
    logging to ``tmp_path / "run"``."""
    (tmp_path / "snli").mkdir()
    return [
        "--config", str(NLI / "base.yaml"), "--config", str(NLI / "snli.yaml"),
        "--config", str(NLI / "rows" / f"{row}.yaml"),
        "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.max_epochs", "1",
        "--trainer.enable_progress_bar", "false",
        "--data.init_args.data_dir", str(snli_folder(tmp_path / "snli")),
        "--model.init_args.model.init_args.embed_dim", "8",
        "--model.init_args.model.init_args.hidden_dim", "8",
        "--model.init_args.model.init_args.parser.embed_dim", "6",
        "--model.init_args.model.init_args.parser.hidden_dim", "4", *extra,
    ]


def test_fit_then_test_structured(tmp_path):
    args = tiny(tmp_path, "structured", "--data.init_args.batch_size", "8")
    cli = build_cli(args, run=False)  # what `structattn fit` / `test --ckpt_path best` run
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    images = events.Tags()["images"]
    assert {"attention/example_0", "self_attention/example_0", "parse/example_0"} <= set(images)
    assert "val/accuracy" in events.Tags()["scalars"]
    tested = cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path="best",
                              verbose=False)
    assert 0 <= tested[0]["test/accuracy"] <= 1
    config = cli.model.hparams["model"]["init_args"]  # the data's sizes, saved
    assert (config["vocab_size"], config["num_classes"]) == (len(cli.datamodule.vocab), 3)
    loaded = NLITask.load_from_checkpoint(cli.trainer.checkpoint_callback.best_model_path,
                                          map_location="cpu")  # no data needed
    batch = next(iter(cli.datamodule.test_dataloader()))
    cli.model.eval()
    assert torch.equal(loaded.eval()(batch).logits.argmax(-1), cli.model(batch).logits.argmax(-1))


def test_nli_table_rows_and_configs():
    table = TABLES["nli"]
    assert len(table.rows) == 10 and {"ci", "cpu"} <= set(table.budgets)
    for row in table.rows:
        assert all(config.is_file() for config in row.configs)
    snli = {row.name: row.paper.get("test/accuracy") for row in table.rows}
    assert snli["structured (SNLI)"] == 86.8 and snli["structured (SICK)"] is None


TOKENS = ["<pad>", "<unk>", "w0", "w1", "sees", "."]


def parser_record() -> tuple[DependencyParser, dict]:
    """A small parser (6-d embeddings, 4 per direction) and its cache record (without its
    key, the settings: :func:`tests.test_cache_keys.cache_parser` adds them)."""
    torch.manual_seed(0)
    parser = DependencyParser(len(TOKENS), ParserOptions(6, 4), bounded=False)
    return parser, {"state_dict": parser.state_dict(), "vocab": TOKENS,
                    "uas": {"dev": 0.5, "test": 0.25}}


def test_supervised_rows_reuse_the_cached_parser(tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STRUCTATTN_DATA", str(write_treebank(tmp_path / "data")))
    tokens = TOKENS
    parser, record = parser_record()
    cache_parser(record, parser_settings(1, 6, 4))  # found in the cache: no training on EWT
    args = tiny(tmp_path, "pretrained_structured", "--trainer.logger", "false",
                "--trainer.callbacks", "null", "--trainer.enable_checkpointing", "false")
    cli = build_cli(args, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    model = cli.model.model
    expected = [tokens.index(t) if t in tokens else 1 for t in cli.datamodule.vocab.tokens]
    assert model.parser_ids.tolist() == expected  # NLI word id -> the parser's word id
    assert cli.model.report_notes["supervised parser"].endswith("UAS dev 50.0 / test 25.0")
    trained = model.parser.embedding.weight
    assert not torch.equal(trained, parser.embedding.weight)  # trained on with the NLI model
    checkpoint = tmp_path / "supervised.ckpt"
    cli.trainer.save_checkpoint(checkpoint)
    monkeypatch.setenv("STRUCTATTN_CACHE", str(tmp_path / "empty"))  # no cache, no data:
    loaded = NLITask.load_from_checkpoint(checkpoint, map_location="cpu")
    assert torch.equal(loaded.model.parser_ids, model.parser_ids)
    assert torch.equal(loaded.model.parser.embedding.weight, trained)


def test_the_parser_is_trained_in_prepare_data_before_the_model_is_built(tmp_path, monkeypatch):
    """An empty cache: ``fit`` trains the parser in the task's ``prepare_data`` (before
    ``configure_model``) and caches it; a second fit reads the cache and trains nothing."""
    monkeypatch.setenv("STRUCTATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STRUCTATTN_DATA", str(write_treebank(tmp_path / "data")))
    events = []

    def train_parser(settings, log=print):
        events.append(("train_parser", settings["epochs"], settings["embed_dim"],
                       settings["hidden_dim"], settings["seed"]))
        return parser_record()[1]

    configure_model = NLITask.configure_model

    def configure_and_record(self):
        events.append("configure_model")
        configure_model(self)

    monkeypatch.setattr(parser_training, "train_parser", train_parser)
    monkeypatch.setattr(NLITask, "configure_model", configure_and_record)
    quiet = ("--trainer.logger", "false", "--trainer.callbacks", "null",
             "--trainer.enable_checkpointing", "false", "--trainer.max_steps", "1")
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
        cli = build_cli(tiny(tmp_path / run, "pretrained_structured", *quiet), run=False)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        assert cli.model.model.parser is not None
    assert events == [("train_parser", 1, 6, 4, 0), "configure_model", "configure_model"]
    assert parser_path(parser_settings(1, 6, 4)).is_file()


def test_building_the_model_never_trains_the_parser(tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STRUCTATTN_DATA", str(write_treebank(tmp_path / "data")))
    monkeypatch.setattr(parser_training, "train_parser",
                        lambda *a, **k: pytest.fail("the model build trained a parser"))
    model = DecomposableAttention(10, embed_dim=4, hidden_dim=4, intra="hard_parent",
                                  parser=ParserOptions(6, 4))
    task = NLITask(model, parser_epochs=5)
    with pytest.raises(FileNotFoundError, match="prepare_data"):
        task.prepare_for(SimpleNamespace(vectors=None))
    assert not parser_path(parser_settings(5, 6, 4)).exists()
