"""The tasks' name arguments with a fixed set of choices are the ``Literal`` types of the modules
that own the registries: ``structattn ... --model.help`` lists the choices, and the CLI refuses
an unknown name with one short message listing them, before any class is built or any data
read. The CLI runs in-process (no subprocess start-up), on data folders that do not exist."""

from __future__ import annotations

from typing import get_args, get_type_hints

import pytest

from lit_structattn.attention.transforms import TransformName
from lit_structattn.cli import command as cli
from lit_structattn.datamodules.babi import BabiDataModule
from lit_structattn.datamodules.nli import NLIDataModule
from lit_structattn.datamodules.synthetic import NeedleDataModule
from lit_structattn.datamodules.tree_transduction import TreeTransductionDataModule
from lit_structattn.datamodules.ud_pos import UDPOSDataModule
from lit_structattn.layers import registry
from lit_structattn.layers.scorers import SCORERS, ScoreName
from lit_structattn.models import easy_first, seq2seq
from lit_structattn.models.decomposable import DecomposableAttention
from lit_structattn.models.memory_network import (
    HOP_TRANSFORMS,
    HopTransformName,
    MemN2N,
    MemoryNetwork,
)
from lit_structattn.models.pooling import AttentionPoolingClassifier
from lit_structattn.models.tagging_encoder import TaggingEncoderOptions
from lit_structattn.run import lightning_cli
from lit_structattn.tasks import (
    NLITask,
    QATask,
    SequenceClassifier,
    TaggingTask,
    TransductionTask,
    TranslationTask,
)
from lit_structattn.tasks import tagging as tagging_task
from lit_structattn.tasks import transduction as transduction_task

MISSING = "/nonexistent/structattn-data"  # any attempt to read data would fail here

SEQ2SEQ = ["--model", "lit_structattn.tasks.TransductionTask",
           "--model.init_args.model", "lit_structattn.models.seq2seq.Seq2Seq",
           "--data", "lit_structattn.datamodules.tree_transduction.TreeTransductionDataModule"]
TAGGING = ["--model", "lit_structattn.tasks.TaggingTask",
           "--model.init_args.model", "lit_structattn.models.easy_first.EasyFirstTagger",
           "--data", "lit_structattn.datamodules.ud_pos.UDPOSDataModule",
           "--data.init_args.data_dir", MISSING]
NLI = ["--model", "lit_structattn.tasks.NLITask",
       "--model.init_args.model", "lit_structattn.models.decomposable.DecomposableAttention",
       "--data", "lit_structattn.datamodules.nli.NLIDataModule",
           "--data.init_args.data_dir", MISSING]
BABI = ["--model", "lit_structattn.tasks.QATask",
        "--model.init_args.model", "lit_structattn.models.memory_network.MemN2N",
        "--data", "lit_structattn.datamodules.babi.BabiDataModule",
           "--data.init_args.data_dir", MISSING]
CLASSIFIER = ["--model", "lit_structattn.tasks.SequenceClassifier",
              "--model.init_args.model", "lit_structattn.models.pooling.AttentionPoolingClassifier",
              "--data", "lit_structattn.datamodules.synthetic.NeedleDataModule"]


def test_task_arguments_are_the_owners_literals():
    assert get_args(ScoreName) == tuple(sorted(SCORERS))
    expected = {
        AttentionPoolingClassifier: {"score": ScoreName, "transform": TransformName},
        SequenceClassifier: {"model": AttentionPoolingClassifier},
        DecomposableAttention: {"intra": registry.IntraAttentionName,
                                "inter": registry.InterAttentionName},
        NLITask: {"model": DecomposableAttention},
        seq2seq.Seq2Seq: {"attention": registry.AttentionName, "score": ScoreName,
                          "encoder": seq2seq.SourceEncoderOptions, "output": seq2seq.OutputName,
                          "decoder_init": seq2seq.DecoderInit},
        seq2seq.SourceEncoderOptions: {"kind": seq2seq.EncoderName,
                                       "source_attention": seq2seq.SourceAttentionName},
        TransductionTask: {"model": seq2seq.Seq2Seq, "metric": transduction_task.MetricName},
        easy_first.EasyFirstTagger: {"encoder": TaggingEncoderOptions,
                                     "decoder": easy_first.EasyFirstDecoderOptions},
        easy_first.EasyFirstDecoderOptions: {"attention": registry.EasyFirstAttentionName,
                                             "update": easy_first.UpdateName},
        TaggingTask: {"model": easy_first.EasyFirstTagger, "metric": tagging_task.MetricName},
        TranslationTask: {"model": seq2seq.EncoderDecoder},
        MemN2N: {"transform": HopTransformName},
        QATask: {"model": MemoryNetwork},
    }
    for task, arguments in expected.items():
        hints = get_type_hints(task.__init__)
        for name, literal in arguments.items():
            assert hints[name] == literal, (task.__name__, name)
    assert get_args(transduction_task.MetricName) == transduction_task.METRICS
    assert get_args(tagging_task.MetricName) == tagging_task.METRICS


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """``run_cli(*args) -> (exit status, stdout, stderr)`` of ``structattn`` run in-process;
    fails the test if the CLI built its classes or a DataModule prepared or set up data."""
    touched: list[str] = []
    monkeypatch.setattr(lightning_cli.StructAttnCLI, "instantiate_classes",
                        lambda self: touched.append("instantiate_classes"))
    for data in (TreeTransductionDataModule, UDPOSDataModule, NLIDataModule, NeedleDataModule,
                 BabiDataModule):
        for hook in ("prepare_data", "setup"):
            monkeypatch.setattr(data, hook, lambda *a, _n=f"{data.__name__}.{hook}", **k:
                                touched.append(_n))

    def run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exited:
            cli.main(list(args))
        out, err = capsys.readouterr()
        assert not touched, f"the CLI got past parsing: {touched}"
        return exited.value.code, out, err

    return run


@pytest.mark.parametrize(("base", "key", "choices"), [
    (SEQ2SEQ, "model.init_args.attention", registry.attention_names()),
    (SEQ2SEQ, "model.init_args.score", sorted(SCORERS)),
    (SEQ2SEQ, "model.init_args.encoder.kind", seq2seq.ENCODERS),
    (SEQ2SEQ, "metric", transduction_task.METRICS),
    (TAGGING, "model.init_args.decoder.attention", registry.names("easy_first")),
    (TAGGING, "metric", tagging_task.METRICS),
    (NLI, "model.init_args.intra", registry.names("nli", "intra")),
    (NLI, "model.init_args.inter", registry.names("nli", "inter")),
    (BABI, "model.init_args.transform", HOP_TRANSFORMS),
    (CLASSIFIER, "model.init_args.score", sorted(SCORERS)),
], ids=["seq2seq-attention", "seq2seq-score", "seq2seq-encoder", "seq2seq-metric",
        "tagging-attention", "tagging-metric", "nli-intra", "nli-inter", "babi-attention",
        "classifier-score"])
def test_unknown_name_is_refused_before_any_data(run_cli, base, key, choices):
    status, _, err = run_cli("fit", *base, f"--model.init_args.{key}", "hardmax")
    assert status == 2, err
    assert "Traceback" not in err and "hardmax" in err and key.rpartition(".")[2] in err
    for choice in choices:
        assert choice in err, (choice, err)
    assert len(err.strip().splitlines()) <= 3, err


@pytest.mark.parametrize(("task", "options"), [
    ("TransductionTask", ["--model.model MODEL", "--model.optimizer OPTIMIZER",
                          "--model.lr_scheduler LR_SCHEDULER"]),
    ("TaggingTask", ["--model.model MODEL",
                     "--model.metric {" + ",".join(tagging_task.METRICS) + "}"]),
    ("NLITask", ["--model.model MODEL", "--model.parser_epochs PARSER_EPOCHS"]),
    ("QATask", ["--model.model MODEL"]),
])
def test_model_help_lists_the_choices(run_cli, task, options):
    status, out, _ = run_cli("fit", "--model.help", f"lit_structattn.tasks.{task}")
    assert status == 0
    for option in options:
        assert option in out, option


@pytest.mark.parametrize(("task", "model", "options"), [
    ("TransductionTask", "lit_structattn.models.seq2seq.Seq2Seq",
     ["--model.attention {" + ",".join(registry.attention_names()) + "}",
      "--model.encoder.kind {" + ",".join(seq2seq.ENCODERS) + "}",
      "--model.score {" + ",".join(sorted(SCORERS)) + "}"]),
    ("TaggingTask", "lit_structattn.models.easy_first.EasyFirstTagger",
     ["--model.decoder.attention {" + ",".join(registry.names("easy_first")) + "}",
      "--model.decoder.update {" + ",".join(easy_first.UPDATES) + "}"]),
    ("NLITask", "lit_structattn.models.decomposable.DecomposableAttention",
     ["--model.intra {" + ",".join(registry.names("nli", "intra")) + "}",
      "--model.inter {" + ",".join(registry.names("nli", "inter")) + "}"]),
    ("QATask", "lit_structattn.models.memory_network.MemN2N",
     ["--model.transform {" + ",".join(HOP_TRANSFORMS) + "}"]),
    ("SequenceClassifier", "lit_structattn.models.pooling.AttentionPoolingClassifier",
     ["--model.score {" + ",".join(sorted(SCORERS)) + "}"]),
], ids=["seq2seq", "tagger", "nli", "memory_network", "classifier"])
def test_task_model_help_lists_the_choices(run_cli, task, model, options):
    status, out, _ = run_cli("fit", "--model", f"lit_structattn.tasks.{task}",
                             "--model.model.help", model)
    assert status == 0
    for option in options:
        assert option in out, option
