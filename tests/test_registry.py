"""The one registry of attention layers and the contract its layers declare."""

from __future__ import annotations

from typing import get_args

import pytest
import torch

from lit_structattn.layers import registry
from lit_structattn.layers.contract import AttentionLayer


def test_every_name_a_family_takes_is_described():
    for family, roles in registry.FAMILIES.items():
        for role, names in roles.items():
            assert names, (family, role)
            assert set(names) <= set(registry.KINDS), (family, role)


def test_literal_types_follow_the_families():
    assert get_args(registry.EasyFirstAttentionName) == registry.names("easy_first")
    assert get_args(registry.MemoryAttentionName) == registry.names("memory_network")
    assert get_args(registry.InterAttentionName) == registry.names("nli", "inter")
    assert get_args(registry.IntraAttentionName) == registry.names("nli", "intra")
    assert get_args(registry.OutputName) == registry.names("seq2seq", "output")


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown memory_network attention 'segmentation'; "
                                         "valid: softmax, sparsemax, entmax15, unary_crf, "
                                         "binary_crf"):
        registry.check_attention("memory_network", "attention", "segmentation")
    with pytest.raises(ValueError, match="unknown model family 'tagger'; valid: easy_first"):
        registry.names("tagger")
    with pytest.raises(ValueError, match="unknown attention role of nli 'attention'; "
                                         "valid: inter, intra"):
        registry.names("nli", "attention")


@pytest.mark.parametrize("name", registry.attention_names())
def test_built_layers_declare_the_contract(name):
    layer = registry.build_attention(name, 6, 4)
    assert isinstance(layer, AttentionLayer)
    assert layer.constrained == (name in ("csoftmax", "csparsemax", "centmax15"))
    assert layer.takes_bonus == (name != "segmentation")
    assert layer.distribution == (name not in ("sigmoid", "segmentation"))
    query, keys = torch.randn(2, 3, 6), torch.randn(2, 5, 4)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    upper = torch.full((2, 3, 5), 0.5) if layer.constrained else None
    context, weights = layer(query, keys, mask=mask, upper=upper)
    assert context.shape == (2, 3, 4) and weights.shape == (2, 3, 5)
    assert (weights[1, :, 3:] == 0).all()
    if layer.distribution:
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    penalty = layer.penalty()
    assert penalty is None or penalty.dim() == 0


def test_a_layer_refuses_what_it_does_not_take():
    segmentation = registry.build_attention("segmentation", 4, 4)
    with pytest.raises(ValueError, match="no score bonus"):
        segmentation(torch.randn(1, 4), torch.randn(1, 3, 4), bonus=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="needs upper bounds"):
        registry.build_attention("csoftmax", 4, 4)(torch.randn(1, 4), torch.randn(1, 3, 4))


def test_every_described_name_is_taken_by_a_family():
    taken = {name for roles in registry.FAMILIES.values() for names in roles.values()
             for name in names}
    assert taken == set(registry.KINDS)
