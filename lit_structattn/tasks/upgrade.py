"""Checkpoints saved before the models took their parts' options as groups still load.

Problem: a checkpoint keeps the arguments its task and model were built with
(``hyper_parameters["model"] = {"class_path": ..., "init_args": {...}}``), and Lightning's
``load_from_checkpoint`` builds the model from them again. Until issue 46 a model declared its
parts' arguments itself, flat (``EasyFirstTagger(hidden_dim=50, steps=5, ...)``); now it takes
one options object per part (``encoder=TaggingEncoderOptions(hidden_dim=50)``,
``decoder=EasyFirstDecoderOptions(steps=5)``: the groups ``encoder`` and ``decoder`` of a
config), and refuses the old flat arguments.

Method: :data:`GROUPED` says, for each model class whose arguments moved, which old argument
went into which group and under which name. :func:`upgrade_hyperparameters` moves them;
:func:`upgraded_checkpoint` is the one step of the loading path
(:func:`~lit_structattn.tasks.base.load_task`) that hands Lightning a checkpoint whose
hyper-parameters have the new form. The weights kept their names, so nothing else changes.
Hyper-parameters of the new form pass unchanged.

A *config* of the old form is not upgraded: its flat keys are refused, and the ``structattn``
command names the group each one went to (:func:`moved_argument`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

import torch

from ..common.codec import import_class
from ..models.decomposable import DecomposableAttention
from ..models.easy_first import EasyFirstTagger
from ..models.seq2seq import Seq2Seq


def _into(group: str, *names: str) -> dict[str, tuple[str, str]]:
    """Old arguments ``names`` that went into ``group`` under the same names."""
    return {name: (group, name) for name in names}


#: model class -> {old flat argument: (its group now, its name in the group)}
GROUPED: dict[type, dict[str, tuple[str, str]]] = {
    EasyFirstTagger: {
        **_into("encoder", "word_dim", "affix_dim", "source_dim", "hidden_dim", "use_affixes",
                "use_capitalization"),
        **_into("decoder", "steps", "attention", "update", "sketch_dim", "preattention_dim",
                "window", "penalty", "vanilla_criterion"),
    },
    Seq2Seq: {
        "encoder": ("encoder", "kind"),  # a name (embedding, bilstm) then, a group now
        "encoder_dim": ("encoder", "hidden_dim"),
        **_into("encoder", "source_attention", "parser_dim"),
    },
    DecomposableAttention: {
        "parser_embed_dim": ("parser", "embed_dim"),
        "parser_dim": ("parser", "hidden_dim"),
    },
}


def _moves(class_path: str) -> dict[str, tuple[str, str]]:
    """The moved arguments of the class named ``class_path`` (or of the nearest of its bases
    in :data:`GROUPED`); empty for any other class or a name that does not import."""
    try:
        cls = import_class(class_path)
    except (ImportError, AttributeError, ValueError):
        return {}
    found = [GROUPED[base] for base in getattr(cls, "__mro__", ()) if base in GROUPED]
    return found[0] if found else {}


def moved_argument(class_path: str, name: str) -> str | None:
    """``group.name`` that the old argument ``name`` of ``class_path`` is now, or None."""
    group, new = _moves(class_path).get(name, (None, None))
    return None if group is None else f"{group}.{new}"


def upgrade_model_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"class_path": ..., "init_args": {...}}`` with the old flat arguments moved into their
    groups (arguments already in a group are kept; a group given both ways takes the grouped
    value)."""
    moves = _moves(config["class_path"])
    arguments = dict(config.get("init_args") or {})
    groups: dict[str, dict[str, Any]] = {}
    for old, (group, new) in moves.items():
        if old in arguments and not (old == group and isinstance(arguments[old], Mapping)):
            groups.setdefault(group, {})[new] = arguments.pop(old)
    for group, values in groups.items():
        arguments[group] = {**values, **(arguments.get(group) or {})}
    return {**config, "init_args": arguments}


def upgrade_hyperparameters(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """A task's ``hparams`` with every model configuration in it (a value with a
    ``class_path``) upgraded by :func:`upgrade_model_config`."""
    return {key: upgrade_model_config(value)
            if isinstance(value, Mapping) and "class_path" in value else value
            for key, value in hparams.items()}


def upgraded_checkpoint(checkpoint: Mapping[str, Any], data: IO[bytes]) -> IO[bytes]:
    """What Lightning should load: ``data`` (the bytes ``checkpoint`` was read from) when its
    hyper-parameters have the new form, else the bytes of ``checkpoint`` with them
    upgraded."""
    hparams = checkpoint.get("hyper_parameters")
    if not isinstance(hparams, Mapping):
        return data
    upgraded = upgrade_hyperparameters(hparams)
    if upgraded == hparams:
        return data
    buffer = io.BytesIO()
    torch.save({**checkpoint, "hyper_parameters": upgraded}, buffer)
    buffer.seek(0)
    return buffer
