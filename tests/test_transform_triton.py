"""The Triton kernels of sparsemax and csparsemax (lit_structattn/attention/_sparse_triton.py;
their 1.5-entmax variants: tests/test_entmax_triton.py),
run in Triton's interpreter on CPU tensors (tests/conftest.py), and compiled for a GPU (sm_90)
by Triton's own compiler. tests/test_transform_precision.py runs its whole matrix through them
too (its ``triton`` solver); here: the closed-form backward (gradcheck, and against the torch
solvers' backward), the fallback of uncertified rows, layouts (``dim``, leading shapes, strides,
broadcast bounds), empty rows, and the choice of the kernels by device."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lit_structattn.attention import (
    _sparse_triton,
    centmax15,
    csoftmax,
    csparsemax,
    entmax15,
    sparsemax,
)
from lit_structattn.common import compiled
from lit_structattn.common.compiled import triton_installed
from tests.conftest import count_fallbacks, force_triton
from tests.triton_compile import compiled_sizes

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def triton_kernels(monkeypatch):
    force_triton([_sparse_triton], monkeypatch)


def inputs(shape, seed, dtype=torch.float64, scale=3.0, total=1.5, mask=None):
    """Scores ``[..., L]`` and bounds summing to ``total`` over the last dimension's ``mask``
    positions (other bounds: 0.7, which must be ignored)."""
    generator = torch.Generator().manual_seed(seed)
    z = torch.randn(shape, generator=generator, dtype=dtype) * scale
    u = torch.rand(shape, generator=generator, dtype=dtype) + 0.05
    if mask is None:
        return z, u / u.sum(-1, keepdim=True) * total
    u = u * mask
    return z, torch.where(mask, u / u.sum(-1, keepdim=True).clamp_min(1e-9) * total, 0.7)


def outputs_and_grads(z, u, mask, cotangent, dim=-1):
    """The outputs of sparsemax and csparsemax and their gradients for ``cotangent``."""
    z, u = z.clone().requires_grad_(), u.clone().requires_grad_()
    p = sparsemax(z, dim=dim, mask=mask)
    a = csparsemax(z, u, dim=dim, mask=mask)
    ((p + a) * cotangent).sum().backward()
    return p.detach(), a.detach(), z.grad, u.grad


def test_forward_and_backward_agree_with_the_torch_solvers(monkeypatch):
    """Outputs and both gradients, float64, masks, several free and clamped coordinates per
    row: any change to the backward kernel's formula (the mean over the free set, which
    coordinates get which gradient) shows here."""
    mask = torch.rand(6, 4, 37, generator=torch.Generator().manual_seed(1)) > 0.2
    mask[0, 0] = False  # an empty row
    z, u = inputs((6, 4, 37), seed=0, scale=0.3, total=1.3, mask=mask)
    cotangent = torch.randn(6, 4, 37, generator=torch.Generator().manual_seed(2),
                            dtype=torch.float64)
    expected = outputs_and_grads(z, u, mask, cotangent)
    force_triton([_sparse_triton], monkeypatch)
    got = outputs_and_grads(z, u, mask, cotangent)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-9)
    a = got[1]
    free = (a > 0) & (a < u)
    assert free.sum(-1).max() > 2 and ((a == u) & mask).any()  # the backward has work to do
    assert (got[2][0, 0] == 0).all() and (got[3][0, 0] == 0).all()


@pytest.mark.usefixtures("triton_kernels")
def test_gradcheck_float64():
    """gradcheck's fast mode (projections on random vectors): the interpreter is slow."""
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[1, 6:] = False
    z, u = inputs((3, 9), seed=3, total=1.2, mask=mask)
    z.requires_grad_()
    u.requires_grad_()
    assert torch.autograd.gradcheck(lambda s: sparsemax(s, mask=mask), (z,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda s, b: csparsemax(s, b, mask=mask), (z, u),
                                    fast_mode=True)


def test_uncertified_rows_are_solved_again_by_the_torch_path(monkeypatch):
    """With no Newton or bisection step at all, no row is certified: every one is solved
    again, and the results (outputs and the sets the backward uses) are those of the torch
    path."""
    z, u = inputs((5, 12), seed=4, dtype=torch.float32, scale=0.3)
    cotangent = torch.randn(5, 12, generator=torch.Generator().manual_seed(5))
    expected = outputs_and_grads(z, u, None, cotangent)
    force_triton([_sparse_triton], monkeypatch)
    monkeypatch.setattr(_sparse_triton, "MAX_STEPS", 0)
    solved_again = count_fallbacks(_sparse_triton, monkeypatch)
    got = outputs_and_grads(z, u, None, cotangent)
    assert solved_again == [5, 5]
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs)


@pytest.mark.usefixtures("triton_kernels")
def test_the_kernel_applies_the_input_rules_without_the_host_checks(no_host_checks,
                                                                   monkeypatch):
    """NaN / +inf rows, -inf positions and infeasible bounds (tests/test_transform_precision.py
    checks the rules through the kernel) are the kernel's: run_transform's host checks, a
    synchronization each, do not run."""
    z = torch.tensor([[0.0, torch.nan, 1.0], [-torch.inf, 0.5, 1.0], [torch.inf, 0.0, 0.0]],
                     requires_grad=True)
    u = torch.full((3, 3), 0.7)
    a = csparsemax(z, u)
    p = sparsemax(z)
    for out in (a, p):
        assert out[0].isnan().all() and out[2].isnan().all() and out[1, 0] == 0
        torch.testing.assert_close(out[1].sum(), torch.tensor(1.0))
    (a + p)[1].sum().backward()
    assert torch.isfinite(z.grad).all() and (z.grad[[0, 2]] == 0).all()
    monkeypatch.setattr(_sparse_triton, "check_feasible", no_host_checks)
    with pytest.raises(AssertionError, match="a host check ran"):  # only for flagged rows
        csparsemax(torch.tensor([-torch.inf, 0.0, 1.0]), torch.full((3,), 0.45))


@pytest.mark.usefixtures("triton_kernels")
def test_dim_leading_shapes_strides_and_broadcast_bounds():
    """``dim`` not last (the kernels get strided rows), bounds broadcast over the batch
    (stride 0), a bool mask broadcast over rows; the same as solving each row alone."""
    z, _ = inputs((3, 11, 4), seed=6, dtype=torch.float32)
    upper = torch.linspace(0.05, 0.3, 11)[:, None]  # [11, 1]: broadcast over 3 and 4; sum 1.925
    mask = torch.arange(11)[:, None] < 9
    a = csparsemax(z, upper, dim=1, mask=mask)
    p = sparsemax(z, dim=1, mask=mask)
    for i in range(3):
        for k in range(4):
            torch.testing.assert_close(a[i, :, k], csparsemax(z[i, :, k], upper[:, 0],
                                                              mask=mask[:, 0]))
            torch.testing.assert_close(p[i, :, k], sparsemax(z[i, :, k], mask=mask[:, 0]))
    assert (a[:, 9:] == 0).all() and (p[:, 9:] == 0).all()
    torch.testing.assert_close(a.sum(1), torch.ones(3, 4))


@pytest.mark.usefixtures("triton_kernels")
def test_long_rows_and_one_position():
    """Rows of 1 position (mass 1 at once) and rows longer than a program's tile (one row to a
    program), float32."""
    for length in (1, 3000):
        z, u = inputs((2, length), seed=7, dtype=torch.float32, total=1.01)
        expected_p = sparsemax(z.double()).float()
        torch.testing.assert_close(sparsemax(z), expected_p, rtol=0, atol=1e-5)
        a = csparsemax(z, u)
        assert ((a >= 0) & (a <= u)).all()
        torch.testing.assert_close(a.double().sum(-1), torch.ones(2, dtype=torch.float64),
                                   rtol=0, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_on_cuda_the_kernels_agree_with_the_cpu(dtype):
    """Outputs and gradients on a GPU (the kernels, compiled) against the CPU's solvers, and
    under CUDA autocast."""
    mask = torch.rand(64, 50, generator=torch.Generator().manual_seed(8)) > 0.1
    z, u = inputs((64, 50), seed=9, dtype=torch.float64, total=1.2, mask=mask)
    z, u = z.to(dtype), u.to(dtype)
    cotangent = torch.randn(64, 50, generator=torch.Generator().manual_seed(10)).to(dtype)
    assert _sparse_triton.usable(z.cuda())
    expected = outputs_and_grads(z, u, mask, cotangent)
    got = outputs_and_grads(z.cuda(), u.cuda(), mask.cuda(), cotangent.cuda())
    eps = torch.finfo(dtype).eps
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours.cpu(), theirs, atol=max(eps, 1e-5), rtol=eps)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert csparsemax(z.cuda(), u.float().cuda()).dtype == torch.float32


@pytest.mark.cuda
def test_on_cuda_a_call_waits_for_the_host_once():
    """Forward: one synchronization (the flag read); backward: none (torch's sync debug mode
    warns at each)."""
    z, u = inputs((256, 50), seed=11, dtype=torch.float32, total=1.2)
    z, u = z.cuda().requires_grad_(), u.cuda().requires_grad_()
    for transform in (lambda: sparsemax(z), lambda: csparsemax(z, u), lambda: csoftmax(z, u),
                      lambda: entmax15(z), lambda: centmax15(z, u)):
        transform().sum().backward()  # compiles the kernels
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = transform()
                forward = len(caught)
                out.backward(torch.ones_like(out))
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert forward == 1 and len(caught) == 1, [str(w.message) for w in caught]


def test_the_kernels_serve_cuda_tensors_only_and_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(compiled, "triton_installed", lambda: True)
    cuda = SimpleNamespace(device=torch.device("cuda"), shape=(2, 5))
    assert _sparse_triton.usable(cuda)
    assert not _sparse_triton.usable(torch.empty(2, 5))
    too_long = SimpleNamespace(device=torch.device("cuda"),
                               shape=(2, _sparse_triton.MAX_LENGTH + 1))
    assert not _sparse_triton.usable(too_long)
    monkeypatch.setenv("STRUCTATTN_COMPILED", "0")
    assert not _sparse_triton.usable(cuda)


@pytest.mark.skipif(not triton_installed(), reason="triton is not installed")
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "fp64"])
def test_the_triton_kernels_compile_for_a_gpu(dtype):
    """Every variant (bounds or not, mask or not, sparsemax's or 1.5-entmax's; forward and
    backward) for sm_90 (tests/triton_compile.py): the interpreter lets through what a GPU
    compiler refuses."""
    real, wide = "*" + dtype, dtype == "fp64"
    forward = [real] * 2 + ["*u8", real, "*i8", "*i8"]
    variants = [("forward_kernel", forward, dict(BOUNDED=b, MASKED=m, SQUARE=q, WIDE=wide,
                                                 TOLERANCE=1e-5, FEASIBLE=0.99, MAX_STEPS=64,
                                                 ROWS=4, BLOCK=256))
                for q in (False, True) for b in (False, True) for m in (False, True)]
    variants += [("backward_kernel", [real, "*i8" if not q else real, "*i8", real, real],
                  dict(BOUNDED=b, SQUARE=q, WIDE=wide, ROWS=4, BLOCK=256))
                 for q in (False, True) for b in (False, True)]
    sizes = compiled_sizes("lit_structattn.attention._sparse_triton_kernels", variants)
    assert [name for name, _ in sizes] == ["forward_kernel"] * 8 + ["backward_kernel"] * 4
    assert all(size > 0 for _, size in sizes)
