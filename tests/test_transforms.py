"""The attention transforms against independent solvers, their gradients, and their edge cases.
Every test runs through both the compiled CPU solvers and the torch ones (the ``solver``
fixture); precision at large score scales and in half precision is in
``test_transform_precision.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from lit_structattn.attention import csoftmax, csparsemax, get_transform, sparsemax
from tests.reference_transforms import csoftmax_ref, csparsemax_ref, sparsemax_ref

pytestmark = pytest.mark.usefixtures("solver")

CONSTRAINED = {"csoftmax": (csoftmax, csoftmax_ref), "csparsemax": (csparsemax, csparsemax_ref)}


def random_upper(rng: np.random.Generator, length: int, tight: bool = False) -> np.ndarray:
    """Bounds in [0, 1] that sum to at least 1, with some exact zeros and ones; ``tight``:
    bounds of about 2 / length, so that most of them bind."""
    scale = min(1.0, 4.0 / length) if tight else 1.0
    u = rng.uniform(0, scale, length) * rng.choice([0.0, 1.0, 1.0, 1.0], length)
    u[rng.integers(length)] = rng.choice([1.0, 0.7])
    while u.sum() < 1:
        u[rng.integers(length)] = 1.0
    return u


@st.composite
def score_rows(draw, max_len: int = 12):
    length = draw(st.integers(1, max_len))
    seed = draw(st.integers(0, 2**31))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0, 100.0]))
    rng = np.random.default_rng(seed)
    z = rng.normal(size=length) * scale
    if draw(st.booleans()):  # ties
        z = np.round(z)
    return z, random_upper(rng, length, tight=draw(st.booleans()))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(score_rows())
def test_sparsemax_matches_bisection(row):
    z, _ = row
    ours = sparsemax(torch.tensor(z)).numpy()
    np.testing.assert_allclose(ours, sparsemax_ref(z), atol=1e-9)


@pytest.mark.parametrize("name", sorted(CONSTRAINED))
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=score_rows(max_len=12) | score_rows(max_len=200))  # short rows, and the long path
def test_constrained_matches_bisection(name, row):
    z, u = row
    ours_fn, ref_fn = CONSTRAINED[name]
    ours = ours_fn(torch.tensor(z), torch.tensor(u)).numpy()
    np.testing.assert_allclose(ours, ref_fn(z, u), atol=1e-8)
    assert (ours <= u + 1e-12).all() and (ours >= 0).all()
    assert abs(ours.sum() - 1) < 1e-9


def _objective(name: str, z: np.ndarray):
    if name == "csoftmax":
        logp = z - np.logaddexp.reduce(z)
        return lambda a: float(np.sum(a * (np.log(np.maximum(a, 1e-300)) - logp)))
    return lambda a: float(0.5 * np.sum((a - z) ** 2))


@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_solution_is_optimal_for_a_generic_solver(name):
    """Our solution is feasible and no worse than scipy's SLSQP on the paper's objective."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        length = int(rng.integers(2, 9))
        z = rng.normal(size=length) * 2
        u = np.ones(length) if name == "sparsemax" else random_upper(rng, length)
        if name == "sparsemax":
            ours = sparsemax(torch.tensor(z)).numpy()
        else:
            ours = CONSTRAINED[name][0](torch.tensor(z), torch.tensor(u)).numpy()
        objective = _objective("csoftmax" if name == "csoftmax" else "sq", z)
        solved = minimize(
            objective,
            u / u.sum(),
            method="SLSQP",
            bounds=list(zip(np.zeros(length), u, strict=True)),
            constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1}],
            options={"ftol": 1e-12, "maxiter": 500},
        )
        assert objective(ours) <= objective(np.clip(solved.x, 0, u)) + 1e-7


@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_batched_with_mask_equals_rowwise(name):
    """A padded batch in any dim gives the row-wise results; padding gets exactly 0."""
    rng = np.random.default_rng(1)
    batch, length = 7, 10
    lengths = rng.integers(1, length + 1, batch)
    z = torch.tensor(rng.normal(size=(batch, length)) * 3)
    u = torch.tensor(np.stack([random_upper(rng, length) for _ in range(batch)]))
    for b in range(batch):  # make the valid part feasible on its own
        u[b, : lengths[b]] = torch.tensor(random_upper(rng, int(lengths[b])))
    mask = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    transform = get_transform(name)
    upper = u if transform.constrained else None
    ours = transform(z.T, upper=None if upper is None else upper.T, dim=0, mask=mask.T).T
    for b in range(batch):
        n = int(lengths[b])
        alone = transform(z[b, :n], upper=None if upper is None else upper[b, :n])
        torch.testing.assert_close(ours[b, :n], alone)
        assert (ours[b, n:] == 0).all()


@pytest.mark.parametrize("shape", [(40, 1000), (600, 64)])  # then passes; then enumeration
@pytest.mark.parametrize("tight", [False, True])
def test_csparsemax_large_inputs_take_the_compaction_path(monkeypatch, solver, tight, shape):
    """Inputs above COMPACT_ABOVE scores gather their unfixed coordinates into narrow rows;
    the results (with padding masks) still match the row-wise bisection reference."""
    import importlib

    if solver == "compiled":
        pytest.skip("a path of the torch solver")
    module = importlib.import_module("lit_structattn.attention.csparsemax")
    calls, original = [], module.compact
    monkeypatch.setattr(module, "compact", lambda *a: calls.append(1) or original(*a))
    rng = np.random.default_rng(7)
    batch, length = shape
    assert batch * length > module.COMPACT_ABOVE
    lengths = rng.integers(length // 2, length + 1, batch)
    mask = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    z = rng.normal(size=(batch, length)) * 2
    u = np.zeros((batch, length))
    for b in range(batch):
        u[b, : lengths[b]] = random_upper(rng, int(lengths[b]), tight=tight)
    ours = csparsemax(torch.tensor(z), torch.tensor(u), mask=mask)
    assert calls, "the compaction path was not taken"
    for b in range(batch):
        n = int(lengths[b])
        np.testing.assert_allclose(ours[b, :n].numpy(), csparsemax_ref(z[b, :n], u[b, :n]),
                                   atol=1e-8)
        assert (ours[b, n:] == 0).all()


@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_gradcheck_float64(name):
    torch.manual_seed(0)
    transform = get_transform(name)
    for length in (1, 2, 5, 9):
        z = (torch.randn(3, length, dtype=torch.float64) * 2).requires_grad_()
        if transform.constrained:
            # Bounds that bind on some coordinates, away from the kinks.
            u = (torch.rand(3, length, dtype=torch.float64) * 0.6 + 0.3)
            u[:, 0] = 1.2
            u.requires_grad_()
            assert torch.autograd.gradcheck(lambda z, u: transform(z, upper=u), (z, u))
        else:
            assert torch.autograd.gradcheck(lambda z: transform(z), (z,))


@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_masked_positions_get_zero_gradient(name):
    transform = get_transform(name)
    z = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    u = torch.full((4, 6), 0.6, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1] * 6, [1, 1, 0, 0, 1, 1], [0] * 6]).bool()
    out = transform(z, upper=u if transform.constrained else None, mask=mask)
    assert (out[~mask] == 0).all()
    assert (out[3] == 0).all()  # no valid position: all zeros
    (out * torch.randn_like(out)).sum().backward()
    assert (z.grad[~mask] == 0).all() and torch.isfinite(z.grad).all()
    if transform.constrained:
        assert (u.grad[~mask] == 0).all() and torch.isfinite(u.grad).all()


@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_scores_ties_and_length_one(name, dtype):
    transform = get_transform(name)
    cases = [
        torch.tensor([[1e4, -1e4, 1e4, 0.0]]),
        torch.tensor([[-1e4, -1e4, -1e4, -1e4]]),
        torch.tensor([[3.0, 3.0, 3.0, 3.0]]),
        torch.tensor([[1e4]]),
    ]
    for z in cases:
        z = z.to(dtype).requires_grad_()
        u = torch.full_like(z, 0.5 if z.shape[-1] > 1 else 1.0).requires_grad_()
        out = transform(z, upper=u if transform.constrained else None)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.sum(-1), torch.ones(1, dtype=dtype))
        out.pow(2).sum().backward()
        assert torch.isfinite(z.grad).all()
        if transform.constrained:
            assert torch.isfinite(u.grad).all()


@pytest.mark.parametrize("name", ["csoftmax", "csparsemax"])
def test_float32_long_inputs_are_exact_enough(name):
    rng = np.random.default_rng(3)
    z = rng.normal(size=(4, 2000)) * 30
    u = rng.uniform(0, 0.01, size=(4, 2000))
    ours = get_transform(name)(torch.tensor(z, dtype=torch.float32), torch.tensor(u).float())
    ref = np.stack([CONSTRAINED[name][1](z[i], u[i]) for i in range(4)])
    np.testing.assert_allclose(ours.numpy(), ref, atol=2e-5)


def test_sparsemax_gives_exact_zeros_and_csparsemax_too():
    z = torch.tensor([2.0, 1.0, -3.0])
    assert sparsemax(z)[2] == 0
    assert csparsemax(z, torch.tensor([0.6, 1.0, 1.0]))[2] == 0


@pytest.mark.parametrize("transform", [csoftmax, csparsemax])
def test_malaviya_figure1_three_rounds(transform):
    """Malaviya et al. Fig. 1: three decoding rounds with unit fertilities."""
    scores = torch.tensor([[1.2, 0.8, -0.2], [0.7, 0.9, 0.1], [-0.2, 0.2, 0.9]])
    cumulative = torch.zeros(3)
    rounds = []
    for step in range(3):
        attention = transform(scores[step], 1 - cumulative)
        rounds.append(attention)
        cumulative = cumulative + attention
        assert (cumulative <= 1 + 1e-6).all()
    torch.testing.assert_close(cumulative.sum(), torch.tensor(3.0))
    torch.testing.assert_close(cumulative, torch.ones(3))
    if transform is csparsemax:
        assert any((r == 0).any() for r in rounds)


def test_infeasible_bounds_name_the_row():
    z = torch.zeros(3, 4)
    u = torch.full((3, 4), 0.5)
    u[2] = 0.2
    with pytest.raises(ValueError, match=r"row \(2,\)"):
        csoftmax(z, u)
    with pytest.raises(ValueError, match=r"row \(2,\)"):
        csparsemax(z, u)


def test_bad_shapes_and_dtypes_are_rejected():
    z = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="broadcast"):
        csoftmax(z, torch.ones(3, 5))
    with pytest.raises(ValueError, match="upper must be a floating-point"):
        csparsemax(z, torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="empty"):
        csoftmax(torch.zeros(3, 0), torch.ones(3, 0))
    with pytest.raises(ValueError, match="bool"):
        sparsemax(z, mask=torch.ones(3, 4))
    with pytest.raises(ValueError, match="floating"):
        sparsemax(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="dim"):
        sparsemax(z, dim=2)
    with pytest.raises(ValueError, match="centmax15, csoftmax, csparsemax, entmax, entmax15, "
                                         "sigmoid, softmax, sparsemax"):
        get_transform("entmax20")


@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_autocast_and_half_inputs_compute_in_float32(name):
    transform = get_transform(name)
    z = torch.randn(5, 8)
    u = torch.full((5, 8), 0.3)
    expected = transform(z, upper=u if transform.constrained else None)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = transform(z, upper=u if transform.constrained else None)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected)
    half = transform(z.bfloat16(), upper=u.bfloat16() if transform.constrained else None)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float().sum(-1), torch.ones(5), atol=2e-2, rtol=0)


@pytest.mark.parametrize("max_iter", [0, 1, 2])
@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_sort_fallback_and_partial_iterations_agree(monkeypatch, solver, name, max_iter):
    """Rows the iterative solver leaves unconverged are solved exactly by sorting."""
    import lit_structattn.attention._threshold as threshold

    if solver == "compiled":
        pytest.skip("a path of the torch solver")
    rng = np.random.default_rng(4)
    z = rng.normal(size=(16, 30)) * 3
    u = np.stack([random_upper(rng, 30) for _ in range(16)])
    mask = torch.tensor(rng.uniform(size=(16, 30)) < 0.8)
    mask[:, 0] = True
    u[:, 0] = 1.0
    transform = get_transform(name)
    upper = torch.tensor(u) if transform.constrained else None
    expected = transform(torch.tensor(z), upper=upper, mask=mask)
    monkeypatch.setattr(threshold, "MAX_ITER", max_iter)
    torch.testing.assert_close(transform(torch.tensor(z), upper=upper, mask=mask), expected)
    for b in range(16):
        row = z[b][mask[b].numpy()]
        if transform.constrained:
            ref = CONSTRAINED[name][1](row, u[b][mask[b].numpy()])
        else:
            ref = sparsemax_ref(row)
        np.testing.assert_allclose(expected[b][mask[b]].numpy(), ref, atol=1e-8)


@pytest.mark.parametrize("scale", [1.0, 30.0, 1e3])
@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_fixed_passes_as_on_a_gpu_give_the_same_solution(monkeypatch, solver, name, scale):
    """Off the CPU the solvers run all their passes without a host synchronization per pass
    (converged rows held); forced here on the CPU's torch solvers, the outputs are those of
    the early-stopping loop (csoftmax, csparsemax: bit for bit; sparsemax: to rounding) and of
    the float64 references."""
    import importlib

    if solver == "compiled":
        pytest.skip("a path of the torch solvers")
    rng = np.random.default_rng(7)
    z = torch.tensor(rng.normal(size=(64, 25)) * scale, dtype=torch.float32)  # 25 > 16:
    u = torch.tensor(np.stack([random_upper(rng, 25) for _ in range(64)]),  # no enumeration
                     dtype=torch.float32)
    u[:, 0] = 1.0
    mask = torch.tensor(rng.uniform(size=(64, 25)) < 0.8)
    mask[:, 0] = True
    transform = get_transform(name)
    upper = u if transform.constrained else None
    early = transform(z, upper=upper, mask=mask)
    for module in ("sparsemax", "csoftmax", "csparsemax"):
        monkeypatch.setattr(importlib.import_module(f"lit_structattn.attention.{module}"),
                            "checks_every_pass", lambda t: False)
    fixed = transform(z, upper=upper, mask=mask)
    if name != "sparsemax":
        assert torch.equal(fixed, early)
    else:
        torch.testing.assert_close(fixed, early, atol=2e-6, rtol=0)
    for b in range(64):
        row = z[b][mask[b]].double().numpy()
        bounds = u[b][mask[b]].double().numpy()
        ref = (CONSTRAINED[name][1](row, bounds) if transform.constrained
               else sparsemax_ref(row))
        np.testing.assert_allclose(fixed[b][mask[b]].numpy(), ref, atol=2e-5)
