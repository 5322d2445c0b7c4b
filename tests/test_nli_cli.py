"""NLI end to end through the project's LightningCLI at tiny size (in process, as the runner
runs it): fit the structured row on a generated SNLI folder with the parse and soft-parent figures
in TensorBoard, then test the best checkpoint; and the runner's ``nli`` table."""

from __future__ import annotations

from pathlib import Path

import torch

from lit_structattn.lightning_cli import build_cli
from lit_structattn.models.parser import DependencyParser
from lit_structattn.parser_training import parser_path
from lit_structattn.reproduce.tables import TABLES
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
        "--model.init_args.embed_dim", "8", "--model.init_args.hidden_dim", "8",
        "--model.init_args.parser_embed_dim", "6", "--model.init_args.parser_dim", "4", *extra,
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


def test_nli_table_rows_and_configs():
    table = TABLES["nli"]
    assert len(table.rows) == 10 and {"ci", "cpu"} <= set(table.budgets)
    for row in table.rows:
        assert all(config.is_file() for config in row.configs)
    snli = {row.name: row.paper.get("test/accuracy") for row in table.rows}
    assert snli["structured (SNLI)"] == 86.8 and snli["structured (SICK)"] is None


def test_supervised_rows_reuse_the_cached_parser(tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTATTN_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    tokens = ["<pad>", "<unk>", "w0", "w1", "sees", "."]
    parser = DependencyParser(len(tokens), 6, 4, bounded=False)
    record = {"state_dict": parser.state_dict(), "vocab": tokens,
              "config": {"embed_dim": 6, "hidden_dim": 4}, "uas": {"dev": 0.5, "test": 0.25}}
    path = parser_path(1, 6, 4, 0)
    path.parent.mkdir(parents=True)
    torch.save(record, path)  # found in the cache: no training on EWT
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
