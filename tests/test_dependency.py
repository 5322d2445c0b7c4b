"""DependencyCRF against an independent brute-force enumeration of projective trees, its
gradients, masking, float32 stability and input validation. Every test runs through both
algorithms: the compiled inside-outside (numba) and, with it switched off, the torch inside pass
differentiated by autograd."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch

from lit_structattn.structured import _eisner_kernel
from lit_structattn.structured.dependency import DependencyCRF

ROOTS = [True, False]


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
    """Per sentence: log Z, marginals ``[N+1, N+1]``, the best head vector, and a dict from head
    tuples to log-probabilities."""
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
        log_probs = {t: float(s - log_z) for t, s in zip(trees, scores, strict=True)}
        results.append(dict(log_z=log_z, marginals=marginals, best=best, log_probs=log_probs))
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


@pytest.mark.parametrize("multiroot", ROOTS)
def test_gradcheck(multiroot):
    arcs = random_arcs(2, 4, seed=5).requires_grad_()
    lengths = torch.tensor([4, 3])

    def log_partition(x):
        return DependencyCRF(x, lengths, multiroot=multiroot).log_partition

    def marginals(x):
        return DependencyCRF(x, lengths, multiroot=multiroot).marginals

    assert torch.autograd.gradcheck(log_partition, (arcs,))
    assert torch.autograd.gradgradcheck(log_partition, (arcs,))
    assert torch.autograd.gradcheck(marginals, (arcs,))


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
        marginals, log_z = inside.marginals, inside.log_partition
    plain = DependencyCRF(arcs, lengths)
    for result in (marginals, log_z, plain.marginals, plain.log_partition):
        assert not result.requires_grad
    torch.testing.assert_close(marginals, reference.marginals.detach())
    assert reference.marginals.requires_grad and reference.log_partition.requires_grad


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


def test_sentences_beyond_the_kernels_range_fall_back_exactly(monkeypatch):
    """One arc 2000 nats above all others: every tree weighs exp(-2000 * k) relative to it, so
    the kernel's probability-space chart underflows; the log-space pass answers instead."""
    arcs = torch.full((1, 6, 6), -1000.0, dtype=torch.float64)
    arcs[0, 0, 3] = 1000.0
    arcs = arcs + random_arcs(1, 5, seed=11)
    lengths = torch.tensor([5])
    _, _, _, ok = _eisner_kernel.run(arcs, None, lengths, True)
    assert not ok.any() or not _eisner_kernel.available()
    source = arcs.clone().requires_grad_()
    crf = DependencyCRF(source, lengths)
    (crf.marginals * arcs.sin()).sum().backward()
    monkeypatch.setattr(_eisner_kernel, "usable", lambda scores: False)
    reference_source = arcs.clone().requires_grad_()
    reference = DependencyCRF(reference_source, lengths)
    (reference.marginals * arcs.sin()).sum().backward()
    torch.testing.assert_close(crf.marginals, reference.marginals)
    torch.testing.assert_close(source.grad, reference_source.grad)


def test_autocast_and_half_precision():
    """bfloat16 scores are computed in float32: returned in bfloat16 outside autocast, in
    float32 under it; gradients reach the scores in their dtype."""
    arcs = random_arcs(2, 6, seed=12, dtype=torch.float32, scale=2.0).bfloat16()
    exact = DependencyCRF(arcs.double())
    plain = DependencyCRF(arcs)
    assert plain.marginals.dtype == plain.log_partition.dtype == torch.bfloat16
    torch.testing.assert_close(plain.marginals.double(), exact.marginals, atol=4e-3, rtol=0)
    source = arcs.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        crf = DependencyCRF(source)
        marginals = crf.marginals
    assert marginals.dtype == crf.log_partition.dtype == torch.float32
    torch.testing.assert_close(marginals.double(), exact.marginals, atol=1e-5, rtol=0)
    (grad,) = torch.autograd.grad((marginals * exact.marginals.float()).sum(), source)
    assert grad.dtype == torch.bfloat16 and torch.isfinite(grad).all()
