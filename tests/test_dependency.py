"""DependencyCRF against an independent brute-force enumeration of projective trees (log Z,
marginals, argmax, log-probabilities, entropy), its gradients, masking, input validation, and
precision: float32 at score scales 1 to 1e4 (the kernel's float64 fallback included), ``-inf``
arcs, half precision and autocast against float64 references. Every test runs through both
algorithms: the compiled inside-outside (numba) and, with it switched off, the torch inside pass
differentiated by autograd (and, for the entropy, run in the entropy semiring)."""

from __future__ import annotations

import functools
import itertools
import math

import pytest
import torch

from lit_structattn.structured import _eisner_kernel
from lit_structattn.structured.dependency import DependencyCRF

ROOTS = [True, False]
SCALES = [1.0, 10.0, 100.0, 1e3, 1e4]
EPS32 = torch.finfo(torch.float32).eps


@pytest.fixture(params=["compiled", "autograd"], autouse=True)
def algorithm(request, monkeypatch):
    """Force the compiled kernel or the torch inside pass for the whole test."""
    if request.param == "compiled" and not _eisner_kernel.available():
        pytest.skip("numba is not installed")
    if request.param == "autograd":
        monkeypatch.setattr(_eisner_kernel, "usable", lambda scores: False)
    return request.param


def is_tree(heads: tuple[int, ...]) -> bool:
    """``heads[m - 1]`` is the head of word ``m``; True if every word reaches the root 0."""
    for word in range(1, len(heads) + 1):
        seen, node = set(), word
        while node != 0:
            if node in seen:
                return False
            seen.add(node)
            node = heads[node - 1]
    return True


def is_projective(heads: tuple[int, ...]) -> bool:
    """No crossing arcs: every word strictly between a head and its modifier descends from the
    head."""

    def descends(word: int, ancestor: int) -> bool:
        while word != 0:
            word = heads[word - 1]
            if word == ancestor:
                return True
        return False

    for modifier, head in enumerate(heads, start=1):
        low, high = sorted((head, modifier))
        if not all(descends(w, head) for w in range(low + 1, high)):
            return False
    return True


@functools.cache
def projective_trees(words: int, multiroot: bool) -> list[tuple[int, ...]]:
    """All head vectors of ``words`` words that are projective trees, by filtering all
    ``words ** words`` candidate vectors."""
    choices = [[h for h in range(words + 1) if h != m] for m in range(1, words + 1)]
    trees = [h for h in itertools.product(*choices) if is_tree(h) and is_projective(h)]
    return [h for h in trees if multiroot or h.count(0) == 1]


def brute_force(arcs: torch.Tensor, lengths: torch.Tensor, multiroot: bool):
    """Per sentence: log Z, marginals ``[N+1, N+1]``, the best head vector, the entropy, and a
    dict from head tuples to log-probabilities."""
    size = arcs.shape[-1]
    results = []
    for b, words in enumerate(lengths.tolist()):
        trees = projective_trees(words, multiroot)
        modifiers = torch.arange(1, words + 1)
        scores = torch.stack([arcs[b, torch.tensor(t), modifiers].sum() for t in trees])
        log_z = scores.logsumexp(0)
        marginals = torch.zeros(size, size, dtype=arcs.dtype)
        for tree, p in zip(trees, (scores - log_z).exp(), strict=True):
            marginals[torch.tensor(tree), modifiers] += p
        best = torch.zeros(size, dtype=torch.long)
        best[1 : words + 1] = torch.tensor(trees[int(scores.argmax())])
        log_probs = dict(zip(trees, (scores - log_z).tolist(), strict=True))
        probs = (scores - log_z).exp()
        entropy = -(probs * torch.where(probs > 0, scores - log_z, 0.0)).sum()  # -inf scores
        results.append(dict(log_z=log_z, marginals=marginals, best=best, log_probs=log_probs,
                            entropy=entropy))
    return results


def random_arcs(batch, words, seed, dtype=torch.float64, scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, words + 1, words + 1, generator=generator, dtype=dtype) * scale


def test_enumerator_counts():
    """Known counts of projective trees over n words: C(3n, n) / (2n + 1) (OEIS A001764,
    shifted) when the root may have several children, C(3n - 2, n - 1) / n (A006013) with a
    single root child."""
    assert [len(projective_trees(n, True)) for n in range(1, 6)] == [1, 3, 12, 55, 273]
    assert [len(projective_trees(n, False)) for n in range(1, 6)] == [1, 2, 7, 30, 143]


@pytest.mark.parametrize("multiroot", ROOTS)
@pytest.mark.parametrize("seed", [0, 1])
def test_against_brute_force(multiroot, seed):
    lengths = torch.tensor([5, 3, 1, 4, 2])
    arcs = random_arcs(len(lengths), 5, seed, scale=2.0)
    crf = DependencyCRF(arcs, lengths, multiroot=multiroot)
    expected = brute_force(arcs, lengths, multiroot)
    torch.testing.assert_close(crf.log_partition, torch.stack([e["log_z"] for e in expected]))
    torch.testing.assert_close(crf.marginals, torch.stack([e["marginals"] for e in expected]))
    torch.testing.assert_close(crf.entropy, torch.stack([e["entropy"] for e in expected]))
    assert crf.argmax.dtype == torch.long
    assert torch.equal(crf.argmax, torch.stack([e["best"] for e in expected]))
    heads = torch.full((len(lengths), 6), 7)  # ignored outside the sentences
    chosen = []
    for b, e in enumerate(expected):
        tree = list(e["log_probs"])[(seed * 7 + b) % len(e["log_probs"])]
        heads[b, 1 : len(tree) + 1] = torch.tensor(tree)
        chosen.append(e["log_probs"][tree])
    torch.testing.assert_close(crf.log_prob(heads), torch.tensor(chosen, dtype=arcs.dtype))


@pytest.mark.parametrize("multiroot", ROOTS)
def test_columns_sum_to_one_and_non_arcs_are_zero(multiroot):
    lengths = torch.tensor([7, 4, 1])
    crf = DependencyCRF(random_arcs(3, 7, seed=2), lengths, multiroot=multiroot)
    positions = torch.arange(8)
    words = (positions >= 1) & (positions <= lengths[:, None])
    torch.testing.assert_close(crf.marginals.sum(1), words.double())
    inside = positions <= lengths[:, None]
    arc = inside[:, :, None] & words[:, None, :] & (positions[:, None] != positions[None, :])
    assert torch.all(crf.marginals[~arc] == 0)
    assert torch.all(crf.argmax[~words] == 0)
    if not multiroot:
        torch.testing.assert_close(crf.marginals[:, 0].sum(-1), torch.ones(3, dtype=torch.double))


@pytest.mark.parametrize("multiroot", ROOTS)
def test_garbage_in_ignored_entries_changes_nothing(multiroot):
    lengths = torch.tensor([6, 3, 1])
    arcs = random_arcs(3, 6, seed=3)
    dirty = arcs.clone()
    dirty[:, torch.arange(7), torch.arange(7)] = 1e30  # diagonal
    dirty[:, :, 0] = -1e30  # arcs into the root
    dirty[1, 4:, :] = 3e4  # rows and columns beyond the length
    dirty[1, :, 4:] = -2e4
    dirty[2, 2:, :] = 1e6
    dirty[2, :, 2:] = 1e6
    clean = DependencyCRF(arcs, lengths, multiroot=multiroot)
    noisy = DependencyCRF(dirty.requires_grad_(), lengths, multiroot=multiroot)
    torch.testing.assert_close(noisy.log_partition, clean.log_partition)
    torch.testing.assert_close(noisy.marginals, clean.marginals)
    torch.testing.assert_close(noisy.entropy, clean.entropy)
    assert torch.equal(noisy.argmax, clean.argmax)
    torch.testing.assert_close(noisy.log_prob(clean.argmax), clean.log_prob(clean.argmax))
    (grad,) = torch.autograd.grad((noisy.marginals * torch.randn_like(arcs)).sum(), dirty)
    assert torch.isfinite(grad).all()
    assert torch.all(grad[clean.marginals == 0] == 0)


@pytest.mark.parametrize("multiroot", ROOTS)
def test_masking_invariance(multiroot):
    lengths = torch.tensor([9, 5, 1, 2])
    arcs = random_arcs(4, 9, seed=4)
    crf = DependencyCRF(arcs, lengths, multiroot=multiroot)
    for b, words in enumerate(lengths.tolist()):
        alone = DependencyCRF(arcs[b : b + 1, : words + 1, : words + 1], multiroot=multiroot)
        torch.testing.assert_close(crf.log_partition[b : b + 1], alone.log_partition)
        torch.testing.assert_close(crf.marginals[b : b + 1, : words + 1, : words + 1],
                                   alone.marginals)
        assert torch.equal(crf.argmax[b : b + 1, : words + 1], alone.argmax)
        torch.testing.assert_close(crf.entropy[b : b + 1], alone.entropy)


@pytest.mark.parametrize("multiroot", ROOTS)
def test_gradcheck(multiroot):
    arcs = random_arcs(2, 4, seed=5).requires_grad_()
    lengths = torch.tensor([4, 3])

    def log_partition(x):
        return DependencyCRF(x, lengths, multiroot=multiroot).log_partition

    def marginals(x):
        return DependencyCRF(x, lengths, multiroot=multiroot).marginals

    def entropy(x):
        return DependencyCRF(x, lengths, multiroot=multiroot).entropy

    assert torch.autograd.gradcheck(log_partition, (arcs,))
    assert torch.autograd.gradgradcheck(log_partition, (arcs,))
    assert torch.autograd.gradcheck(marginals, (arcs,))
    assert torch.autograd.gradcheck(entropy, (arcs,))
    forbidden = arcs.detach().clone()
    forbidden[:, 0, 2:] = -math.inf  # only word 1 may attach to the root
    assert torch.autograd.gradcheck(entropy, (forbidden.requires_grad_(),))


@pytest.mark.parametrize("multiroot", ROOTS)
def test_marginals_are_the_gradient_of_log_partition(multiroot):
    arcs = random_arcs(3, 6, seed=6).requires_grad_()
    crf = DependencyCRF(arcs, torch.tensor([6, 2, 5]), multiroot=multiroot)
    (grad,) = torch.autograd.grad(crf.log_partition.sum(), arcs)
    torch.testing.assert_close(crf.marginals, grad)


def test_without_grad():
    arcs = random_arcs(2, 5, seed=7)
    lengths = torch.tensor([5, 3])
    reference = DependencyCRF(arcs.clone().requires_grad_(), lengths)
    with torch.no_grad():
        inside = DependencyCRF(arcs.clone().requires_grad_(), lengths)
        marginals, log_z, entropy = inside.marginals, inside.log_partition, inside.entropy
    plain = DependencyCRF(arcs, lengths)
    for result in (marginals, log_z, entropy, plain.marginals, plain.log_partition,
                   plain.entropy):
        assert not result.requires_grad
    torch.testing.assert_close(marginals, reference.marginals.detach())
    torch.testing.assert_close(entropy, reference.entropy.detach())
    assert reference.marginals.requires_grad and reference.log_partition.requires_grad
    assert reference.entropy.requires_grad


@pytest.mark.parametrize("multiroot", ROOTS)
def test_float32_long_sentence_is_stable(multiroot):
    lengths = torch.tensor([60, 47, 1])
    arcs = random_arcs(3, 60, seed=8, dtype=torch.float32, scale=10.0)
    crf = DependencyCRF(arcs, lengths, multiroot=multiroot)
    exact = DependencyCRF(arcs.double(), lengths, multiroot=multiroot)
    assert torch.isfinite(crf.log_partition).all() and torch.isfinite(crf.marginals).all()
    words = (torch.arange(61) >= 1) & (torch.arange(61) <= lengths[:, None])
    torch.testing.assert_close(crf.marginals.sum(1), words.float(), atol=1e-4, rtol=0)
    torch.testing.assert_close(crf.marginals.double(), exact.marginals, atol=2e-3, rtol=0)
    assert torch.equal(crf.argmax, exact.argmax)


@pytest.mark.parametrize("multiroot", ROOTS)
@pytest.mark.parametrize("scale", [0.0, 1.0])
def test_argmax_is_one_valid_tree(multiroot, scale):
    """Also with all scores tied (scale 0): one tree, never a mixture of several."""
    lengths = torch.tensor([30, 12, 1])
    crf = DependencyCRF(random_arcs(3, 30, seed=9, scale=scale), lengths, multiroot=multiroot)
    for b, words in enumerate(lengths.tolist()):
        heads = tuple(crf.argmax[b, 1 : words + 1].tolist())
        assert is_tree(heads) and is_projective(heads)
        assert multiroot or heads.count(0) == 1
    torch.testing.assert_close(crf.marginals.sum(1)[:, 1:].sum(-1), lengths.double())


@pytest.mark.parametrize(
    "arcs,lengths,message",
    [
        (torch.zeros(3, 3), None, "3 dimensions"),
        (torch.zeros(2, 3, 3, dtype=torch.long), None, "floating"),
        (torch.zeros(2, 3, 4), None, r"\[B, N\+1, N\+1\]"),
        (torch.zeros(2, 1, 1), None, "N >= 1"),
        (torch.zeros(2, 4, 4), torch.tensor([3, 0]), r"\[1, 3\]"),
        (torch.zeros(2, 4, 4), torch.tensor([4, 1]), r"\[1, 3\]"),
        (torch.zeros(2, 4, 4), torch.tensor([3, 1], dtype=torch.float32), "integer"),
        (torch.zeros(2, 4, 4), torch.tensor([[3, 1]]), "shape"),
    ],
)
def test_invalid_inputs(arcs, lengths, message):
    with pytest.raises(ValueError, match=message):
        DependencyCRF(arcs, lengths)


def test_invalid_heads():
    crf = DependencyCRF(torch.zeros(2, 4, 4), torch.tensor([3, 1]))
    with pytest.raises(ValueError, match="head"):
        crf.log_prob(torch.tensor([[0, 1, 1, 2], [0, 0, 0, 0]]))  # word 1 heads itself
    with pytest.raises(ValueError, match="head"):
        crf.log_prob(torch.tensor([[0, 0, 1, 2], [0, 2, 0, 0]]))  # head beyond the length
    with pytest.raises(ValueError, match="shape"):
        crf.log_prob(torch.zeros(2, 3, dtype=torch.long))


# ---------------------------------------------------------------------- precision (issue 28)


def gapped_arcs(batch, words, scale, seed):
    """float64 arc scores ``scale * k + noise`` (integer ``k`` in [-2, 2], standard normal
    noise): gaps of multiples of ``scale`` between groups of trees (beyond the range of ``exp``
    from scale 1e3 on, even in float64) and O(1) differences within the best group."""
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, words + 1, words + 1)
    integers = torch.randint(-2, 3, shape, generator=generator, dtype=torch.float64)
    return integers * scale + torch.randn(shape, generator=generator, dtype=torch.float64)


def float32_tolerance(algorithm, scale, words):
    """Absolute tolerance of float32 marginals and gradients against float64 ones: the compiled
    kernel (and its log-space fallback) works in float64; the torch inside pass adds scores in
    float32, each addition rounding by ``eps * scale``, which moves log-probabilities by up to
    ``eps * scale * words`` (the scores' own float32 spacing is ``eps * scale``)."""
    return 1e-6 if algorithm == "compiled" else 1e-6 + EPS32 * scale * words


def crf_results(arcs, lengths, multiroot):
    crf = DependencyCRF(arcs, lengths, multiroot=multiroot)
    return crf.log_partition, crf.marginals, crf.entropy


def brute_force_results(arcs, lengths, multiroot):
    expected = brute_force(arcs, lengths, multiroot)
    return tuple(torch.stack([e[name] for e in expected])
                 for name in ("log_z", "marginals", "entropy"))


def with_gradients(arcs, lengths, multiroot, results_of, weights_dtype=torch.float64):
    """``(results, gradient)``: log Z, marginals and entropy from ``results_of``
    (:func:`crf_results` or the float64 :func:`brute_force_results`) and the gradient w.r.t.
    ``arcs`` of a weighted sum of them all, the weights rounded to ``weights_dtype`` (autograd
    rounds the gradient of a half-precision result to half precision: the reference must see
    the same weights)."""
    arcs = arcs.detach().clone().requires_grad_()
    results = results_of(arcs, lengths, multiroot)
    generator = torch.Generator().manual_seed(0)
    loss = sum((r.double() * torch.randn(r.shape, generator=generator, dtype=torch.float64)
                .to(weights_dtype).double()).sum() for r in results)
    (grad,) = torch.autograd.grad(loss, arcs)
    return results, grad


def assert_best_tree(crf, expected, tolerance):
    """``crf.argmax`` scores within ``tolerance`` of the best tree (float32 rounding can swap
    near-ties)."""
    for b, e in enumerate(expected):
        words = len(next(iter(e["log_probs"])))
        heads = tuple(crf.argmax[b, 1 : words + 1].tolist())
        assert e["log_probs"][heads] >= max(e["log_probs"].values()) - tolerance


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_and_infinite_scores_are_not_hidden(bad):
    """A NaN or +inf arc score within a sentence makes all its marginals and its entropy NaN,
    not 0."""
    arcs = random_arcs(2, 4, seed=23)
    arcs[0, 1, 2] = bad
    crf = DependencyCRF(arcs)
    assert crf.marginals[0].isnan().all() and torch.isfinite(crf.marginals[1]).all()
    assert crf.entropy[0].isnan() and torch.isfinite(crf.entropy[1])


@pytest.mark.parametrize("multiroot", ROOTS)
@pytest.mark.parametrize("scale", SCALES)
def test_float32_at_every_score_scale(algorithm, multiroot, scale):
    """float32 log Z, marginals, entropy, argmax and gradients against the float64 brute force,
    with score gaps up to 1e4 (the compiled kernel hands the sentences it cannot scale to its
    float64 log-space fallback, row by row). The entropy stays exact: no ``log Z - E[score]``
    in float32, whose rounding at 1e4 is some 1e-3 (compiled) to 20 nats (torch pass)."""
    words = 4
    arcs = gapped_arcs(4, words, scale, seed=int(math.log10(scale))).float()
    lengths = torch.tensor([4, 3, 1, 2])
    got, got_grad = with_gradients(arcs, lengths, multiroot, crf_results)
    expected, expected_grad = with_gradients(arcs.double(), lengths, multiroot,
                                             brute_force_results)
    tolerance = float32_tolerance(algorithm, scale, words)
    for ours, exact in zip((*got, got_grad), (*expected, expected_grad), strict=True):
        assert ours.dtype == torch.float32 and torch.isfinite(ours).all()
        torch.testing.assert_close(ours.double(), exact, atol=tolerance, rtol=1e-5)
    assert_best_tree(DependencyCRF(arcs, lengths, multiroot=multiroot),
                     brute_force(arcs.double(), lengths, multiroot), EPS32 * scale * words)


def test_sentences_beyond_the_kernels_range_fall_back_exactly():
    """Words 1 and 2 prefer each other as heads by 2000 nats, which no tree allows: every tree
    weighs at most exp(-2000) against the per-word best heads, beyond the kernel's probability
    space. That sentence is solved in log space (float64), its neighbour by the kernel."""
    arcs = random_arcs(2, 5, seed=11)
    arcs[0] -= 1000.0
    arcs[0, 1, 2] = arcs[0, 2, 1] = 1000.0
    lengths = torch.tensor([5, 4])
    _, _, _, ok = _eisner_kernel.run(arcs, None, lengths, True)
    assert ok.tolist() == [False, True] or not _eisner_kernel.available()
    got, got_grad = with_gradients(arcs, lengths, True, crf_results)
    expected, expected_grad = with_gradients(arcs, lengths, True, brute_force_results)
    for ours, exact in zip((*got, got_grad), (*expected, expected_grad), strict=True):
        torch.testing.assert_close(ours, exact)


@pytest.mark.parametrize("multiroot", ROOTS)
def test_minus_infinity_forbids_arcs(algorithm, multiroot):
    """``-inf`` arcs (only word 1 may attach to the root; no arc 3 -> 4): probability exactly 0,
    finite entropy and gradients, an argmax that avoids them."""
    arcs = random_arcs(3, 5, seed=13, scale=3.0)
    arcs[:, 0, 2:] = -math.inf
    arcs[:, 3, 4] = -math.inf
    lengths = torch.tensor([5, 4, 1])
    got, got_grad = with_gradients(arcs.float(), lengths, multiroot, crf_results)
    expected, expected_grad = with_gradients(arcs, lengths, multiroot, brute_force_results)
    tolerance = float32_tolerance(algorithm, 3.0, 5)
    for ours, exact in zip((*got, got_grad), (*expected, expected_grad), strict=True):
        assert torch.isfinite(ours).all()
        torch.testing.assert_close(ours.double(), exact, atol=tolerance, rtol=1e-5)
    marginals = got[1]
    assert torch.all(marginals[:, 0, 2:] == 0) and torch.all(marginals[:, 3, 4] == 0)
    heads = DependencyCRF(arcs.float(), lengths, multiroot=multiroot).argmax
    words = (torch.arange(6) >= 2) & (torch.arange(6) <= lengths[:, None])
    assert torch.all(heads[words] != 0) and heads[0, 4] != 3 and heads[1, 4] != 3


@pytest.mark.parametrize("dtype,scale", [(torch.bfloat16, 1.0), (torch.bfloat16, 1e4),
                                         (torch.float16, 1.0), (torch.float16, 1e3)])
def test_half_precision_is_computed_in_float32(algorithm, dtype, scale):
    """Half-precision arc scores give half-precision log Z, head marginals, entropy and gradients
    that match float64 (on the same half-precision values) up to the rounding of the outputs."""
    words = 5
    arcs = gapped_arcs(3, words, scale, seed=17).to(dtype)
    lengths = torch.tensor([5, 3, 1])
    got, got_grad = with_gradients(arcs, lengths, True, crf_results, dtype)
    expected, expected_grad = with_gradients(arcs.double(), lengths, True, crf_results, dtype)
    tolerance = dict(atol=float32_tolerance(algorithm, scale, words), rtol=torch.finfo(dtype).eps)
    for ours, exact in zip((*got, got_grad), (*expected, expected_grad), strict=True):
        assert ours.dtype == dtype
        torch.testing.assert_close(ours.double(), exact, **tolerance)
    assert_best_tree(DependencyCRF(arcs, lengths), brute_force(arcs.double(), lengths, True),
                     EPS32 * scale * words)


def test_autocast_gives_float32(algorithm):
    """Under ``torch.autocast`` bfloat16 arc scores (as a Linear layer gives) are computed and
    returned in float32; the gradient reaches the scores in bfloat16."""
    arcs = random_arcs(2, 6, seed=19, dtype=torch.float32, scale=2.0).bfloat16()
    source = arcs.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        crf = DependencyCRF(source, torch.tensor([6, 4]))
        results = crf.log_partition, crf.marginals, crf.entropy
    exact = crf_results(arcs.double(), torch.tensor([6, 4]), True)
    for ours, reference in zip(results, exact, strict=True):
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours.double(), reference, atol=1e-5, rtol=1e-5)
    (grad,) = torch.autograd.grad(sum(r.sum() for r in results), source)
    assert grad.dtype == torch.bfloat16 and torch.isfinite(grad).all()


# ---------------------------------------------------------------------- entropy (issue 46)


@pytest.mark.parametrize("multiroot", ROOTS)
def test_entropy_of_uniform_trees_with_forbidden_arcs(algorithm, multiroot):
    """All allowed trees score 0, so the entropy is the log of their number: no ``0 * -inf``
    NaN from the forbidden arcs, in the value or the gradient (float32 and float64)."""
    words = 4
    arcs = torch.zeros(1, words + 1, words + 1, dtype=torch.float64)
    forbidden = [(0, 3), (2, 1), (4, 3)]
    for head, modifier in forbidden:
        arcs[0, head, modifier] = -math.inf
    allowed = [tree for tree in projective_trees(words, multiroot)
               if not any(tree[m - 1] == h for h, m in forbidden)]
    for dtype in (torch.float32, torch.float64):
        source = arcs.to(dtype).requires_grad_()
        entropy = DependencyCRF(source, multiroot=multiroot).entropy
        torch.testing.assert_close(entropy, torch.tensor([math.log(len(allowed))], dtype=dtype))
        (grad,) = torch.autograd.grad(entropy.sum(), source)
        assert torch.isfinite(grad).all()
        assert torch.all(grad[0, [h for h, _ in forbidden], [m for _, m in forbidden]] == 0)


@pytest.mark.parametrize("multiroot", ROOTS)
def test_entropy_is_differentiable_where_the_marginals_are(multiroot):
    """The entropy's gradient is ``-Cov(1_arc, score)``: against the brute force, and zero
    for a sentence with a single tree (one word)."""
    arcs = random_arcs(3, 4, seed=29, scale=2.0)
    lengths = torch.tensor([4, 1, 3])
    source = arcs.clone().requires_grad_()
    (grad,) = torch.autograd.grad(
        DependencyCRF(source, lengths, multiroot=multiroot).entropy.sum(), source)
    reference = arcs.clone().requires_grad_()
    expected = torch.stack([e["entropy"] for e in brute_force(reference, lengths, multiroot)])
    (expected_grad,) = torch.autograd.grad(expected.sum(), reference)
    torch.testing.assert_close(grad, expected_grad)
    assert torch.all(grad[1] == 0)
