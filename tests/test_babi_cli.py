"""configs/babi end to end on generated stories: fit and test through the CLI for the binary CRF
(answer and fact accuracy logged, linear start switched off after its epochs, attention and
edge-marginal figures in TensorBoard, vocabulary and memory size taken from the data and saved
with the checkpoint)."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lit_structattn.run.lightning_cli import build_cli
from tests.test_babi_data import STORY, write_task

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "babi"


def tiny(tmp_path: Path, row: str, *extra: str) -> list[str]:
    """Arguments of a tiny run of a row on generated task-2 stories in ``tmp_path / "data"``,
    logging to ``tmp_path / "run"``."""
    data = write_task(tmp_path / "data", train=STORY * 6)
    return ["--config", str(CONFIGS / "base.yaml"), "--config",
            str(CONFIGS / "rows" / f"{row}.yaml"),
            "--data.init_args.data_dir", str(data), "--data.init_args.task", "2",
            "--data.init_args.batch_size", "4",
            "--trainer.default_root_dir", str(tmp_path / "run"),
            "--trainer.enable_progress_bar", "false", *extra]


def test_binary_crf_fit_and_test(tmp_path):
    args = tiny(tmp_path, "binary_crf", "--trainer.max_epochs", "2",
                "--model.init_args.linear_start_epochs", "1")
    cli = build_cli(args, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert not cli.model.model.embeddings.linear_start  # epoch 2 runs with log-softmax
    config = cli.model.hparams["model"]["init_args"]
    assert config["hops"] == 2  # Table 4's K for task 2, as configs/babi/base.yaml says
    assert config["vocab_size"] == len(cli.datamodule.vocab) and config["memory_size"] == 25
    tested = cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path="best",
                              verbose=False)[0]
    assert 0 <= tested["test/accuracy"] <= 1 and 0 <= tested["test/fact_accuracy"] <= 1
    images = {tag for path in (tmp_path / "run").rglob("events.out.tfevents.*")
              for tag in EventAccumulator(str(path)).Reload().Tags()["images"]}
    assert "attention/example_0" in images  # logged at epoch 0, in linear start
    cli.model.model.embeddings.linear_start = False  # the best checkpoint may be epoch 0's
    batch = next(iter(cli.datamodule.val_dataloader()))
    names = [name for name, _ in cli.model.attention_figures(batch, cli.datamodule.vocab, 1)]
    assert names == ["attention/example_0", "edge_marginals/example_0_z1_z2"]
    from lit_structattn.tasks import QATask

    loaded = QATask.load_from_checkpoint(cli.trainer.checkpoint_callback.best_model_path,
                                         map_location="cpu")  # no data needed
    assert loaded.model.embeddings.vocab_size == len(cli.datamodule.vocab)
