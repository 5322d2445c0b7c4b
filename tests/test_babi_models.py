"""The memory network with every attention of the registry (MemN2N with softmax or sparsemax,
unary and binary CRF): padding invariance (padded facts get 0 attention), float64 gradcheck of
the CRF path, a falling loss, the linear-start switch; and the QA metrics against hand-computed
values."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lit_structattn.layers import registry
from lit_structattn.metrics.qa import FactSequenceAccuracy, fact_sequence_correct
from lit_structattn.models.memory_network import (
    HOP_TRANSFORMS,
    MemN2N,
    build_memory_model,
    position_encoding,
)

VOCAB = 12
ATTENTIONS = registry.names("memory_network")


def random_batch(batch=3, slots=4, words=5, seed=0):
    """Stories with 2..slots facts of 1..words words (ids >= 1), right-padded with 0."""
    g = torch.Generator().manual_seed(seed)
    story_lengths = torch.randint(2, slots + 1, (batch,), generator=g)
    sentence_lengths = torch.randint(1, words + 1, (batch, slots), generator=g)
    sentence_lengths *= torch.arange(slots) < story_lengths[:, None]
    story = torch.randint(1, VOCAB, (batch, slots, words), generator=g)
    story *= torch.arange(words) < sentence_lengths[..., None]
    query_lengths = torch.randint(1, 4, (batch,), generator=g)
    query = torch.randint(1, VOCAB, (batch, 3), generator=g)
    query *= torch.arange(3) < query_lengths[:, None]
    return story, story_lengths, sentence_lengths, query, query_lengths


def make(name, embed_dim=6, **kwargs):
    torch.manual_seed(0)
    return build_memory_model(name, VOCAB, hops=3, embed_dim=embed_dim, memory_size=8,
                              **kwargs).eval()


def test_position_encoding_matches_the_formula():
    weights = position_encoding(torch.tensor([3]), 4, 2)[0]  # J = 3, D = 2
    for j in (1, 2, 3):
        for d in (1, 2):
            expected = 1 + 4 * (d - 1.5) * (j - 2) / (2 * 3)
            assert math.isclose(float(weights[j - 1, d - 1]), expected, abs_tol=1e-6)
    assert (weights[3] == 0).all()  # beyond the sentence
    one_word = position_encoding(torch.tensor([1]), 1, 5)[0]
    assert torch.equal(one_word, torch.ones(1, 5))  # a one-word sentence: plain bag of words
    long = position_encoding(torch.tensor([40]), 40, 50)[0]  # about twice the paper's form
    j, d = torch.arange(1, 41.0)[:, None] / 40, torch.arange(1, 51.0) / 50
    torch.testing.assert_close(long, 2 * ((1 - j) - d * (1 - 2 * j)), atol=0.1, rtol=0)


@pytest.mark.parametrize("linear_start", [False, True])
@pytest.mark.parametrize("name", ATTENTIONS)
def test_padding_facts_and_words_changes_nothing(name, linear_start):
    model = make(name)
    model.embeddings.linear_start = linear_start
    story, story_lengths, sentence_lengths, query, query_lengths = random_batch()
    out = model(story, story_lengths, sentence_lengths, query, query_lengths)
    padded_story = F.pad(story, (0, 3, 0, 2))  # 3 more word columns, 2 more (empty) facts
    padded_query = F.pad(query, (0, 2))
    padded = model(padded_story, story_lengths, F.pad(sentence_lengths, (0, 2)), padded_query,
                   query_lengths)
    torch.testing.assert_close(padded.logits, out.logits)
    torch.testing.assert_close(padded.attention[..., :4], out.attention)
    assert (padded.attention[..., 4:] == 0).all()
    assert torch.equal(padded.fact_sequence, out.fact_sequence)
    if out.edge_marginals is not None:
        torch.testing.assert_close(padded.edge_marginals[..., :4, :4], out.edge_marginals)
        assert padded.edge_marginals[..., 4:, :].abs().sum() == 0


@pytest.mark.parametrize(("name", "linear_start"), [("unary_crf", True), ("binary_crf", False),
                                                   ("binary_crf", True)])
def test_gradcheck_of_the_crf_path(name, linear_start):
    model = make(name, embed_dim=2).double()
    model.embeddings.linear_start = linear_start
    story, story_lengths, sentence_lengths, query, query_lengths = random_batch(2, 3, 3)
    names = ["embeddings.words", "embeddings.ages", "query_map"]
    params = tuple(dict(model.named_parameters())[n].detach().clone().requires_grad_()
                   for n in names)

    def logits(*values):
        state = dict(zip(names, values, strict=True))
        return torch.func.functional_call(
            model, state, (story, story_lengths, sentence_lengths, query, query_lengths)).logits

    assert torch.autograd.gradcheck(logits, params, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", ATTENTIONS)
def test_loss_falls_on_a_tiny_batch(name):
    model = make(name).train()
    inputs = random_batch(batch=8, seed=1)
    answers = torch.randint(1, VOCAB, (8,), generator=torch.Generator().manual_seed(2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(60):
        loss = F.cross_entropy(model(*inputs).logits, answers, reduction="sum")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_linear_start_removes_the_memn2n_softmax_and_is_saved():
    model = make("softmax")
    inputs = random_batch()
    model.embeddings.linear_start = True
    linear = model(*inputs).attention
    assert not torch.allclose(linear.sum(-1), torch.ones(3, 3))
    state = {key: value.clone() for key, value in model.state_dict().items()}
    model.embeddings.linear_start = False
    soft = model(*inputs).attention
    torch.testing.assert_close(soft.sum(-1), torch.ones(3, 3))
    real = torch.arange(4) < inputs[1][:, None]
    first_hop = linear[:, 0].masked_fill(~real, float("-inf")).softmax(-1)
    torch.testing.assert_close(soft[:, 0], first_hop)  # same scores, softmax re-inserted
    model.load_state_dict(state)
    assert model.embeddings.linear_start


def test_unary_crf_linear_start_is_the_raw_potentials_then_the_chain():
    """In linear start the unary model's step weights are its raw potentials theta_k(i) =
    x_i^k . q^k (0 on padded facts), as MemN2N's linear hops; afterwards the chain's
    marginals, which without pairwise terms are a softmax per step of the same potentials
    (the log-softmax the model applies first changes nothing)."""
    model = make("unary_crf")
    story, story_lengths, _, _, _ = inputs = random_batch()
    keys, queries = _keys_values_queries(model, *inputs)
    model.embeddings.linear_start = True
    linear = model(*inputs)
    model.embeddings.linear_start = False
    chain = model(*inputs)
    for b in range(len(story)):
        n = int(story_lengths[b])
        theta = torch.stack([keys[b, k, :n] @ queries[k][b] for k in range(3)])
        torch.testing.assert_close(linear.attention[b, :, :n], theta)
        assert linear.attention[b, :, n:].abs().sum() == 0
        torch.testing.assert_close(chain.attention[b, :, :n], theta.softmax(-1))
    assert not torch.allclose(linear.logits, chain.logits)


def _keys_values_queries(model, story, story_lengths, sentence_lengths, query, query_lengths):
    """x^k = keys[:, k - 1], o^k = keys[:, k] (adjacent tying), q^k = queries[k - 1]."""
    emb = model.embeddings
    with torch.no_grad():
        keys = emb.memories(story, story_lengths, sentence_lengths)
        queries = [emb.query(query, query_lengths)]
        for _ in range(2):
            queries.append(queries[-1] @ model.query_map.T)
    return keys, queries


def test_binary_crf_marginals_by_enumeration():
    """p(z_1..z_K) by enumerating every fact sequence: start potentials theta_1, transitions
    theta_k(i) + o_i^k . x_j^{k+1} + theta_{k+1}(j) (no repeat), end potentials theta_K, each
    of them log-softmaxed (transitions over the next fact), as after linear start."""
    from itertools import product

    model = make("binary_crf")
    story, story_lengths, _, _, _ = inputs = random_batch()
    out = model(*inputs)
    keys, queries = _keys_values_queries(model, *inputs)
    for b in range(len(story)):
        n = int(story_lengths[b])
        x = keys[b, :3, :n]
        theta = [x[k] @ queries[k][b] for k in range(3)]
        moves = []
        for k in range(2):
            move = theta[k][:, None] + x[k + 1] @ x[k + 1].T + theta[k + 1][None, :]
            moves.append(move.fill_diagonal_(float("-inf")).log_softmax(-1))
        start, end = theta[0].log_softmax(-1), theta[2].log_softmax(-1)
        sequences = [z for z in product(range(n), repeat=3) if z[0] != z[1] != z[2]]
        scores = torch.stack([start[i] + moves[0][i, j] + moves[1][j, l] + end[l]
                              for i, j, l in sequences]).softmax(0)
        marginals = torch.zeros(3, n)
        for p, z in zip(scores, sequences, strict=True):
            for k in range(3):
                marginals[k, z[k]] += p
        torch.testing.assert_close(out.attention[b, :, :n], marginals, atol=1e-5, rtol=1e-4)


def test_binary_crf_linear_start_is_the_linear_forward_recursion():
    """In linear start the step weights are alpha_1 = theta_1, alpha_{k+1}(j) = theta_{k+1}(j)
    + sum_{i != j} alpha_k(i) o_i^k . x_j^{k+1}, summed here fact by fact; the most likely
    facts are their per-step argmax."""
    model = make("binary_crf")
    model.embeddings.linear_start = True
    story, story_lengths, _, _, _ = inputs = random_batch()
    out = model(*inputs)
    keys, queries = _keys_values_queries(model, *inputs)
    for b in range(len(story)):
        n = int(story_lengths[b])
        x = keys[b, :, :n]  # x^k = x[k - 1], o^k = x[k]
        alpha = [[float(x[0, i] @ queries[0][b]) for i in range(n)]]
        for k in range(1, 3):
            alpha.append([float(x[k, j] @ queries[k][b])
                          + sum(alpha[-1][i] * float(x[k, i] @ x[k, j])
                                for i in range(n) if i != j) for j in range(n)])
        torch.testing.assert_close(out.attention[b, :, :n], torch.tensor(alpha))
        assert out.fact_sequence[b].tolist() == torch.tensor(alpha).argmax(-1).tolist()
    assert out.edge_marginals is None


def test_binary_crf_never_selects_a_fact_twice_in_a_row():
    out = make("binary_crf")(*random_batch(seed=3))
    diagonal = torch.diagonal(out.edge_marginals, dim1=-2, dim2=-1)
    assert diagonal.abs().max() < 1e-6
    assert (out.fact_sequence[:, 1:] != out.fact_sequence[:, :-1]).all()


def test_fact_sequence_accuracy_by_hand():
    predicted = torch.tensor([[2, 0], [1, 3], [0, 1], [4, 4], [1, 2]])
    supports = torch.tensor([[2, 0, -1], [1, 2, -1], [0, 1, 3], [4, -1, -1], [1, 2, -1]])
    assert fact_sequence_correct(predicted, supports).tolist() == [True, False, False, False,
                                                                   True]
    metric = FactSequenceAccuracy()
    metric.update(predicted, supports, torch.tensor([2, 2, 2, 2, 7]))  # the task 7 row is out
    assert float(metric.compute()) == pytest.approx(1 / 4)
    only_excluded = FactSequenceAccuracy()
    only_excluded.update(predicted, supports, torch.full((5,), 8))
    assert math.isnan(float(only_excluded.compute()))


def test_unknown_attention_and_binary_with_one_hop():
    with pytest.raises(ValueError, match="unknown memory_network attention 'memn2n'; valid: "
                                         "softmax, sparsemax, entmax15, unary_crf, binary_crf"):
        build_memory_model("memn2n", VOCAB)
    with pytest.raises(ValueError, match="valid: softmax, sparsemax"):
        MemN2N(VOCAB, transform="csoftmax")
    with pytest.raises(ValueError, match="hops >= 2"):
        build_memory_model("binary_crf", VOCAB, hops=1)


def test_the_attention_names_build_their_models():
    assert HOP_TRANSFORMS == ("softmax", "sparsemax", "entmax15")
    for name in ATTENTIONS:
        model = make(name)
        assert isinstance(model, MemN2N) == (name in HOP_TRANSFORMS)
        if name in HOP_TRANSFORMS:
            assert model.transform.name == name


def test_sparsemax_hops_are_sparse_distributions_over_the_real_facts():
    """Sparsemax per hop: each hop a distribution over the real facts (sums to 1), padded facts
    exactly 0; with scores of this scale a hop drops some real facts outright (exactly 0,
    unlike softmax); finite gradients."""
    model = make("sparsemax", embed_dim=6, init_std=1.0)
    story, story_lengths, sentence_lengths, query, query_lengths = random_batch(batch=4, seed=4)
    padded_story = F.pad(story, (0, 0, 0, 3))  # 3 more, empty facts
    out = model(padded_story, story_lengths, F.pad(sentence_lengths, (0, 3)), query,
                query_lengths)
    real = torch.arange(padded_story.shape[1]) < story_lengths[:, None]  # [B, n]
    assert (out.attention.masked_select(~real[:, None]) == 0).all()
    torch.testing.assert_close(out.attention.sum(-1), torch.ones(4, 3))
    assert (out.attention.masked_select(real[:, None]) == 0).any()  # sparse among real facts
    words = model.embeddings.words
    words.grad = None
    out.logits.logsumexp(-1).sum().backward()
    assert torch.isfinite(words.grad).all()


def test_sparsemax_memory_network_trains_on_a_tiny_batch():
    model = make("sparsemax").train()
    inputs = random_batch(batch=8, seed=1)
    answers = torch.randint(1, VOCAB, (8,), generator=torch.Generator().manual_seed(2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(10):
        loss = F.cross_entropy(model(*inputs).logits, answers, reduction="sum")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] and all(math.isfinite(x) for x in losses)
