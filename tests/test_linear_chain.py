"""LinearChainCRF against brute-force enumeration of all label sequences, its gradients, masking,
input validation, and precision: float32 at score scales 1 to 1e4, ``-inf`` scores, half
precision, mixed dtypes and autocast against float64 references. Every test runs through the
four algorithms: the compiled forward-backward of the CPU (numba) and of CUDA (Triton: its
interpreter on the CPU, see tests/conftest.py), and with them switched off the log-depth tree of
matrix products and the time loop (forced with ``_SCAN_MAX_WORK``)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lit_structattn.common.compiled import triton_installed
from lit_structattn.structured import _chain_kernel, _chain_numba, _chain_triton, linear_chain
from lit_structattn.structured.linear_chain import LinearChainCRF

SHAPES = ["shared", "batch", "position"]
SCALES = [1.0, 10.0, 100.0, 1e3, 1e4]
EPS32 = torch.finfo(torch.float32).eps


COMPILED = {"compiled": _chain_numba, "triton": _chain_triton}


@pytest.fixture(params=["compiled", "triton", "tree", "loop"], autouse=True)
def algorithm(request, monkeypatch):
    """Force the numba or the Triton kernel, the log-depth tree or the time loop for the whole
    test."""
    backend = COMPILED.get(request.param)
    if request.param == "compiled" and not _chain_numba.available():
        pytest.skip("numba is not installed")
    if request.param == "triton" and not triton_installed():
        pytest.skip("triton is not installed")
    monkeypatch.setattr(_chain_kernel, "backend_for", lambda scores: backend)
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
        entropy = -(probs * torch.where(probs > 0, scores - log_z, 0.0)).sum()  # -inf scores
        table = dict(zip(sequences, (scores - log_z).tolist(), strict=True))
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
def test_gradcheck(shape, algorithm):
    """In float64; Triton's interpreter is slow, so its kernels are checked in gradcheck's fast
    mode (the Jacobian's projections on random vectors, against finite differences)."""
    fast = algorithm == "triton"
    unary, transition = make_inputs(2, 4, 3, shape, seed=7)
    lengths = torch.tensor([4, 2])

    def log_partition(u, t):
        return LinearChainCRF(u, t, lengths).log_partition

    def marginals(u, t):
        crf = LinearChainCRF(u, t, lengths)
        return crf.marginals, crf.edge_marginals

    inputs = (unary.requires_grad_(), transition.requires_grad_())
    assert torch.autograd.gradcheck(log_partition, inputs, fast_mode=fast)
    assert torch.autograd.gradgradcheck(log_partition, inputs, fast_mode=fast)
    assert torch.autograd.gradcheck(marginals, inputs, fast_mode=fast)


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
            patch.setattr(_chain_kernel, "backend_for", lambda scores: None)
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
    torch.testing.assert_close(crf.marginals.double(), exact.marginals, atol=1e-6,
                               rtol=torch.finfo(result_dtype).eps)
    grads = torch.autograd.grad(crf.log_partition.sum(), (unary, transition))
    assert [g.dtype for g in grads] == [unary_dtype, transition_dtype]


# ---------------------------------------------------------------------- precision (issue 28)


def gapped_inputs(batch, steps, labels, scale, seed):
    """float64 scores ``scale * k + noise`` (integer ``k`` in [-2, 2], standard normal noise,
    per-position transitions): gaps of multiples of ``scale`` between groups of sequences
    (beyond the range of ``exp`` from scale 1e3 on, even in float64) and O(1) differences within
    the best group, so that the probabilities stay far from 0/1 at every scale."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape):
        integers = torch.randint(-2, 3, shape, generator=generator, dtype=torch.float64)
        return integers * scale + torch.randn(shape, generator=generator, dtype=torch.float64)

    return draw(batch, steps, labels), draw(batch, steps - 1, labels, labels)


def float32_tolerance(algorithm, scale, steps):
    """Absolute tolerance of probabilities (and entropies, gradients) computed in float32 against
    float64 ones. The compiled kernels work in float64 and round only their outputs. The torch
    algorithms add scores in float32: each addition of scores of size ``scale`` rounds by
    ``eps * scale``, which moves the log-probabilities by up to ``eps * scale * steps`` -- no
    float32 algorithm that adds the scores does better (the scores' own float32 spacing is
    ``eps * scale``)."""
    return 1e-6 if algorithm in COMPILED else 1e-6 + EPS32 * scale * steps


def with_gradients(unary, transition, lengths, results_of, weights_dtype=torch.float64):
    """``(results, gradients)``: log Z, marginals, edge marginals and entropy, and the gradient
    w.r.t. ``(unary, transition)`` of a weighted sum of them all. ``results_of`` is
    :func:`crf_results` or :func:`brute_force_results` (the float64 reference). The weights
    are rounded to ``weights_dtype``: autograd rounds the gradient of a half-precision result
    to half precision, so the reference must see the same (exactly representable) weights."""
    unary = unary.detach().clone().requires_grad_()
    transition = transition.detach().clone().requires_grad_()
    results = results_of(unary, transition, lengths)
    generator = torch.Generator().manual_seed(0)
    loss = sum((r.double() * torch.randn(r.shape, generator=generator, dtype=torch.float64)
                .to(weights_dtype).double()).sum() for r in results)
    return results, torch.autograd.grad(loss, (unary, transition))


def crf_results(unary, transition, lengths):
    crf = LinearChainCRF(unary, transition, lengths)
    return crf.log_partition, crf.marginals, crf.edge_marginals, crf.entropy


def brute_force_results(unary, transition, lengths):
    expected = brute_force(unary, transition, lengths)
    return tuple(torch.stack([e[name] for e in expected])
                 for name in ("log_z", "node", "edge", "entropy"))


def assert_best_sequence(crf, expected, tolerance):
    """``crf.argmax`` scores within ``tolerance`` of the best sequence (float32 rounding can
    swap near-ties)."""
    for b, e in enumerate(expected):
        assert e["log_prob"](crf.argmax[b].tolist()) >= e["log_prob"](e["best"].tolist()) \
            - tolerance


def test_score_gaps_beyond_the_exp_range_regression():
    """Issue 28: the compiled kernel rescaled each step without log alpha, so all weights
    underflowed to 0/0 here (NaN); the sequence (1, 0) scores 200, the others 0 or less."""
    crf = LinearChainCRF(torch.tensor([[[0.0, -800.0], [0.0, 0.0]]]),
                         torch.tensor([[0.0, 0.0], [1000.0, 0.0]]))
    torch.testing.assert_close(crf.marginals, torch.tensor([[[0.0, 1.0], [1.0, 0.0]]]))
    torch.testing.assert_close(crf.log_partition, torch.tensor([200.0]))
    assert crf.argmax.tolist() == [[1, 0]]


def test_entropy_with_forbidden_transitions_regression():
    """Issue 28: ``log Z - E[score]`` gave ``0 * -inf = NaN``. Label 1 never follows label 0:
    4 of the 8 sequences of length 3 remain, equally likely."""
    crf = LinearChainCRF(torch.zeros(1, 3, 2), torch.tensor([[0.0, -math.inf], [0.0, 0.0]]))
    torch.testing.assert_close(crf.entropy, torch.tensor([math.log(4.0)]))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_and_infinite_scores_are_not_hidden(bad):
    """A NaN or +inf score within a chain makes that chain's results NaN, not 0."""
    unary, transition = make_inputs(2, 4, 3, "shared", seed=47)
    unary[0, 2, 1] = bad
    crf = LinearChainCRF(unary, transition)
    for result in (crf.marginals, crf.edge_marginals, crf.entropy):
        assert result[0].isnan().all() and torch.isfinite(result[1]).all()


@pytest.mark.parametrize("scale", SCALES)
def test_float32_at_every_score_scale(algorithm, scale):
    """float32 log Z, marginals, edge marginals, entropy, argmax and gradients against the float64
    brute force, with score gaps up to 1e4 (2e4 per unary or transition)."""
    steps = 5
    unary, transition = gapped_inputs(4, steps, 3, scale, seed=int(math.log10(scale)))
    unary, transition = unary.float().double(), transition.float().double()  # same values
    lengths = torch.tensor([5, 3, 1, 4])
    got, got_grads = with_gradients(unary.float(), transition.float(), lengths, crf_results)
    expected, expected_grads = with_gradients(unary, transition, lengths, brute_force_results)
    tolerance = float32_tolerance(algorithm, scale, steps)
    for name, ours, exact in zip(("log Z", "marginals", "edge marginals", "entropy"), got,
                                 expected, strict=True):
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours.double(), exact, atol=tolerance, rtol=1e-5, msg=name)
    for ours, exact in zip(got_grads, expected_grads, strict=True):
        assert torch.isfinite(ours).all()
        torch.testing.assert_close(ours.double(), exact, atol=tolerance, rtol=1e-5)
    crf = LinearChainCRF(unary.float(), transition.float(), lengths)
    assert_best_sequence(crf, brute_force(unary, transition, lengths), EPS32 * scale * steps)


@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_minus_infinity_forbids_transitions(algorithm, scale):
    """``-inf`` transitions (no label twice in a row, never 0 -> 2) and a ``-inf`` unary score:
    probability exactly 0, finite entropy and gradients, an argmax that avoids them."""
    unary, transition = make_inputs(3, 5, 3, "batch", seed=37, scale=scale)
    transition[:, [0, 1, 2], [0, 1, 2]] = -math.inf
    transition[:, 0, 2] = -math.inf
    unary[0, 2, 1] = -math.inf
    lengths = torch.tensor([5, 2, 1])
    got, got_grads = with_gradients(unary.float(), transition.float(), lengths, crf_results)
    expected, expected_grads = with_gradients(unary, transition, lengths, brute_force_results)
    tolerance = float32_tolerance(algorithm, scale, 5)
    for ours, exact in zip(got, expected, strict=True):
        torch.testing.assert_close(ours.double(), exact, atol=tolerance, rtol=1e-5)
    edges = got[2]
    assert torch.all(edges[..., [0, 1, 2], [0, 1, 2]] == 0) and torch.all(edges[..., 0, 2] == 0)
    assert torch.all(got[1][0, 2, 1] == 0)
    for ours, exact in zip(got_grads, expected_grads, strict=True):
        assert torch.isfinite(ours).all()
        torch.testing.assert_close(ours.double(), exact, atol=tolerance, rtol=1e-5)
    best = LinearChainCRF(unary.float(), transition.float(), lengths).argmax
    assert torch.isfinite(LinearChainCRF(unary, transition, lengths).log_prob(best)).all()


@pytest.mark.parametrize("dtype,scale", [(torch.bfloat16, 1.0), (torch.bfloat16, 1e4),
                                         (torch.float16, 1.0), (torch.float16, 1e3)])
def test_half_precision_is_computed_in_float32(algorithm, dtype, scale):
    """Half-precision scores give half-precision results and gradients that match float64
    (on the same half-precision values) up to the rounding of the outputs."""
    steps = 5
    unary, transition = gapped_inputs(4, steps, 3, scale, seed=41)
    unary, transition = unary.to(dtype), transition.to(dtype)
    lengths = torch.tensor([5, 4, 1, 2])
    got, got_grads = with_gradients(unary, transition, lengths, crf_results, dtype)
    expected, expected_grads = with_gradients(unary.double(), transition.double(), lengths,
                                              crf_results, dtype)
    tolerance = dict(atol=float32_tolerance(algorithm, scale, steps),
                     rtol=torch.finfo(dtype).eps)
    for ours, exact in zip((*got, *got_grads), (*expected, *expected_grads), strict=True):
        assert ours.dtype == dtype
        torch.testing.assert_close(ours.double(), exact, **tolerance)
    crf = LinearChainCRF(unary, transition, lengths)
    assert_best_sequence(crf, brute_force(unary.double(), transition.double(), lengths),
                         EPS32 * scale * steps)


def test_autocast_bfloat16_unary_with_a_float32_transition(algorithm):
    """Under ``torch.autocast`` a Linear layer gives bfloat16 unary scores while the transition
    parameter stays float32: results are float32 and match float64, gradients reach both."""
    generator = torch.Generator().manual_seed(43)
    features = torch.randn(3, 6, 8, generator=generator)
    layer = torch.nn.Linear(8, 4)
    transition = torch.nn.Parameter(torch.randn(4, 4, generator=generator))
    lengths = torch.tensor([6, 2, 5])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        unary = layer(features)
        crf = LinearChainCRF(unary, transition, lengths)
        results = crf.log_partition, crf.marginals, crf.edge_marginals, crf.entropy
    assert unary.dtype == torch.bfloat16
    exact = crf_results(unary.detach().double(), transition.detach().double(), lengths)
    for ours, reference in zip(results, exact, strict=True):
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours.double(), reference, atol=1e-5, rtol=1e-5)
    sum(r.sum() for r in results).backward()
    assert transition.grad.dtype == torch.float32 and torch.isfinite(transition.grad).all()
    assert torch.isfinite(layer.weight.grad).all()
