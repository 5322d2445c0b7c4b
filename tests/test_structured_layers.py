"""The structured attention layers: segmentation, chain and syntactic attention."""

from __future__ import annotations

import itertools

import pytest
import torch

from lit_structattn.layers.chain_over_facts import ChainAttention
from lit_structattn.layers.segmentation import SegmentationAttention
from lit_structattn.layers.syntactic import SyntacticAttention
from lit_structattn.structured import (
    DependencyCRF,
    LinearChainCRF,
    _chain_kernel,
    _chain_numba,
    _chain_triton,
)


def brute_force_selection_marginals(unary1: torch.Tensor, pairwise: torch.Tensor) -> torch.Tensor:
    """p(z_i = 1) of a 2-state chain by enumerating all 2^L assignments (``unary1 [L]``)."""
    length = unary1.shape[0]
    scores, assignments = [], []
    for z in itertools.product([0, 1], repeat=length):
        z_t = torch.tensor(z)
        score = (unary1 * z_t).sum() + sum(pairwise[z[i], z[i + 1]] for i in range(length - 1))
        scores.append(score)
        assignments.append(z_t.to(unary1.dtype))
    probs = torch.softmax(torch.stack(scores), 0)
    return (probs[:, None] * torch.stack(assignments)).sum(0)


def test_segmentation_marginals_match_enumeration_and_normalize():
    torch.manual_seed(0)
    layer = SegmentationAttention(6, 5, lam=2.0).double()
    with torch.no_grad():
        layer.pairwise.copy_(torch.randn(2, 2, dtype=torch.float64))
    query = torch.randn(3, 2, 6, dtype=torch.float64)
    keys = torch.randn(3, 5, 5, dtype=torch.float64)
    lengths = torch.tensor([5, 3, 1])
    mask = torch.arange(5)[None, :] < lengths[:, None]
    marginals = layer.marginals(query, keys, mask)
    scores = layer.scorer(query, keys)
    for b, t in itertools.product(range(3), range(2)):
        n = int(lengths[b])
        expected = brute_force_selection_marginals(scores[b, t, :n], layer.pairwise.detach())
        torch.testing.assert_close(marginals[b, t, :n], expected)
        assert (marginals[b, t, n:] == 0).all()
    context, weights = layer(query, keys, mask=mask)
    torch.testing.assert_close(weights.sum(-1), torch.full((3, 2), 2.0, dtype=torch.float64))
    assert context.shape == (3, 2, 5)
    single_context, single_weights = layer(query[:, 0], keys, mask=mask)
    torch.testing.assert_close(single_weights, weights[:, 0])


def test_segmentation_trains_and_penalizes_pairwise():
    torch.manual_seed(0)
    layer = SegmentationAttention(4, 4)
    with torch.no_grad():
        layer.pairwise.fill_(1.0)
    assert layer.penalty().item() == pytest.approx(0.005 * 4)
    query, keys = torch.randn(8, 4), torch.randn(8, 6, 4)
    target = torch.randn(8, 4)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.05)
    losses = []
    for _ in range(40):
        context, _ = layer(query, keys)
        loss = (context - target).pow(2).mean() + layer.penalty()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_chain_attention_forbids_repeats_and_padded_slots():
    torch.manual_seed(0)
    unary = torch.randn(2, 3, 5, dtype=torch.float64)
    pairwise = torch.randn(2, 2, 5, 5, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    out = ChainAttention(forbid_repeat=True)(unary, pairwise, mask)
    torch.testing.assert_close(out.marginals.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    assert out.marginals[1, :, 3:].abs().max() < 1e-12
    assert torch.diagonal(out.edge_marginals, dim1=-2, dim2=-1).abs().max() < 1e-12
    assert (out.argmax[:, 1:] != out.argmax[:, :-1]).all()
    assert (out.argmax[1] < 3).all()
    # Brute force over all slot sequences of the first example.
    scores = {}
    for z in itertools.product(range(5), repeat=3):
        if z[0] == z[1] or z[1] == z[2]:
            continue
        scores[z] = sum(unary[0, k, z[k]] for k in range(3)) + sum(
            pairwise[0, k, z[k], z[k + 1]] for k in range(2)
        )
    probs = torch.softmax(torch.stack(list(scores.values())), 0)
    expected = torch.zeros(3, 5, dtype=torch.float64)
    for p, z in zip(probs, scores, strict=True):
        for k in range(3):
            expected[k, z[k]] += p
    torch.testing.assert_close(out.marginals[0], expected)
    assert tuple(out.argmax[0].tolist()) == max(scores, key=scores.get)


@pytest.mark.parametrize("mode", ["structured", "simple"])
def test_syntactic_attention_soft_parents(mode):
    torch.manual_seed(0)
    layer = SyntacticAttention(6, 5, mode=mode).double().eval()
    words = torch.randn(3, 4, 6, dtype=torch.float64)
    lengths = torch.tensor([4, 2, 1])
    out = layer(words, lengths)
    assert out.parents.shape == (3, 4, 6) and out.children.shape == (3, 4, 6)
    for b in range(3):
        n = int(lengths[b])
        column_sums = out.marginals[b, :, 1 : n + 1].sum(0)
        torch.testing.assert_close(column_sums, torch.ones(n, dtype=torch.float64))
        assert out.marginals[b, :, n + 1 :].abs().sum() == 0
        assert out.marginals[b, n + 1 :].abs().sum() == 0
        assert torch.diagonal(out.marginals[b]).abs().max() == 0
        alone = layer(words[b : b + 1, :n], lengths[b : b + 1])
        torch.testing.assert_close(alone.parents[0], out.parents[b, :n])
    heads = layer.parse(words, lengths)
    assert heads.shape == (3, 5) and (heads[:, 0] == 0).all()
    assert (heads[1, 3:] == 0).all()


def test_syntactic_attention_rejects_unknown_mode():
    with pytest.raises(ValueError, match="valid: structured, simple"):
        SyntacticAttention(4, 4, mode="hard")


def test_structured_results_under_inference_mode():
    """Lightning validates and tests under ``torch.inference_mode()``: marginals and argmaxes
    (computed as gradients) must still work there and agree with grad mode."""
    torch.manual_seed(0)
    unary, transition = torch.randn(2, 5, 3), torch.randn(3, 3)
    arcs, lengths = torch.randn(2, 5, 5), torch.tensor([4, 2])
    with torch.inference_mode():  # inputs computed inside it are inference tensors
        inner = (unary * 1, transition * 1, arcs * 1, lengths.clone())
        chain = LinearChainCRF(inner[0], inner[1], inner[3])
        tree = DependencyCRF(inner[2], inner[3])
        got = (chain.marginals, chain.edge_marginals, chain.argmax, chain.entropy,
               tree.marginals, tree.argmax)
    chain, tree = LinearChainCRF(unary, transition, lengths), DependencyCRF(arcs, lengths)
    expected = (chain.marginals, chain.edge_marginals, chain.argmax, chain.entropy,
                tree.marginals, tree.argmax)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.clone(), e)


def test_half_precision_crfs_are_computed_in_float32():
    """bfloat16 potentials are widened to float32 (the compiled kernels take them then) and the
    results are rounded back to bfloat16."""
    torch.manual_seed(1)
    unary, transition, arcs = (t.bfloat16() for t in
                               (torch.randn(2, 5, 3), torch.randn(3, 3), torch.randn(2, 5, 5)))
    chain = LinearChainCRF(unary, transition).marginals
    tree = DependencyCRF(arcs).marginals
    assert chain.dtype == tree.dtype == torch.bfloat16
    eps = torch.finfo(torch.bfloat16).eps
    torch.testing.assert_close(chain.float(), LinearChainCRF(unary.float(), transition.float())
                               .marginals, atol=eps, rtol=eps)
    torch.testing.assert_close(tree.float(), DependencyCRF(arcs.float()).marginals, atol=eps,
                               rtol=eps)


@pytest.mark.skipif(not _chain_numba.available(), reason="numba not installed")
def test_compiled_kernels_keep_the_callers_thread_count():
    """numba's OpenMP layer raises torch's thread count to all cores when it starts, and small
    calls run the kernels on one thread; torch's own count is restored either way (a fresh
    process, so that the layer starts inside the test)."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "torch.set_num_threads(1)\n"
        "from lit_structattn.structured import DependencyCRF, LinearChainCRF\n"
        "crf = LinearChainCRF(torch.randn(3, 5, 2, requires_grad=True), torch.randn(2, 2), "
        "torch.tensor([5, 4, 2]))\n"
        "crf.marginals.sum().backward()\n"
        "assert torch.get_num_threads() == 1, torch.get_num_threads()\n"
        "tree = DependencyCRF(torch.randn(2, 4, 4, requires_grad=True), torch.tensor([3, 2]))\n"
        "tree.marginals.sum().backward()\n"
        "assert torch.get_num_threads() == 1, torch.get_num_threads()\n"
        "torch.set_num_threads(2)\n"  # small calls run on one thread, torch keeps its two
        "from lit_structattn.attention import csparsemax\n"
        "csparsemax(torch.randn(4, 6), torch.ones(4, 6))\n"
        "LinearChainCRF(torch.randn(3, 5, 2), torch.randn(2, 2)).marginals\n"
        "assert torch.get_num_threads() == 2, torch.get_num_threads()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


def test_each_device_gets_its_chain_kernel(monkeypatch):
    """numba serves CPU scores, Triton CUDA ones (tests/test_cuda_structured.py), nothing else
    (the torch implementation runs), and ``STRUCTATTN_COMPILED=0`` switches both off."""
    cpu = torch.zeros(1, 2, 2)
    assert _chain_kernel.backend_for(cpu) is (_chain_numba if _chain_numba.available() else None)
    assert _chain_kernel.backend_for(torch.zeros(1, 2, 2, device="meta")) is None
    assert not _chain_triton.usable(cpu)
    monkeypatch.setenv("STRUCTATTN_COMPILED", "0")
    assert _chain_kernel.backend_for(cpu) is None
