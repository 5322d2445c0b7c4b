"""The shared Attention layer, its scorers, and the small pooling model built on it."""

from __future__ import annotations

import pytest
import torch

from lit_structattn.attention import TRANSFORMS
from lit_structattn.layers.attention import Attention
from lit_structattn.layers.scorers import SCORERS
from lit_structattn.models.pooling import AttentionPoolingClassifier


@pytest.mark.parametrize("score", sorted(SCORERS))
@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_shapes_masking_and_mass(score, transform):
    torch.manual_seed(0)
    layer = Attention(8, 8, score=score, transform=transform)
    keys = torch.randn(4, 6, 8)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 3, 1, 5])[:, None]
    upper = torch.full((4, 6), 1.0) if layer.constrained else None
    context, weights = layer(torch.randn(4, 8), keys, mask=mask, upper=upper)
    assert context.shape == (4, 8) and weights.shape == (4, 6)
    assert (weights[~mask] == 0).all()
    if transform != "sigmoid":
        torch.testing.assert_close(weights.sum(-1), torch.ones(4))
    many, many_weights = layer(torch.randn(4, 3, 8), keys, mask=mask,
                               upper=None if upper is None else upper[:, None].expand(4, 3, 6))
    assert many.shape == (4, 3, 8) and many_weights.shape == (4, 3, 6)


def test_unknown_names_list_the_valid_ones():
    valid = "valid: centmax15, csoftmax, csparsemax, entmax, entmax15, sigmoid, softmax, sparsemax"
    with pytest.raises(ValueError, match=valid):
        Attention(4, transform="hardmax")
    with pytest.raises(ValueError, match="valid: dot, general, mlp"):
        Attention(4, score="cosine")


def test_constrained_transform_needs_upper_bounds():
    layer = Attention(4, transform="csoftmax")
    with pytest.raises(ValueError, match="upper bounds"):
        layer(torch.randn(2, 4), torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="takes no upper bounds"):
        Attention(4)(torch.randn(2, 4), torch.randn(2, 3, 4), upper=torch.ones(2, 3))


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_pooling_model_is_padding_invariant(transform):
    torch.manual_seed(0)
    model = AttentionPoolingClassifier(12, 3, 8, 8, transform=transform).eval()
    tokens = torch.randint(1, 12, (3, 7))
    lengths = torch.tensor([7, 4, 2])
    tokens = tokens.masked_fill(torch.arange(7) >= lengths[:, None], 0)
    logits, attention = model(tokens, lengths)
    for b in range(3):
        n = int(lengths[b])
        alone_logits, alone_attention = model(tokens[b : b + 1, :n], lengths[b : b + 1])
        torch.testing.assert_close(logits[b : b + 1], alone_logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(attention[b : b + 1, :n], alone_attention, atol=1e-6, rtol=1e-5)
        # Garbage in the padding changes nothing.
    noisy = tokens.masked_fill(tokens == 0, 5)
    torch.testing.assert_close(model(noisy, lengths)[0], logits)


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_loss_falls_on_a_tiny_batch(transform):
    torch.manual_seed(0)
    model = AttentionPoolingClassifier(12, 3, 16, 16, transform=transform)
    tokens = torch.randint(1, 12, (8, 6))
    lengths = torch.full((8,), 6)
    labels = torch.randint(0, 3, (8,))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(tokens, lengths)[0], labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
