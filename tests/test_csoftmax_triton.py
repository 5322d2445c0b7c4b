"""csoftmax's Triton kernels (:mod:`lit_structattn.attention._csoftmax_triton`), run on CPU
tensors in Triton's interpreter (tests/conftest.py) and compiled for sm_90 with Triton's own
compiler: agreement with the float64 references at score scales 1 to 1e4 (gaps where ``exp``
underflows included), masks, the ``-inf``/NaN rules, half precision, the certification and the
exact fallback, the closed-form backward (gradcheck in float64, agreement with the torch
backward, and mutations of the kernel that these checks must catch)."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lit_structattn.attention import _csoftmax_triton, csoftmax
from lit_structattn.common.compiled import triton_installed
from tests.conftest import count_fallbacks, force_triton
from tests.reference_transforms import csoftmax_ref
from tests.test_transform_precision import BOUNDS, SHAPES, check_exact, make_bounds
from tests.triton_compile import compiled_sizes

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "lit_structattn" / "attention" / "_csoftmax_triton_kernels.py"
INSTALLED = triton_installed()


@contextlib.contextmanager
def kernels_off():
    """Context in which csoftmax takes its CPU path (numba or torch) instead of the kernels."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_csoftmax_triton, "usable", lambda z: False)
        yield


@pytest.fixture
def fallbacks(monkeypatch):
    """Run csoftmax through the Triton kernels in the interpreter; yields the list of row counts
    handed to the exact fallback."""
    force_triton([_csoftmax_triton], monkeypatch)
    return count_fallbacks(_csoftmax_triton, monkeypatch)


@pytest.mark.parametrize("scale", [1, 1e3, 1e4])
@pytest.mark.parametrize("kind", BOUNDS)
def test_the_kernel_is_exact_at_every_scale(fallbacks, kind, scale):
    """Every row of the matrix certified by the kernel itself (no fallback), within the README's
    tolerance of the float64 reference."""
    rng = np.random.default_rng(int(scale) + 7 * BOUNDS.index(kind))
    for shape in SHAPES:
        z = torch.tensor(rng.normal(size=shape) * scale, dtype=torch.float32)
        u = torch.tensor(make_bounds(rng, shape, kind), dtype=torch.float32)
        check_exact("csoftmax", z, u, None)
    assert fallbacks == []


@pytest.mark.parametrize("scale", [1, 1e4])
def test_masks_rows_of_any_length_and_grouped_rows(fallbacks, scale, monkeypatch):
    """Padded rows, rows with no valid position, and programs of 4 rows with a partial last
    one (7 rows)."""
    monkeypatch.setattr(_csoftmax_triton, "ROW_ELEMENTS", 4 * 64)
    rng = np.random.default_rng(3)
    lengths = np.array([1, 2, 50, 64, 7, 0, 33])
    mask = torch.arange(64)[None, :] < torch.tensor(lengths)[:, None]
    z = torch.tensor(rng.normal(size=(7, 64)) * scale, dtype=torch.float32)
    u = torch.tensor(rng.uniform(0, 5, (7, 64)), dtype=torch.float32)
    for b, length in enumerate(lengths):
        if length:
            u[b, :length] = torch.tensor(make_bounds(rng, (1, int(length)), "random")[0])
    out = csoftmax(z, u, mask=mask)
    assert (out[~mask] == 0).all() and (out[5] == 0).all()
    check_exact("csoftmax", z[lengths > 0], u[lengths > 0], mask[lengths > 0])
    assert fallbacks == []


def test_gaps_where_exp_underflows(fallbacks):
    """Free scores 90 to 2000 nats below clamped ones, in float32 and (800 nats) float64."""
    out = csoftmax(torch.tensor([0.0, -90.0]), torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5]))
    z = torch.tensor([[0.0, -200.0, -201.0, -2000.0], [0.0, -1e3, -1e3 - 0.5, -1e3 - 90]])
    u = torch.tensor([[0.3, 0.6, 0.6, 0.6], [0.25, 0.5, 0.5, 0.5]])
    reference = csoftmax_ref(z.double().numpy(), u.double().numpy())
    np.testing.assert_allclose(csoftmax(z, u).numpy(), reference, atol=1e-6)
    wide = csoftmax(torch.tensor([0.0, -800.0, -801.0], dtype=torch.float64),
                    torch.tensor([0.5, 1.0, 1.0], dtype=torch.float64))
    e = np.exp(-1.0)
    np.testing.assert_allclose(wide.numpy(), [0.5, 0.5 / (1 + e), 0.5 * e / (1 + e)],
                               rtol=1e-14)
    assert fallbacks == []


def test_float64_at_large_scales(fallbacks):
    rng = np.random.default_rng(0)
    for scale in (1e3, 1e6):
        z = rng.normal(size=(32, 40)) * scale
        u = make_bounds(rng, (32, 40), "random")
        ours = csoftmax(torch.tensor(z), torch.tensor(u)).numpy()
        np.testing.assert_allclose(ours, csoftmax_ref(z, u), atol=1e-9 * max(1.0, scale / 1e3))
        np.testing.assert_allclose(ours.sum(-1), 1, atol=1e-9)
    assert fallbacks == []


def test_leading_shapes_dim_and_broadcast_bounds(fallbacks):
    """``dim`` in the middle, bounds broadcast over a dimension (stride 0): as on the CPU
    path."""
    rng = np.random.default_rng(4)
    z = torch.tensor(rng.normal(size=(3, 20, 5)) * 3, dtype=torch.float32)
    u = torch.tensor(make_bounds(rng, (3, 20), "tight"), dtype=torch.float32)[:, :, None]
    out = csoftmax(z, u, dim=1)
    assert fallbacks == []
    with kernels_off():
        expected = csoftmax(z, u, dim=1)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def test_non_finite_scores_and_a_nan_bound(fallbacks):
    """NaN or +inf at a valid position: a NaN row; -inf: a masked position; a NaN bound: the
    row goes to the exact path, which decides as it always did."""
    z = torch.tensor([[float("nan"), 0.0, 1.0], [0.0, 1.0, 2.0], [float("inf"), 0.0, 1.0],
                      [-float("inf"), 0.0, 1.0]], requires_grad=True)
    u = torch.full((4, 3), 0.8)
    out = csoftmax(z, u)
    assert out[0].isnan().all() and out[2].isnan().all()
    with kernels_off():
        expected = csoftmax(z.detach()[3:].nan_to_num(neginf=0.0), u[3:],
                            mask=torch.tensor([[False, True, True]]))
    torch.testing.assert_close(out[3:], expected)
    (out[[1, 3]] * torch.randn(2, 3)).sum().backward()
    assert torch.isfinite(z.grad).all() and z.grad[3, 0] == 0
    assert fallbacks == []
    nan_bound = torch.tensor([[0.5, float("nan"), 0.9]])
    with kernels_off():
        expected = csoftmax(torch.zeros(1, 3), nan_bound)
    torch.testing.assert_close(csoftmax(torch.zeros(1, 3), nan_bound), expected, equal_nan=True)
    assert fallbacks == [1]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(fallbacks, dtype):
    """Through csoftmax (computed in float32, returned in the half dtype), and the kernel on
    half tensors directly (it computes in float32 and writes the half dtype)."""
    rng = np.random.default_rng(1)
    eps = torch.finfo(dtype).eps
    for scale in (1, 100, 1e4):
        z = torch.tensor(rng.normal(size=(64, 30)) * scale).to(dtype)
        u = torch.tensor(make_bounds(rng, (64, 30), "random")).to(dtype)
        reference = csoftmax_ref(z.double().numpy(), u.double().numpy())
        out = csoftmax(z, u)
        assert out.dtype == dtype and (out <= u).all()
        np.testing.assert_allclose(out.double().numpy(), reference, atol=eps, rtol=eps)
        a, _, certified = _csoftmax_triton.launch(z, u, None)
        assert a.dtype == dtype and certified.all() and (a <= u).all()
        np.testing.assert_allclose(a.double().numpy(), reference, atol=eps, rtol=eps)
    assert fallbacks == []


def test_uncertified_rows_are_solved_by_the_exact_path(fallbacks, monkeypatch):
    """With one mass evaluation per row the kernel certifies the rows it solves at once (loose
    bounds: nothing clamped) and not the others, which come back exact from the fallback, their
    states included (the gradients agree)."""
    monkeypatch.setattr(_csoftmax_triton, "MAX_ITER", 1)
    rng = np.random.default_rng(5)
    z = torch.tensor(rng.normal(size=(16, 12)) * 3, requires_grad=True)
    bounds = make_bounds(rng, (16, 12), "tight")
    bounds[:8] = 1.0
    u = torch.tensor(bounds, requires_grad=True)
    out = csoftmax(z, u)
    assert 0 < sum(fallbacks) <= 8
    grad = torch.randn(16, 12, dtype=torch.float64)
    d_z, d_u = torch.autograd.grad(out, (z, u), grad)
    with kernels_off():
        z0, u0 = z.detach().requires_grad_(), u.detach().requires_grad_()
        expected = csoftmax(z0, u0)
        e_z, e_u = torch.autograd.grad(expected, (z0, u0), grad)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(d_z, e_z)
    torch.testing.assert_close(d_u, e_u)


def _gradcheck_inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    z = torch.tensor(rng.normal(size=(5, 9)) * 2, requires_grad=True)
    u = torch.tensor(make_bounds(rng, (5, 9), "random"), requires_grad=True)
    mask = torch.ones(5, 9, dtype=torch.bool)
    mask[1, 6:] = False
    return z, u, mask


def test_gradcheck_float64(fallbacks):
    z, u, mask = _gradcheck_inputs()
    out = csoftmax(z, u, mask=mask)
    assert ((out > 0) & (out < u) & mask).any() and ((out == u) & mask).any()
    assert torch.autograd.gradcheck(lambda s, b: csoftmax(s, b, mask=mask), (z, u),
                                    eps=1e-7, atol=1e-6)
    assert fallbacks == []


def test_backward_agrees_with_the_torch_backward(fallbacks):
    """float32, a strided cotangent (a transposed tensor), masks and zero bounds."""
    rng = np.random.default_rng(6)
    z = torch.tensor(rng.normal(size=(40, 30)) * 4, dtype=torch.float32, requires_grad=True)
    u = torch.tensor(make_bounds(rng, (40, 30), "zeros"), dtype=torch.float32,
                     requires_grad=True)
    mask = torch.tensor(rng.uniform(size=(40, 30)) > 0.1)
    mask[:, 0] = True
    u.data[:, 0] = 1.0  # every row stays feasible on its valid positions
    grad = torch.randn(30, 40).t()
    d_z, d_u = torch.autograd.grad(csoftmax(z, u, mask=mask), (z, u), grad)
    with kernels_off():
        e_z, e_u = torch.autograd.grad(csoftmax(z, u, mask=mask), (z, u), grad)
    torch.testing.assert_close(d_z, e_z, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(d_u, e_u, atol=1e-6, rtol=1e-5)
    assert (d_u[~mask] == 0).all() and (d_z[~mask] == 0).all()
    assert fallbacks == []


MUTATIONS = {
    "no mean": ("centered = g - mean[:, None]", "centered = g"),
    "bound gradient on the free set": ("tl.where(state == AT_BOUND, centered, 0.0)",
                                       "tl.where(state == FREE, centered, 0.0)"),
    "mean over every position": ("free_mass = tl.maximum(tl.sum(free_a, 1)",
                                 "free_mass = tl.maximum(tl.sum(a, 1)"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_mutated_backward_kernel_fails_gradcheck(fallbacks, mutation, tmp_path, monkeypatch):
    """The backward kernel with one of its formulas broken (a copy of the module, loaded from
    its own file) fails the float64 gradcheck that the real one passes."""
    old, new = MUTATIONS[mutation]
    source = KERNELS.read_text()
    assert source.count(old) == 1
    path = tmp_path / "mutated_csoftmax_kernels.py"
    path.write_text(source.replace(old, new))
    spec = importlib.util.spec_from_file_location("mutated_csoftmax_kernels", path)
    mutated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mutated)
    real_forward, _ = _csoftmax_triton._kernels()
    monkeypatch.setattr(_csoftmax_triton, "_kernels",
                        lambda: (real_forward, mutated.backward_kernel))
    z, u, mask = _gradcheck_inputs()
    assert not torch.autograd.gradcheck(lambda s, b: csoftmax(s, b, mask=mask), (z, u),
                                        eps=1e-7, atol=1e-6, raise_exception=False)


def test_the_kernels_serve_cuda_only_and_can_be_switched_off(monkeypatch):
    assert not _csoftmax_triton.usable(torch.zeros(2, 3))  # a CPU tensor: numba or torch
    cuda = SimpleNamespace(device=torch.device("cuda"), shape=(2, 3))
    assert _csoftmax_triton.usable(cuda) == INSTALLED
    long_rows = SimpleNamespace(device=cuda.device, shape=(2, _csoftmax_triton.MAX_LENGTH + 1))
    assert not _csoftmax_triton.usable(long_rows)
    monkeypatch.setenv("STRUCTATTN_COMPILED", "0")
    assert not _csoftmax_triton.usable(cuda)


@pytest.mark.skipif(not INSTALLED, reason="triton is not installed")
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "fp64"])
def test_the_kernels_compile_for_a_gpu(dtype):
    """Both kernels for sm_90 (tests/triton_compile.py): the interpreter lets through what a
    GPU compiler refuses (a non-constexpr global, an op without a float64 lowering)."""
    real = "*" + dtype
    shape = {"ROWS": 4, "BLOCK": 64, "WIDE": dtype == "fp64"}
    variants = [("forward_kernel", [real] * 2 + ["*i1", real, "*i8", "*i1"],
                 {"HAS_MASK": True, "MAX_ITER": 48, **shape}),
                ("backward_kernel", [real, "*i8"] + [real] * 3, shape)]
    sizes = compiled_sizes("lit_structattn.attention._csoftmax_triton_kernels", variants)
    assert [name for name, _ in sizes] == ["forward_kernel", "backward_kernel"]
    assert all(size > 0 for _, size in sizes)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_the_kernels_on_a_gpu_agree_with_the_cpu(dtype):
    """On CUDA (where the kernels serve by default): forward and backward against the CPU
    solvers at every scale, and under autocast."""
    rng = np.random.default_rng(7)
    eps = max(torch.finfo(dtype).eps, 1e-6)
    for scale in (1, 100, 1e4):
        for shape in SHAPES + [(64, 1024)]:
            z = torch.tensor(rng.normal(size=shape) * scale).to(dtype).requires_grad_()
            u = torch.tensor(make_bounds(rng, shape, "random")).to(dtype).requires_grad_()
            grad = torch.randn(shape).to(dtype)
            zc, uc = (t.detach().cuda().requires_grad_() for t in (z, u))
            out = csoftmax(zc, uc)
            assert out.dtype == dtype
            d_zc, d_uc = torch.autograd.grad(out, (zc, uc), grad.cuda())
            expected = csoftmax(z, u)
            d_z, d_u = torch.autograd.grad(expected, (z, u), grad)
            for ours, theirs in ((out, expected), (d_zc, d_z), (d_uc, d_u)):
                torch.testing.assert_close(ours.cpu(), theirs, atol=10 * eps, rtol=10 * eps)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = csoftmax(torch.randn(64, 30, device="cuda"), torch.ones(64, 30, device="cuda"))
    assert out.dtype == torch.float32


def test_the_input_rules_are_applied_on_the_device(fallbacks, no_host_checks):
    """NaN / +inf rows, -inf positions and infeasible bounds are handled by the kernel path:
    run_transform's host checks (a synchronization each) do not run, and an infeasible row
    still raises its ValueError, from the one flag read."""
    z = torch.tensor([[0.0, torch.nan, 1.0], [-torch.inf, 0.5, 1.0], [torch.inf, 0.0, 0.0]],
                     requires_grad=True)
    out = csoftmax(z, torch.full((3, 3), 0.7))
    assert out[0].isnan().all() and out[2].isnan().all() and out[1, 0] == 0
    torch.testing.assert_close(out[1].sum(), torch.tensor(1.0))
    out[1].sum().backward()
    assert torch.isfinite(z.grad).all() and (z.grad[[0, 2]] == 0).all()
    with pytest.raises(ValueError, match=r"csoftmax: the valid upper bounds of row \(1,\)"):
        csoftmax(torch.tensor([[0.0, 1.0], [-torch.inf, 1.0]]), torch.full((2, 2), 0.6))
