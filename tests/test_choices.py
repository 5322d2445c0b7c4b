"""Names with a fixed set of choices are ``Literal`` types built from their registries, so a
config parser lists them and refuses another before building anything; Python callers still
get ``check_choice``'s "unknown X; valid: ..." error."""

from __future__ import annotations

from typing import get_args, get_type_hints

import pytest
from jsonargparse import ArgumentParser

from lit_structattn.attention.transforms import TRANSFORMS, TransformName
from lit_structattn.layers import registry
from lit_structattn.layers.registry import AttentionName, attention_names
from lit_structattn.models import easy_first, seq2seq


def test_literals_follow_their_registries():
    assert get_args(TransformName) == tuple(sorted(TRANSFORMS))
    assert get_args(AttentionName) == tuple(attention_names())
    assert get_args(registry.OutputName) == seq2seq.OUTPUTS
    assert get_args(registry.EasyFirstAttentionName) == registry.names("easy_first")
    hints = get_type_hints(easy_first.EasyFirstDecoderOptions)
    assert hints["attention"] == registry.EasyFirstAttentionName


def test_parser_lists_and_refuses_before_building():
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(seq2seq.Seq2Seq, "model")
    assert "sparsemax" in parser.format_help() and "beam_joint" in parser.format_help()
    base = ["--model.src_vocab", "5", "--model.tgt_vocab", "5"]
    assert parser.parse_args([*base, "--model.attention", "csparsemax"]).model.attention
    with pytest.raises(Exception, match="hardmax"):
        parser.parse_args([*base, "--model.attention", "hardmax"])
    with pytest.raises(ValueError, match="valid: centmax15, csoftmax, csparsemax, entmax, "
                                         "entmax15, segmentation"):
        seq2seq.Seq2Seq(5, 5, attention="hardmax")
