"""Our transforms in Transformers: the ``MultiheadAttention`` layer against
``torch.nn.MultiheadAttention``, bounded attention's caps, and the Hugging Face registration on
tiny randomly initialised models built from their configs (no downloads): with ``softmax`` the
outputs equal the eager implementation's; with the others a training step runs and every
returned row obeys its transform."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from lit_structattn.attention import get_transform
from lit_structattn.layers.multihead import MultiheadAttention, bounded_attention

transformers = pytest.importorskip("transformers")

from lit_structattn.integrations.huggingface import register  # noqa: E402

#: the transforms whose rows are sparse distributions, and the constrained ones (bounded)
SPARSE = ["sparsemax", "entmax15"]
BOUNDED = ["csparsemax", "csoftmax", "centmax15"]
EMBED, HEADS = 8, 2


def assert_rows_obey(weights: torch.Tensor, allowed: torch.Tensor, name: str,
                     cap: float | None = None) -> None:
    """``weights [B, H, T, S]``: each row a distribution over its ``allowed`` keys (broadcast
    bool), exactly 0 elsewhere; exact zeros among the allowed keys for a sparse transform;
    every key's column sum at most ``cap``."""
    allowed = allowed.expand(weights.shape)
    assert torch.isfinite(weights).all()
    assert (weights[~allowed] == 0).all()
    assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-5)
    if name in SPARSE:
        assert (weights[allowed] == 0).any()
    if cap is not None:
        assert (weights.sum(-2) <= cap + 1e-5).all()


def torch_twin(ours: MultiheadAttention) -> torch.nn.MultiheadAttention:
    """``torch.nn.MultiheadAttention`` with the projection weights of ``ours``."""
    twin = torch.nn.MultiheadAttention(EMBED, HEADS, batch_first=True).eval()
    with torch.no_grad():
        projections = (ours.q_proj, ours.k_proj, ours.v_proj)
        twin.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
        twin.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
        twin.out_proj.weight.copy_(ours.out_proj.weight)
        twin.out_proj.bias.copy_(ours.out_proj.bias)
    return twin


PADDING = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
CAUSAL = torch.ones(4, 5, dtype=torch.bool).triu(2)  # query t may not attend keys beyond t + 1


@pytest.mark.parametrize("masks", [
    {},
    {"key_padding_mask": PADDING},
    {"attn_mask": CAUSAL},
    {"key_padding_mask": PADDING, "attn_mask": CAUSAL},
    {"key_padding_mask": PADDING.float().masked_fill(PADDING, -torch.inf)},
    {"attn_mask": torch.randn(4, 5)},
    {"attn_mask": torch.randn(3 * HEADS, 4, 5), "average_attn_weights": False},
], ids=["none", "padding", "causal", "both", "float_padding", "float_bias", "per_head"])
def test_softmax_layer_equals_torch(masks):
    torch.manual_seed(0)
    ours = MultiheadAttention(EMBED, HEADS).eval()
    query, key = torch.randn(3, 4, EMBED), torch.randn(3, 5, EMBED)
    expected, ours_out = torch_twin(ours)(query, key, key, **masks), ours(query, key, key, **masks)
    for want, got in zip(expected, ours_out, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["softmax", *SPARSE])
def test_layer_rows_obey_their_transform(name):
    torch.manual_seed(0)
    layer = MultiheadAttention(EMBED, HEADS, transform=name)
    query = torch.randn(3, 4, EMBED) * 4  # scores large enough for sparse rows
    output, weights = layer(query, query[:, :4], query[:, :4], key_padding_mask=PADDING[:, :4],
                            average_attn_weights=False)
    assert output.shape == (3, 4, EMBED) and weights.shape == (3, HEADS, 4, 4)
    assert_rows_obey(weights, ~PADDING[:, None, None, :4], name)
    output.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


@pytest.mark.parametrize("name", BOUNDED)
def test_bounded_layer_caps_each_key(name):
    """6 queries over 5 keys (3 where padded), query t allowed keys up to t + 1: a cap of 2
    leaves every query a feasible row."""
    torch.manual_seed(0)
    layer = MultiheadAttention(EMBED, HEADS, transform=name, cap=2.0)
    query, key = torch.randn(3, 6, EMBED) * 4, torch.randn(3, 5, EMBED)
    ahead = torch.ones(6, 5, dtype=torch.bool).triu(2)
    output, weights = layer(query, key, key, key_padding_mask=PADDING, attn_mask=ahead,
                            average_attn_weights=False)
    allowed = ~PADDING[:, None, None] & ~ahead
    assert_rows_obey(weights, allowed, name, cap=2.0)
    assert (weights.sum(-2) > 2 - 1e-5).any()  # the cap binds
    output.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


def test_spent_budget_spills_over_evenly():
    """2 keys, cap 1, 5 queries: the first two spend the budget; each later query's bounds are
    raised by (1 - 0) / 2, so its weights are those bounds: one half each."""
    torch.manual_seed(0)
    scores = torch.randn(2, 5, 2) * 3
    weights = bounded_attention(scores, 1.0, get_transform("csparsemax"))
    torch.testing.assert_close(weights[:, :2].sum(-2), torch.ones(2, 2))
    torch.testing.assert_close(weights[:, 2:], torch.full((2, 3, 2), 0.5))


def test_spill_over_only_reaches_allowed_keys():
    """3 keys, the last masked, cap 0.5: the first query takes the whole budget of the two
    allowed keys; the second gets one half each of them, and the masked key never anything."""
    scores = torch.tensor([[0.0, 1.0, 5.0], [3.0, 0.0, 5.0]])
    mask = torch.tensor([True, True, False])
    weights = bounded_attention(scores, 0.5, get_transform("csparsemax"), mask)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]))


@pytest.mark.parametrize("name", BOUNDED)
def test_bounded_attention_gradcheck(name):
    """Gradients through the scores and the cap, the budgets included (float64)."""
    torch.manual_seed(1)
    scores = (torch.randn(2, 4, 5, dtype=torch.float64) * 2).requires_grad_()
    cap = torch.full((2, 5), 1.3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True] * 4 + [False]])[:, None]
    transform = get_transform(name)
    assert torch.autograd.gradcheck(lambda s, c: bounded_attention(s, c, transform, mask),
                                    (scores, cap))


def test_entmax_alpha_option():
    """``entmax`` takes its alpha through the transform's options: alpha = 2 is sparsemax."""
    torch.manual_seed(0)
    layers = [MultiheadAttention(EMBED, HEADS, transform="entmax",
                                 transform_options={"alpha": 2.0}),
              MultiheadAttention(EMBED, HEADS, transform="sparsemax")]
    layers[0].load_state_dict(layers[1].state_dict())
    query = torch.randn(3, 4, EMBED) * 4
    outputs = [layer(query, query, query, key_padding_mask=PADDING[:, :4]) for layer in layers]
    for want, got in zip(outputs[1], outputs[0], strict=True):
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="takes no option"):
        MultiheadAttention(EMBED, HEADS, transform="sparsemax", transform_options={"alpha": 2.0})


def test_cap_goes_with_the_constrained_transforms():
    with pytest.raises(ValueError, match="needs a cap"):
        MultiheadAttention(EMBED, HEADS, transform="csparsemax")
    with pytest.raises(ValueError, match="takes no cap"):
        MultiheadAttention(EMBED, HEADS, transform="sparsemax", cap=2.0)
    with pytest.raises(ValueError, match="unknown attention transform"):
        MultiheadAttention(EMBED, HEADS, transform="sparsmax")


# --- Hugging Face: tiny models from their configs --------------------------------------------

NAMES = register(cap=2.0)
TOKENS = torch.randint(3, 50, (2, 7), generator=torch.Generator().manual_seed(0))
PADDED = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])  # the second sentence has 5 tokens
TARGET = torch.randint(3, 50, (2, 5), generator=torch.Generator().manual_seed(1))
SMALL = {"vocab_size": 50, "pad_token_id": 0, "decoder_start_token_id": 0}
#: initial weights large enough for sparse rows (the default ones give near-uniform scores)
CONFIGS = {
    "bert": lambda: transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, initializer_range=0.5),
    "marian": lambda: transformers.MarianConfig(
        **SMALL, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_position_embeddings=32, init_std=0.5),
    # decoder only, causal, 2 key/value heads shared by 4 query heads
    "llama": lambda: transformers.LlamaConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        initializer_range=0.5),
    "t5": lambda: transformers.T5Config(
        **SMALL, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2),
}

ENCODER_DECODERS = ("marian", "t5")


def tiny_model(family: str, attention: str, **config: object) -> torch.nn.Module:
    config_object = CONFIGS[family]()
    for name, value in config.items():
        setattr(config_object, name, value)
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(config_object, attn_implementation=attention)


def run(model: torch.nn.Module, family: str):
    """The model on the padded batch, with its attentions."""
    inputs = {"input_ids": TOKENS, "attention_mask": PADDED, "output_attentions": True}
    if family in ENCODER_DECODERS:
        inputs["decoder_input_ids"] = TARGET
    return model(**inputs)


def attentions_and_allowed(outputs, family: str):
    """``(weights [B, H, T, S], allowed keys)`` of every attention layer of ``outputs``."""
    source_keys = PADDED.bool()[:, None, None]
    if family == "bert":
        return [(w, source_keys) for w in outputs.attentions]
    if family == "llama":
        return [(w, source_keys & torch.ones(7, 7, dtype=torch.bool).tril())
                for w in outputs.attentions]
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    return ([(w, source_keys) for w in outputs.encoder_attentions]
            + [(w, source_keys) for w in outputs.cross_attentions]
            + [(w, causal) for w in outputs.decoder_attentions])


def test_register_names_every_transform():
    assert {"softmax", "entmax", *SPARSE, *BOUNDED} <= set(NAMES)
    assert set(NAMES) <= set(transformers.AttentionInterface())
    with pytest.raises(ValueError, match="unknown attention transform"):
        register(["sparsmax"])
    with pytest.raises(ValueError, match="takes no option"):
        register(["sparsemax"], alpha=1.3)


def test_entmax_alpha_from_register():
    """``register(["entmax"], alpha=2.0)``: the model's outputs are sparsemax's."""
    register(["entmax"], alpha=2.0)
    try:
        models = [tiny_model("bert", name).eval() for name in ("entmax", "sparsemax")]
        with torch.no_grad():
            got, want = (run(model, "bert") for model in models)
    finally:
        register(["entmax"])
    torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state)


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_softmax_equals_eager(family):
    eager, ours = tiny_model(family, "eager").eval(), tiny_model(family, "softmax").eval()
    ours.load_state_dict(eager.state_dict())
    with torch.no_grad():
        expected, got = run(eager, family), run(ours, family)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state)
    pairs = zip(attentions_and_allowed(got, family), attentions_and_allowed(expected, family),
                strict=True)
    for (ours_weights, _), (eager_weights, _) in pairs:
        torch.testing.assert_close(ours_weights, eager_weights)


@pytest.mark.parametrize("name", [*SPARSE, *BOUNDED])
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_training_step_rows_obey(family, name):
    """A training step (dropout on) with finite gradients; every returned row obeys its
    transform, padding keys get exactly 0, and each key's total attention stays under the cap
    (2, set on the config; 2 * 5 real keys >= 7 queries, and >= 1 along a causal mask)."""
    cap = 2.0 if name in BOUNDED else None
    model = tiny_model(family, name, attention_cap=cap).train()
    outputs = run(model, family)
    outputs.last_hidden_state.pow(2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    for weights, allowed in attentions_and_allowed(outputs, family):
        assert_rows_obey(weights.detach(), allowed, name, cap)


def test_cap_from_the_config_then_register():
    """The config's attention_cap wins over register's; without either, the call says what to
    set."""
    outputs = run(tiny_model("bert", "csparsemax", attention_cap=1.5).eval(), "bert")
    assert all((w.sum(-2) <= 1.5 + 1e-5).all() for w in outputs.attentions)
    assert any((w.sum(-2) > 1.5 - 1e-5).any() for w in outputs.attentions)
    register(["csparsemax"])
    try:
        with pytest.raises(ValueError, match="attention_cap"):
            run(tiny_model("bert", "csparsemax").eval(), "bert")
    finally:
        register(cap=2.0)


def test_the_package_imports_no_transformers():
    """The integration imports transformers only when it registers."""
    code = ("import sys, lit_structattn.integrations.huggingface, lit_structattn.layers.multihead;"
            "assert 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", [*SPARSE, "csparsemax"])
def test_bfloat16_model(name):
    """A bfloat16 model: the transforms compute in float32 and return bfloat16 rows that obey
    them up to bfloat16's rounding."""
    cap = 2.0 if name in BOUNDED else None
    model = tiny_model("llama", name, attention_cap=cap).to(torch.bfloat16).train()
    outputs = run(model, "llama")
    outputs.last_hidden_state.float().pow(2).mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    for weights, allowed in attentions_and_allowed(outputs, "llama"):
        assert weights.dtype == torch.bfloat16
        weights = weights.detach().float()
        assert (weights[~allowed.expand(weights.shape)] == 0).all()
        assert torch.allclose(weights.sum(-1), torch.ones(()), atol=2e-2)
        if cap is not None:
            assert (weights.sum(-2) <= cap + 2e-2).all()
