"""LinearChainCRF against brute-force enumeration of all label sequences, its gradients, masking,
float32 stability and input validation. Every test runs through the three algorithms: the
compiled forward-backward (numba), and with it switched off the log-depth tree of matrix
products and the time loop (forced with ``_SCAN_MAX_WORK``)."""

from __future__ import annotations

import itertools

import pytest
import torch

from lit_structattn.structured import _chain_kernel, linear_chain
from lit_structattn.structured.linear_chain import LinearChainCRF

SHAPES = ["shared", "batch", "position"]


@pytest.fixture(params=["compiled", "tree", "loop"], autouse=True)
def algorithm(request, monkeypatch):
    """Force the compiled kernel, the log-depth tree or the time loop for the whole test."""
    if request.param == "compiled":
        if not _chain_kernel.available():
            pytest.skip("numba is not installed")
    else:
        monkeypatch.setattr(_chain_kernel, "usable", lambda scores: False)
    monkeypatch.setattr(linear_chain, "_SCAN_MAX_WORK", 10**9 if request.param == "tree" else 0)
    return request.param


def make_inputs(batch, steps, labels, shape, seed, dtype=torch.float64, scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    unary = torch.randn(batch, steps, labels, generator=generator, dtype=dtype) * scale
    transition_shape = {
        "shared": (labels, labels),
        "batch": (batch, labels, labels),
        "position": (batch, steps - 1, labels, labels),
    }[shape]
    transition = torch.randn(transition_shape, generator=generator, dtype=dtype) * scale
    return unary, transition


def per_edge(transition, batch, steps):
    """The transition scores as ``[B, T-1, C, C]``."""
    if transition.dim() == 2:
        return transition.expand(batch, steps - 1, *transition.shape)
    if transition.dim() == 3:
        return transition[:, None].expand(batch, steps - 1, *transition.shape[1:])
    return transition


def brute_force(unary, transition, lengths):
    """Per chain: log Z, marginals, edge marginals, best sequence, entropy, and a log-prob
    function, by enumerating all C^L sequences."""
    batch, steps, labels = unary.shape
    edges = per_edge(transition, batch, steps)
    results = []
    for b in range(batch):
        length = int(lengths[b])
        sequences = list(itertools.product(range(labels), repeat=length))
        scores = torch.stack([
            unary[b, torch.arange(length), torch.tensor(seq)].sum()
            + sum(edges[b, t, seq[t], seq[t + 1]] for t in range(length - 1))
            for seq in sequences
        ])
        log_z = scores.logsumexp(0)
        probs = (scores - log_z).exp()
        node = torch.zeros(steps, labels, dtype=unary.dtype)
        edge = torch.zeros(steps - 1, labels, labels, dtype=unary.dtype)
        for seq, p in zip(sequences, probs, strict=True):
            for t in range(length):
                node[t, seq[t]] += p
            for t in range(length - 1):
                edge[t, seq[t], seq[t + 1]] += p
        best = torch.zeros(steps, dtype=torch.long)
        best[:length] = torch.tensor(sequences[int(scores.argmax())])
        entropy = -(probs * (scores - log_z)).sum()
        table = {seq: float(s - log_z) for seq, s in zip(sequences, scores, strict=True)}
        results.append(dict(log_z=log_z, node=node, edge=edge, best=best, entropy=entropy,
                            log_prob=lambda seq, table=table, n=length: table[tuple(seq[:n])]))
    return results


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("labels,steps", [(1, 4), (2, 5), (3, 5), (3, 1)])
def test_against_brute_force(shape, labels, steps):
    batch = 5
    unary, transition = make_inputs(batch, steps, labels, shape, seed=labels * 10 + steps)
    lengths = torch.tensor([steps, 1, max(steps - 1, 1), max(steps - 2, 1), steps])
    crf = LinearChainCRF(unary, transition, lengths)
    expected = brute_force(unary, transition, lengths)
    torch.testing.assert_close(crf.log_partition, torch.stack([e["log_z"] for e in expected]))
    torch.testing.assert_close(crf.marginals, torch.stack([e["node"] for e in expected]))
    torch.testing.assert_close(crf.edge_marginals, torch.stack([e["edge"] for e in expected]))
    torch.testing.assert_close(crf.entropy, torch.stack([e["entropy"] for e in expected]))
    assert crf.argmax.dtype == torch.long
    assert torch.equal(crf.argmax, torch.stack([e["best"] for e in expected]))
    tags = torch.randint(0, labels, (batch, steps), generator=torch.Generator().manual_seed(1))
    tags = torch.where(torch.arange(steps) < lengths[:, None], tags, -7)  # ignored at padding
    log_prob = torch.tensor([e["log_prob"](tags[b].tolist()) for b, e in enumerate(expected)],
                            dtype=unary.dtype)
    torch.testing.assert_close(crf.log_prob(tags), log_prob)


def test_padding_is_exactly_zero():
    unary, transition = make_inputs(3, 6, 3, "position", seed=0)
    lengths = torch.tensor([6, 2, 1])
    crf = LinearChainCRF(unary, transition, lengths)
    assert torch.all(crf.marginals[1, 2:] == 0) and torch.all(crf.marginals[2, 1:] == 0)
    assert torch.all(crf.edge_marginals[1, 1:] == 0) and torch.all(crf.edge_marginals[2] == 0)
    assert torch.all(crf.argmax[1, 2:] == 0) and torch.all(crf.argmax[2, 1:] == 0)
    positions = torch.arange(6) < lengths[:, None]
    torch.testing.assert_close(crf.marginals.sum(-1), positions.double())
    torch.testing.assert_close(crf.edge_marginals.sum((-1, -2)), positions[:, 1:].double())


@pytest.mark.parametrize("shape", SHAPES)
def test_garbage_in_ignored_entries_changes_nothing(shape):
    batch, steps, labels = 3, 6, 3
    unary, transition = make_inputs(batch, steps, labels, shape, seed=3)
    lengths = torch.tensor([6, 3, 1])
    garbage_unary = unary.clone()
    garbage_unary[1, 3:] = 1e30
    garbage_unary[2, 1:] = -3e4
    garbage_transition = transition.clone()
    if shape == "position":
        garbage_transition[1, 2:] = -1e30
        garbage_transition[2] = 5e4
    clean = LinearChainCRF(unary, transition, lengths)
    dirty = LinearChainCRF(garbage_unary.requires_grad_(), garbage_transition.requires_grad_(),
                           lengths)
    for name in ("log_partition", "marginals", "edge_marginals", "argmax", "entropy"):
        torch.testing.assert_close(getattr(dirty, name), getattr(clean, name), msg=name)
    torch.testing.assert_close(dirty.log_prob(clean.argmax), clean.log_prob(clean.argmax))
    grad_unary, grad_transition = torch.autograd.grad(
        (dirty.marginals * torch.randn_like(unary)).sum(), (garbage_unary, garbage_transition))
    assert torch.all(grad_unary[1, 3:] == 0) and torch.all(grad_unary[2, 1:] == 0)
    assert torch.isfinite(grad_transition).all()
    if shape == "position":
        assert torch.all(grad_transition[1, 2:] == 0) and torch.all(grad_transition[2] == 0)


def test_masking_invariance():
    batch, steps, labels = 4, 7, 3
    unary, transition = make_inputs(batch, steps, labels, "position", seed=5)
    lengths = torch.tensor([7, 4, 1, 2])
    crf = LinearChainCRF(unary, transition, lengths)
    for b in range(batch):
        n = int(lengths[b])
        alone = LinearChainCRF(unary[b : b + 1, :n], transition[b : b + 1, : n - 1])
        torch.testing.assert_close(crf.log_partition[b : b + 1], alone.log_partition)
        torch.testing.assert_close(crf.marginals[b : b + 1, :n], alone.marginals)
        torch.testing.assert_close(crf.edge_marginals[b : b + 1, : n - 1], alone.edge_marginals)
        assert torch.equal(crf.argmax[b : b + 1, :n], alone.argmax)
        torch.testing.assert_close(crf.entropy[b : b + 1], alone.entropy)


@pytest.mark.parametrize("shape", SHAPES)
def test_gradcheck(shape):
    unary, transition = make_inputs(2, 4, 3, shape, seed=7)
    lengths = torch.tensor([4, 2])

    def log_partition(u, t):
        return LinearChainCRF(u, t, lengths).log_partition

    def marginals(u, t):
        crf = LinearChainCRF(u, t, lengths)
        return crf.marginals, crf.edge_marginals

    inputs = (unary.requires_grad_(), transition.requires_grad_())
    assert torch.autograd.gradcheck(log_partition, inputs)
    assert torch.autograd.gradgradcheck(log_partition, inputs)
    assert torch.autograd.gradcheck(marginals, inputs)


def test_marginals_are_the_gradient_of_log_partition():
    unary, transition = make_inputs(3, 5, 3, "batch", seed=11)
    unary.requires_grad_()
    transition.requires_grad_()
    crf = LinearChainCRF(unary, transition, torch.tensor([5, 3, 1]))
    grad_unary, grad_transition = torch.autograd.grad(crf.log_partition.sum(),
                                                      (unary, transition))
    torch.testing.assert_close(crf.marginals, grad_unary)
    torch.testing.assert_close(crf.edge_marginals.sum(1), grad_transition)


def test_without_grad():
    unary, transition = make_inputs(2, 5, 3, "shared", seed=13)
    lengths = torch.tensor([5, 2])
    reference = LinearChainCRF(unary.requires_grad_(), transition.requires_grad_(), lengths)
    with torch.no_grad():
        inside = LinearChainCRF(unary, transition, lengths)
        marginals, log_z, entropy = inside.marginals, inside.log_partition, inside.entropy
    plain = LinearChainCRF(unary.detach(), transition.detach(), lengths)
    for result in (marginals, log_z, entropy, plain.marginals, plain.edge_marginals):
        assert not result.requires_grad
    torch.testing.assert_close(marginals, reference.marginals.detach())
    torch.testing.assert_close(plain.entropy, reference.entropy.detach())
    assert reference.marginals.requires_grad and reference.log_partition.requires_grad


def test_float32_long_chain_is_stable():
    batch, steps, labels = 3, 500, 5
    unary, transition = make_inputs(batch, steps, labels, "position", seed=17,
                                    dtype=torch.float32, scale=10.0)
    lengths = torch.tensor([500, 431, 1])
    crf = LinearChainCRF(unary, transition, lengths)
    exact = LinearChainCRF(unary.double(), transition.double(), lengths)
    assert torch.isfinite(crf.log_partition).all() and torch.isfinite(crf.marginals).all()
    positions = (torch.arange(steps) < lengths[:, None]).float()
    torch.testing.assert_close(crf.marginals.sum(-1), positions, atol=1e-4, rtol=0)
    torch.testing.assert_close(crf.edge_marginals.sum((-1, -2)), positions[:, 1:], atol=1e-4,
                               rtol=0)
    torch.testing.assert_close(crf.marginals.double(), exact.marginals, atol=2e-3, rtol=0)
    torch.testing.assert_close(crf.log_partition.double(), exact.log_partition, rtol=1e-5,
                               atol=0)
    assert torch.equal(crf.argmax, exact.argmax)


def test_forbidden_transitions():
    """Very negative finite scores (a common way to forbid transitions) stay exact."""
    unary, transition = make_inputs(2, 5, 3, "shared", seed=19)
    transition[0, 0] = -1e9
    crf = LinearChainCRF(unary, transition)
    expected = brute_force(unary, transition, torch.tensor([5, 5]))
    torch.testing.assert_close(crf.marginals, torch.stack([e["node"] for e in expected]))
    assert torch.all(crf.edge_marginals[..., 0, 0] < 1e-300)


@pytest.mark.parametrize(
    "unary,transition,lengths,message",
    [
        (torch.zeros(2, 3), torch.zeros(2, 2), None, "3 dimensions"),
        (torch.zeros(2, 3, 2, dtype=torch.long), torch.zeros(2, 2), None, "floating"),
        (torch.zeros(2, 3, 2), torch.zeros(3, 3), None, "transition must have shape"),
        (torch.zeros(2, 3, 2), torch.zeros(2, 3, 2, 2), None, "transition must have shape"),
        (torch.zeros(2, 3, 2), torch.zeros(2, 2, dtype=torch.long), None, "floating"),
        (torch.zeros(2, 3, 2), torch.zeros(2, 2), torch.tensor([3, 0]), r"\[1, 3\]"),
        (torch.zeros(2, 3, 2), torch.zeros(2, 2), torch.tensor([4, 1]), r"\[1, 3\]"),
        (torch.zeros(2, 3, 2), torch.zeros(2, 2), torch.tensor([3.0, 1.0]), "integer"),
        (torch.zeros(2, 3, 2), torch.zeros(2, 2), torch.tensor([3]), "shape"),
        (torch.zeros(2, 0, 2), torch.zeros(2, 2), None, "empty"),
    ],
)
def test_invalid_inputs(unary, transition, lengths, message):
    with pytest.raises(ValueError, match=message):
        LinearChainCRF(unary, transition, lengths)


def test_invalid_tags():
    crf = LinearChainCRF(torch.zeros(2, 3, 2), torch.zeros(2, 2), torch.tensor([3, 1]))
    with pytest.raises(ValueError, match="tags must lie"):
        crf.log_prob(torch.tensor([[0, 2, 0], [0, 9, 9]]))
    with pytest.raises(ValueError, match="shape"):
        crf.log_prob(torch.zeros(2, 2, dtype=torch.long))
    assert torch.isfinite(crf.log_prob(torch.tensor([[0, 1, 0], [1, 9, -9]]))).all()


def test_gradients_agree_across_algorithms_for_any_cotangent_layout(algorithm):
    """A broadcast cotangent (``marginals.sum()``), a weighted one, and one through the edge
    marginals and log Z together give the gradients of the autograd reference (float64)."""
    unary, transition = make_inputs(3, 6, 3, "shared", seed=23)
    lengths = torch.tensor([6, 4, 1])
    weights = torch.randn(3, 6, 3, dtype=torch.float64)
    edge_weights = torch.randn(3, 5, 3, 3, dtype=torch.float64)

    def losses(crf):
        return (crf.marginals.sum(), (crf.marginals * weights).sum(),
                (crf.edge_marginals * edge_weights).sum() + crf.log_partition.sum()
                + (crf.marginals * weights).sum())

    expected = []
    for index in range(3):
        u, t = unary.clone().requires_grad_(), transition.clone().requires_grad_()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_chain_kernel, "usable", lambda scores: False)
            expected.append(torch.autograd.grad(losses(LinearChainCRF(u, t, lengths))[index],
                                                (u, t)))
    for index in range(3):
        u, t = unary.clone().requires_grad_(), transition.clone().requires_grad_()
        got = torch.autograd.grad(losses(LinearChainCRF(u, t, lengths))[index], (u, t))
        for ours, reference in zip(got, expected[index], strict=True):
            torch.testing.assert_close(ours, reference)


@pytest.mark.parametrize("unary_dtype,transition_dtype,result_dtype", [
    (torch.bfloat16, torch.float32, torch.bfloat16),
    (torch.float32, torch.float64, torch.float32),
    (torch.float16, torch.bfloat16, torch.float16),
])
def test_mixed_dtypes(unary_dtype, transition_dtype, result_dtype):
    """Unary and transition of different dtypes: computed in float64 if either is float64 (else
    float32), returned in the dtype of unary, with gradients in each input's own dtype."""
    unary, transition = make_inputs(2, 5, 3, "shared", seed=29)
    unary, transition = unary.to(unary_dtype), transition.to(transition_dtype)
    exact = LinearChainCRF(unary.double(), transition.double())
    crf = LinearChainCRF(unary.requires_grad_(), transition.requires_grad_())
    assert crf.marginals.dtype == crf.log_partition.dtype == crf.entropy.dtype == result_dtype
    tolerance = 1e-6 if torch.float64 in (unary_dtype, transition_dtype) else 1e-2
    torch.testing.assert_close(crf.marginals.double(), exact.marginals, atol=tolerance, rtol=0)
    grads = torch.autograd.grad(crf.log_partition.sum(), (unary, transition))
    assert [g.dtype for g in grads] == [unary_dtype, transition_dtype]


def test_autocast_with_bfloat16_unary_and_float32_transition():
    """What a Linear layer gives under ``torch.autocast``: results in float32."""
    unary, transition = make_inputs(2, 6, 3, "shared", seed=31, dtype=torch.float32)
    exact = LinearChainCRF(unary.bfloat16().double(), transition.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        crf = LinearChainCRF(unary.bfloat16(), transition.requires_grad_())
        results = crf.marginals, crf.edge_marginals, crf.log_partition, crf.entropy
    assert all(r.dtype == torch.float32 for r in results)
    torch.testing.assert_close(crf.marginals.double(), exact.marginals, atol=1e-5, rtol=0)
    torch.testing.assert_close(crf.entropy.double(), exact.entropy, atol=1e-5, rtol=1e-5)
    (grad,) = torch.autograd.grad(crf.marginals[..., 0].sum(), transition)
    assert grad.dtype == torch.float32 and torch.isfinite(grad).all()
