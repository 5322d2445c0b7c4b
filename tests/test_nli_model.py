"""The decomposable attention model and the supervised parser: masking invariance, the attention
both ways against a hand computation, gradcheck through the structured path, a falling loss for
every intra-sentence variant, every inter-sentence transform forward and backward with padding
(padded positions get exactly 0; the constrained ones within their bounds), and the attachment
score."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from lit_structattn.layers import registry
from lit_structattn.models.decomposable import INTER_BOUND, SUPERVISED, DecomposableAttention
from lit_structattn.models.parser import DependencyParser, ParserOptions, attachment_counts

VOCAB = 12
INTRA = registry.names("nli", "intra")
INTER = registry.names("nli", "inter")


def build(intra: str, dim: int = 8, dropout: float = 0.0, **kwargs) -> DecomposableAttention:
    torch.manual_seed(0)
    model = DecomposableAttention(VOCAB, 3, dim, dim, intra, dropout,
                                  parser=ParserOptions(6, 5), init_std=None, **kwargs)
    if intra in SUPERVISED:
        model.attach_parser(DependencyParser(VOCAB, ParserOptions(6, 5), bounded=False),
                            torch.arange(VOCAB))
    return model


def pairs() -> tuple[torch.Tensor, ...]:
    premise = torch.tensor([[2, 3, 4, 5], [6, 7, 0, 0]])
    hypothesis = torch.tensor([[8, 9, 0], [10, 11, 2]])
    return premise, torch.tensor([4, 2]), hypothesis, torch.tensor([2, 3])


@pytest.mark.parametrize("intra", INTRA)
def test_padding_changes_nothing(intra):
    model = build(intra).eval()
    premise, premise_lengths, hypothesis, hypothesis_lengths = pairs()
    with torch.no_grad():
        batched = model(premise, premise_lengths, hypothesis, hypothesis_lengths)
        for b in range(2):
            n, m = int(premise_lengths[b]), int(hypothesis_lengths[b])
            alone = model(premise[b : b + 1, :n], premise_lengths[b : b + 1],
                          hypothesis[b : b + 1, :m], hypothesis_lengths[b : b + 1])
            assert torch.allclose(batched.logits[b], alone.logits[0], atol=1e-5)
            assert torch.allclose(batched.premise_attention[b, :n, :m],
                                  alone.premise_attention[0], atol=1e-6)
            assert batched.premise_attention[b, n:].abs().sum() == 0
            assert batched.premise_attention[b, :, m:].abs().sum() == 0
            if intra != "none":
                assert torch.allclose(batched.premise_parents[b, : n + 1, : n + 1],
                                      alone.premise_parents[0], atol=1e-6)
                assert torch.allclose(batched.premise_parents[b, :, 1 : n + 1].sum(0),
                                      torch.ones(n))


def test_attention_both_ways_by_hand():
    model = build("none", dim=3).eval()
    model.attend = nn.Identity()  # e_ij = x_i . y_j
    premise, premise_lengths, hypothesis, hypothesis_lengths = pairs()
    output = model(premise, premise_lengths, hypothesis, hypothesis_lengths)
    x = model.project(model.embedding(premise[1, :2])).tolist()
    y = model.project(model.embedding(hypothesis[1, :3])).tolist()
    e = [[sum(p * q for p, q in zip(xi, yj, strict=True)) for yj in y] for xi in x]
    for i in range(2):
        row = [math.exp(v) for v in e[i]]
        for j in range(3):
            assert output.premise_attention[1, i, j].item() == pytest.approx(row[j] / sum(row),
                                                                              abs=1e-6)
    for j in range(3):
        column = [math.exp(e[i][j]) for i in range(2)]
        for i in range(2):
            assert output.hypothesis_attention[1, j, i].item() == pytest.approx(
                column[i] / sum(column), abs=1e-6)


def test_gradcheck_structured_path_float64():
    model = build("structured", dim=3).double().eval()
    premise, premise_lengths, hypothesis, hypothesis_lengths = pairs()
    names = ("embedding.weight", "parser.embedding.weight", "parser.attention.s.weight")
    weights = tuple(dict(model.named_parameters())[n].detach().clone().requires_grad_()
                    for n in names)

    def logits(*tensors):
        return functional_call(model, dict(zip(names, tensors, strict=True)),
                               (premise, premise_lengths, hypothesis, hypothesis_lengths)).logits

    assert torch.autograd.gradcheck(logits, weights, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("intra", INTRA)
def test_loss_falls_on_a_tiny_batch(intra):
    model = build(intra, dim=16, dropout=0.2)
    premise, premise_lengths, hypothesis, hypothesis_lengths = pairs()
    labels = torch.tensor([0, 2])
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adagrad(trained, lr=0.05, initial_accumulator_value=0.1)
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(model(premise, premise_lengths, hypothesis,
                                     hypothesis_lengths).logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    if intra == "hard_parent":
        assert all(p.grad is None for p in model.parser.parameters())  # the parser stays fixed


def test_hard_parent_is_the_eisner_head():
    model = build("hard_parent").eval()
    premise, premise_lengths, _, _ = pairs()
    x = model.project(model.embedding(premise))
    represented, parents = model.represent(premise, premise_lengths)
    heads = model.parser.parse(premise, premise_lengths)
    for b, n in enumerate(premise_lengths.tolist()):
        for i in range(1, n + 1):
            head = int(heads[b, i])
            expected = model.root if head == 0 else x[b, head - 1]
            assert torch.allclose(represented[b, i - 1, 8:], expected)
            assert parents[b, :, i].tolist() == [float(k == head) for k in range(5)]


def test_variants_need_their_parser():
    with pytest.raises(ValueError, match="unknown nli intra 'soft'; valid: none"):
        DecomposableAttention(VOCAB, intra="soft")
    with pytest.raises(ValueError, match="unknown nli inter 'hardmax'; valid: centmax15"):
        DecomposableAttention(VOCAB, inter="hardmax")
    premise, premise_lengths, hypothesis, hypothesis_lengths = pairs()
    with pytest.raises(RuntimeError, match="needs its supervised parser: attach_parser"):
        DecomposableAttention(VOCAB, intra="hard_parent")(premise, premise_lengths, hypothesis,
                                                          hypothesis_lengths)
    with pytest.raises(ValueError, match="no supervised parser to attach"):
        DecomposableAttention(VOCAB, intra="structured").attach_parser(
            DependencyParser(VOCAB), torch.arange(VOCAB))


def test_fixed_vectors_are_given_after_construction():
    vectors = torch.randn(VOCAB, 5)
    model = DecomposableAttention(VOCAB, embed_dim=8, hidden_dim=8, intra="simple",
                                  parser=ParserOptions(embed_dim=5), vector_dim=5)
    assert not model.embedding.weight.requires_grad and not model.embedding.weight.any()
    model.load_vectors(vectors)
    assert torch.equal(model.embedding.weight, vectors)
    assert torch.equal(model.parser.embedding.weight[1:], vectors[1:])  # starts from them
    parser = model.parser.embedding.weight
    assert parser[0].abs().sum() == 0 and parser.requires_grad
    with pytest.raises(ValueError, match="set vector_dim"):
        DecomposableAttention(VOCAB).load_vectors(vectors)


@pytest.mark.parametrize("inter", INTER)
@pytest.mark.parametrize("intra", ["none", "structured"])
def test_every_inter_transform_with_padding(inter, intra):
    """Forward and backward with padding on both sides: padded positions get exactly 0 both
    ways, each real row is a distribution (not for sigmoid) within the bounds ``2 / length`` of
    the constrained transforms, the batch equals its examples run alone, and the gradients are
    finite."""
    model = build(intra, inter=inter)
    premise, premise_lengths, hypothesis, hypothesis_lengths = pairs()
    output = model(premise, premise_lengths, hypothesis, hypothesis_lengths)
    output.logits.logsumexp(-1).sum().backward()
    for p in model.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all()
    for b in range(2):
        n, m = int(premise_lengths[b]), int(hypothesis_lengths[b])
        to_hypothesis, to_premise = output.premise_attention[b], output.hypothesis_attention[b]
        assert to_hypothesis[n:].abs().sum() == 0 and to_hypothesis[:, m:].abs().sum() == 0
        assert to_premise[m:].abs().sum() == 0 and to_premise[:, n:].abs().sum() == 0
        if inter != "sigmoid":
            torch.testing.assert_close(to_hypothesis[:n].sum(-1), torch.ones(n))
            torch.testing.assert_close(to_premise[:m].sum(-1), torch.ones(m))
        if inter in ("csoftmax", "csparsemax", "centmax15"):
            assert (to_hypothesis <= INTER_BOUND / m + 1e-6).all()
            assert (to_premise <= INTER_BOUND / n + 1e-6).all()
        with torch.no_grad():
            model.eval()
            alone = model(premise[b : b + 1, :n], premise_lengths[b : b + 1],
                          hypothesis[b : b + 1, :m], hypothesis_lengths[b : b + 1])
            batched = model(premise, premise_lengths, hypothesis, hypothesis_lengths)
            model.train()
        torch.testing.assert_close(batched.logits[b], alone.logits[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(batched.premise_attention[b, :n, :m],
                                   alone.premise_attention[0], atol=1e-6, rtol=1e-5)


def test_loss_falls_with_sparsemax_between_the_sentences():
    model = build("none", dim=16, inter="sparsemax")
    premise, premise_lengths, hypothesis, hypothesis_lengths = pairs()
    labels = torch.tensor([0, 2])
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.05, initial_accumulator_value=0.1)
    losses = []
    for _ in range(30):
        output = model(premise, premise_lengths, hypothesis, hypothesis_lengths)
        loss = F.cross_entropy(output.logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_attachment_counts_by_hand():
    gold = torch.tensor([[0, 2, 0, 2, 0], [0, 0, 1, 0, 0]])
    predicted = torch.tensor([[0, 2, 0, 1, 3], [0, 0, 1, 1, 4]])
    # sentence 0: 4 words, heads right at 1 and 2; sentence 1: 2 words, both right
    assert attachment_counts(predicted, gold, torch.tensor([4, 2])) == (4, 6)


def test_parser_loss_is_the_tree_nll():
    torch.manual_seed(0)
    parser = DependencyParser(VOCAB, ParserOptions(4, 3), bounded=False)
    words, lengths = torch.tensor([[2, 3, 4]]), torch.tensor([3])
    heads = torch.tensor([[0, 2, 0, 2]])
    from lit_structattn.structured import DependencyCRF

    crf = DependencyCRF(parser.arc_scores(words, lengths), lengths)
    assert parser.loss(words, lengths, heads).item() == pytest.approx(
        -crf.log_prob(heads).item() / 3, rel=1e-5)
    assert parser.parse(words, lengths).shape == (1, 4)
