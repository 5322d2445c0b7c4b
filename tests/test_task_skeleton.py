"""One task skeleton (issue 46, item 2): every task family, validated and tested through its
configs, logs its headline metric once more as ``{val,test}/score``, and every family's config
takes its callbacks from the one shared list, ``configs/callbacks.yaml``, whose best checkpoint
monitors ``val/score``. The cases and their tiny generated data are those of the golden values
(``tests/golden.py``), evaluated without training."""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
import yaml

from lit_structattn.cli import command as cli
from lit_structattn.reproduce import runner
from lit_structattn.run.lightning_cli import build_cli
from tests.golden import CASES, CONFIGS, Case

# case -> the name of its headline metric
HEADLINES = {
    "tree_structured": "ltf",
    "easy_first_nef_crf_f_csoftmax": "entity_f1",
    "translation_beam_joint": "bleu",
    "babi_binary_crf": "accuracy",
    "nli_structured": "accuracy",
}
EXTRA = {
    "needle": (Case(("demo/needle.yaml",), ("--data.init_args.num_train", "64",
                                            "--data.init_args.num_val", "40")), "accuracy"),
    "inflection_exact_match": (  # TransductionTask's other metric
        Case(CASES["tree_structured"].configs,
             (*CASES["tree_structured"].overrides, "--model.init_args.metric", "exact_match")),
        "accuracy"),
}
EVALUATED = {**{name: (CASES[name], metric) for name, metric in HEADLINES.items()}, **EXTRA}
SHARED = CONFIGS / "callbacks.yaml"


def evaluated(case: Case) -> tuple[dict, dict]:
    """The metrics of ``trainer.validate`` and ``trainer.test`` of the untrained task of
    ``case`` on two batches of each split."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(), \
            contextlib.ExitStack() as patched:
        warnings.simplefilter("ignore")
        for target, replacement in case.patches:
            patched.enter_context(mock.patch(target, replacement))
        data, run = Path(tmp) / "data", Path(tmp) / "run"
        if case.write_data is not None:
            case.write_data(data)
        args = case.args(str(data), str(run))
        built = build_cli([*args, "--trainer.limit_val_batches", "2",
                           "--trainer.limit_test_batches", "2"], run=False)
        (validated,) = built.trainer.validate(built.model, datamodule=built.datamodule,
                                              verbose=False)
        (tested,) = built.trainer.test(built.model, datamodule=built.datamodule, verbose=False)
    return validated, tested


@pytest.mark.parametrize("name", list(EVALUATED))
def test_every_task_logs_its_headline_metric_as_the_score(name):
    case, headline = EVALUATED[name]
    validated, tested = evaluated(case)
    for split, metrics in (("val", validated), ("test", tested)):
        assert f"{split}/{headline}" in metrics, (split, sorted(metrics))
        assert metrics[f"{split}/score"] == metrics[f"{split}/{headline}"], (split, metrics)
    assert "val/loss" in validated


def family_configs() -> list[Path]:
    """The shipped configs that give a trainer its callbacks."""
    found = []
    for path in sorted(CONFIGS.rglob("*.yaml")):
        config = yaml.safe_load(path.read_text()) if path != SHARED else None
        if isinstance(config, dict) and "callbacks" in (config.get("trainer") or {}):
            found.append(path)
    return found


def test_every_family_config_takes_the_shared_callbacks():
    """The configs of the six families name the shared list; only the needle demo, the
    smallest run (one checkpoint callback, ``best.ckpt``), has its own, and it too monitors
    ``val/score``."""
    configs = family_configs()
    needle = CONFIGS / "demo" / "needle.yaml"
    assert {p.parent.name for p in configs} == {"babi", "demo", "easy_first", "morphology",
                                                "nli", "translation", "tree_transduction"}
    for path in configs:
        callbacks = yaml.safe_load(path.read_text())["trainer"]["callbacks"]
        if path == needle:
            assert [c["init_args"]["monitor"] for c in callbacks] == ["val/score"]
        else:
            assert (path.parent / callbacks).resolve() == SHARED, path
    monitored = [c["init_args"].get("monitor") for c in yaml.safe_load(SHARED.read_text())
                 if c["class_path"].endswith("ModelCheckpoint")]
    assert monitored == ["val/score", None]


@pytest.mark.parametrize("config", ["babi/base.yaml", "easy_first/common.yaml",
                                    "translation/base.yaml"])
def test_a_family_config_alone_gets_the_shared_callbacks(config, capsys):
    """``structattn fit --config configs/<family>/base.yaml`` reads the shared list from
    beside the family's folder: the full config holds it."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["fit", "--config", str(CONFIGS / config), "--print_config"])
    assert exited.value.code in (0, None)
    callbacks = yaml.safe_load(capsys.readouterr().out)["trainer"]["callbacks"]
    assert [c["class_path"].rpartition(".")[2] for c in callbacks] == [
        "ModelCheckpoint", "ModelCheckpoint", "HparamsMetric", "AttentionFigures"]
    assert callbacks[0]["init_args"]["monitor"] == "val/score"


def test_a_table_selects_by_its_headline_metric_through_the_score():
    """The babi table selects seeds by ``val/accuracy``; its runs' checkpoint monitors
    ``val/score``, the same values: the runner records the best as ``val/accuracy``, and
    nothing for a key that is not the headline metric."""
    best = SimpleNamespace(monitor="val/score", best_model_score=torch.tensor(0.75))
    trainer = SimpleNamespace(lightning_module=SimpleNamespace(score_name="accuracy"),
                              checkpoint_callbacks=[best])
    assert runner._best_validation(trainer, "val/accuracy") == {"val/accuracy": 0.75}
    assert runner._best_validation(trainer, "val/fact_accuracy") == {}
