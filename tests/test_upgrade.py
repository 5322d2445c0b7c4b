"""Hyper-parameters of before the models took their parts' options as groups (issue 46, item 5):
a checkpoint that holds them loads with ``load_task`` (``lit_structattn.tasks.upgrade``), and
a config that still has a flat key is refused, naming the key's new place."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest
import torch
from lightning.pytorch.cli import instantiate_module

from lit_structattn.cli import command as cli
from lit_structattn.common.codec import TASK_KEY
from lit_structattn.tasks import NLITask, TaggingTask, TranslationTask, load_task
from lit_structattn.tasks.upgrade import (
    GROUPED,
    moved_argument,
    upgrade_hyperparameters,
    upgraded_checkpoint,
)
from tests.golden import CONFIGS

TAGGER = "lit_structattn.models.easy_first.EasyFirstTagger"

#: old-form hyper-parameters of each family, as checkpoints of the earlier code hold them
OLD = {
    TaggingTask: {
        "model": {"class_path": TAGGER, "init_args": {
            "word_dim": 6, "affix_dim": 5, "hidden_dim": 4, "use_affixes": True, "steps": "L",
            "attention": "csoftmax", "update": "single", "sketch_dim": 3, "preattention_dim": 2,
            "dropout": 0.3, "crf": True, "affix_vocab_size": 11, "num_tags": 3,
            "vocab_size": 13}},
        "tag_names": ["<pad>", "A", "B"]},
    TranslationTask: {
        "model": {"class_path": "lit_structattn.models.seq2seq.Seq2Seq", "init_args": {
            "embed_dim": 16, "hidden_dim": 16, "encoder": "bilstm", "encoder_dim": 8,
            "source_attention": "none", "parser_dim": 50, "src_vocab": 20, "tgt_vocab": 20,
            "tie_embeddings": True}}},
    NLITask: {
        "model": {"class_path": "lit_structattn.models.decomposable.DecomposableAttention",
                  "init_args": {"embed_dim": 8, "hidden_dim": 8, "intra": "structured",
                                "parser_embed_dim": 6, "parser_dim": 4, "vocab_size": 29,
                                "num_classes": 3}}},
}

#: each family's groups after the upgrade
GROUPS = {
    TaggingTask: {
        "encoder": {"word_dim": 6, "affix_dim": 5, "hidden_dim": 4, "use_affixes": True},
        "decoder": {"steps": "L", "attention": "csoftmax", "update": "single", "sketch_dim": 3,
                    "preattention_dim": 2}},
    TranslationTask: {
        "encoder": {"kind": "bilstm", "hidden_dim": 8, "source_attention": "none",
                    "parser_dim": 50}},
    NLITask: {"parser": {"embed_dim": 6, "hidden_dim": 4}},
}


@pytest.mark.parametrize("task", list(OLD), ids=lambda task: task.__name__)
def test_old_hyperparameters_are_moved_into_their_groups(task):
    upgraded = upgrade_hyperparameters(OLD[task])
    arguments = upgraded["model"]["init_args"]
    for group, values in GROUPS[task].items():
        assert arguments[group] == values
    kept = set(OLD[task]["model"]["init_args"]) - set(GROUPED[type(_model(upgraded, task))])
    assert set(arguments) == kept | set(GROUPS[task])
    assert upgrade_hyperparameters(upgraded) == upgraded  # the new form passes unchanged
    with pytest.raises(Exception, match="is not accepted|Unable to load"):
        instantiate_module(task, {"_class_path": f"{task.__module__}.{task.__name__}",
                                  **OLD[task]})


def _model(hparams: dict, task: type) -> torch.nn.Module:
    """The model of ``task`` built from ``hparams`` as ``load_from_checkpoint`` builds it."""
    return instantiate_module(task, {"_class_path": f"{task.__module__}.{task.__name__}",
                                     **hparams}).model


def test_the_table_names_arguments_that_left_and_fields_that_exist():
    """Every old argument of :data:`GROUPED` is gone from its model's constructor, and its new
    place is a field of the options object the model takes under that group's name."""
    for model, moves in GROUPED.items():
        parameters = inspect.signature(model.__init__).parameters
        hints = typing.get_type_hints(model.__init__)
        for old, (group, new) in moves.items():
            assert old not in parameters or old == group, (model.__name__, old)
            fields = {field.name for field in dataclasses.fields(hints[group])}
            assert new in fields, (model.__name__, old, group, new)


def test_an_old_checkpoint_loads_with_load_task(tmp_path):
    """A checkpoint with old-form hyper-parameters (the weights of the same model) loads, with
    the same weights; Lightning alone refuses it."""
    hparams = {"_class_path": "lit_structattn.tasks.TaggingTask", **OLD[TaggingTask]}
    task = instantiate_module(TaggingTask, upgrade_hyperparameters(hparams))
    hparams["_instantiator"] = "lightning.pytorch.cli.instantiate_module"  # as the CLI saves
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": hparams,
                "pytorch-lightning_version": "2.6.0",
                TASK_KEY: "lit_structattn.tasks.TaggingTask"}, path)
    loaded = load_task(path)
    assert loaded.model.encoder.options.hidden_dim == 4 and loaded.model.decoder.steps == "L"
    for name, tensor in task.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    with pytest.raises(Exception, match="'word_dim' is not accepted"):
        TaggingTask.load_from_checkpoint(path, weights_only=True)


def test_a_new_checkpoint_is_handed_over_as_it_was_read():
    checkpoint = {"hyper_parameters": upgrade_hyperparameters(OLD[NLITask])}
    data = object()
    assert upgraded_checkpoint(checkpoint, data) is data
    assert upgraded_checkpoint({"hyper_parameters": OLD[NLITask]}, data) is not data


@pytest.mark.parametrize(("configs", "option", "now"), [
    (("easy_first/common.yaml",), "--model.init_args.model.init_args.steps=5",
     "steps is now decoder.steps"),
    (("easy_first/common.yaml",), "--model.init_args.model.init_args.hidden_dim=5",
     "hidden_dim is now encoder.hidden_dim"),
    (("translation/base.yaml",), "--model.init_args.model.init_args.encoder_dim=8",
     "encoder_dim is now encoder.hidden_dim"),
    (("translation/base.yaml",), "--model.init_args.model.init_args.encoder=bilstm",
     "encoder is now encoder.kind"),
    (("nli/base.yaml",), "--model.init_args.model.init_args.parser_dim=4",
     "parser_dim is now parser.hidden_dim"),
], ids=["tagger-steps", "tagger-hidden_dim", "seq2seq-encoder_dim", "seq2seq-encoder",
        "nli-parser_dim"])
def test_an_old_flat_option_is_refused_with_its_new_name(capsys, configs, option, now):
    stack = [a for config in configs for a in ("--config", str(CONFIGS / config))]
    with pytest.raises(SystemExit) as exited:
        cli.main(["fit", *stack, option, "--print_config"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and now in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err


def test_moved_argument_knows_only_the_moved_ones():
    assert moved_argument(TAGGER, "window") == "decoder.window"
    assert moved_argument(TAGGER, "dropout") is None  # the tagger's own
    assert moved_argument("lit_structattn.models.pooling.AttentionPoolingClassifier",
                          "hidden_dim") is None
    assert moved_argument("no.such.Class", "steps") is None
