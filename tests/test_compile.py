"""``torch.compile`` (the CPU inductor) gives eager's results: every transform of
``TRANSFORMS`` (masked; the constrained ones with upper bounds, by the compiled CPU solvers and
by the torch ones), both CRFs (log Z and marginals, by the compiled kernels and by the torch
programs) and one model per family (a training step's loss and gradients), within
``assert_close``'s float32 tolerance. The transforms whose fast path is pure torch compile to one
graph (``torch._dynamo.explain``: no graph break); those in :data:`FALL_BACK` break it (the
README's "torch.compile" section says why).

Cost: each case compiles once, at tiny shapes, ``dynamic=False``; Dynamo's caches are reset
between cases. The model families take most of the time (``slow``: ``make test`` runs them).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lit_structattn.attention import TRANSFORMS, _threshold
from lit_structattn.models.seq2seq import Seq2Seq
from lit_structattn.structured import DependencyCRF, LinearChainCRF
from tests.conftest import force_solver

from .test_babi_models import make as make_memory_network
from .test_babi_models import random_batch as memory_batch
from .test_easy_first import make_batch as tagging_batch
from .test_easy_first import make_tagger
from .test_nli_model import build as build_nli
from .test_nli_model import pairs as nli_pairs

#: Transforms that break the graph, with the reason: the numba solvers of the CPU (Dynamo cannot
#: trace them) and the host checks of the feasibility of the bounds (a ValueError for an
#: infeasible row) and of the torch solvers' hand-over to the sort. Every other transform of
#: TRANSFORMS, a new one included, must compile to one graph.
FALL_BACK = {"csoftmax": "numba solver, feasibility check", "csparsemax": "numba solver, "
             "feasibility check, variable fixing's host-checked hand-over",
             "centmax15": "feasibility check, the exact step's host-checked loop over the free "
             "and capped sets and its float64 sort fallback"}

CASES = [(name, "default") for name in TRANSFORMS] + [
    (name, "torch") for name, t in TRANSFORMS.items() if t.constrained]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each case compiles from scratch (and no case counts against another's recompile limit)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_and_eager(function, *inputs: torch.Tensor, weights_seed: int = 1):
    """``function(*inputs)`` compiled and eager: each result's value and the gradients of a
    random weighting of the results w.r.t. the ``inputs`` that require grad."""
    differentiable = [t for t in inputs if t.requires_grad]
    runs = []
    for run in (torch.compile(function, dynamic=False), function):
        outputs = run(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        generator = torch.Generator().manual_seed(weights_seed)
        objective = sum((out * torch.randn(out.shape, generator=generator)).sum()
                        for out in outputs)
        runs.append((outputs, torch.autograd.grad(objective, differentiable)))
    return runs


def assert_same(compiled, eager):
    (outputs, grads), (eager_outputs, eager_grads) = compiled, eager
    for got, want in zip((*outputs, *grads), (*eager_outputs, *eager_grads), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize(("name", "solver"), CASES)
def test_transform_compiles_to_eagers_results(name, solver, monkeypatch):
    if solver == "torch":
        force_solver("torch", monkeypatch)
    transform = TRANSFORMS[name]
    generator = torch.Generator().manual_seed(0)
    scores = (3 * torch.randn(3, 2, 7, generator=generator)).requires_grad_()
    mask = torch.ones(3, 1, 7, dtype=torch.bool)
    mask[0, :, 5:] = False
    mask[2, :, 0] = False
    inputs = [scores, mask]
    if transform.constrained:
        upper = (0.25 + 0.5 * torch.rand(3, 2, 7, generator=generator)).requires_grad_()
        inputs.append(upper)

    def apply(scores, mask, upper=None):
        return transform(scores, upper, dim=-1, mask=mask)

    assert_same(*compiled_and_eager(apply, *inputs))
    if name not in FALL_BACK and solver == "default":
        torch._dynamo.reset()
        explained = torch._dynamo.explain(apply)(*inputs)
        assert explained.graph_break_count == 0, explained.break_reasons


def test_sparsemax_hands_unconverged_rows_to_the_sort_inside_the_graph(monkeypatch):
    """One pass of Michelot's iteration converges no row: the sort branch of the graph runs."""
    monkeypatch.setattr(_threshold, "MAX_ITER", 1)
    scores = (3 * torch.randn(4, 9, generator=torch.Generator().manual_seed(0))).requires_grad_()
    assert_same(*compiled_and_eager(TRANSFORMS["sparsemax"], scores))
    torch._dynamo.reset()
    assert torch._dynamo.explain(TRANSFORMS["sparsemax"])(scores).graph_break_count == 0


@pytest.fixture(params=["compiled", "torch"])
def crf_kernel(request, monkeypatch):
    """The CRFs by their compiled CPU kernels (numba), or by the torch programs (the marginals
    as gradients of log Z: under compile they must still be differentiable)."""
    if request.param == "torch":
        monkeypatch.setenv("STRUCTATTN_COMPILED", "0")
    return request.param


def test_linear_chain_crf_compiles_to_eagers_results(crf_kernel):
    generator = torch.Generator().manual_seed(0)
    unary = torch.randn(3, 5, 3, generator=generator, requires_grad=True)
    transition = torch.randn(3, 3, generator=generator, requires_grad=True)

    def inference(unary, transition, lengths):
        chain = LinearChainCRF(unary, transition, lengths)
        return chain.log_partition, chain.marginals

    assert_same(*compiled_and_eager(inference, unary, transition, torch.tensor([5, 2, 4])))


def test_dependency_crf_compiles_to_eagers_results(crf_kernel):
    generator = torch.Generator().manual_seed(0)
    arcs = torch.randn(2, 5, 5, generator=generator, requires_grad=True)

    def inference(arcs, lengths):
        tree = DependencyCRF(arcs, lengths)
        return tree.log_partition, tree.marginals

    assert_same(*compiled_and_eager(inference, arcs, torch.tensor([4, 2])))


# ------------------------------------------------------------------ one model per family
# Each a training step of a tiny model without randomness (no dropout or noise: inductor draws
# other random numbers than eager), with its family's signature attention.


def easy_first_step():
    """NEF-F with csoftmax sketches and a CRF output."""
    batch, tags = tagging_batch([5, 3, 4], extra=1)
    model = make_tagger(attention="csoftmax", steps=3, crf=True).train()
    return model, lambda: model.loss(model(**batch), tags, batch["lengths"])


def translation_step():
    """csparsemax attention with constant fertilities, the sink and the exhaustion bonus."""
    torch.manual_seed(3)
    model = Seq2Seq(12, 12, embed_dim=8, hidden_dim=8, attention="csparsemax", sink=True,
                    fertility=1.0, exhaustion_bonus=0.2, input_feed=True)
    words = torch.randint(3, 11, (3, 4))
    src = torch.cat([words, torch.full((3, 1), 11)], 1)  # 11 = <sink>
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), words], 1)
    tgt_out = torch.cat([words, torch.full((3, 1), 2)], 1)
    return model, lambda: model.loss(src, torch.full((3,), 5), tgt_in, tgt_out)


def memory_network_step():
    """The binary CRF over facts."""
    model = make_memory_network("binary_crf", temporal_noise=0.0).train()
    inputs, answers = memory_batch(batch=3, seed=1), torch.tensor([1, 2, 3])
    return model, lambda: F.cross_entropy(model(*inputs).logits, answers)


def nli_step():
    """Structured intra-sentence attention (dependency CRF marginals)."""
    model = build_nli("structured").train()
    premise, premise_lengths, hypothesis, hypothesis_lengths = nli_pairs()
    labels = torch.tensor([0, 2])
    return model, lambda: F.cross_entropy(
        model(premise, premise_lengths, hypothesis, hypothesis_lengths).logits, labels)


@pytest.mark.slow
@pytest.mark.parametrize("family", [easy_first_step, translation_step, memory_network_step,
                                    nli_step], ids=lambda f: f.__name__)
def test_training_step_compiles_to_eagers_results(family):
    model, step = family()
    parameters = [p for p in model.parameters() if p.requires_grad]
    results = []
    for run in (torch.compile(step, dynamic=False), step):
        loss = run()
        results.append((loss, torch.autograd.grad(loss, parameters, allow_unused=True)))
    (loss, grads), (eager_loss, eager_grads) = results
    torch.testing.assert_close(loss, eager_loss)
    for got, want in zip(grads, eager_grads, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got, want)
