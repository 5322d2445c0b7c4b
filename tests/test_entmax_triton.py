"""The Triton kernels of entmax15 and centmax15 (the ``SQUARE`` variants of
lit_structattn/attention/_sparse_triton.py), run in Triton's interpreter on CPU tensors
(tests/conftest.py) against the exact torch paths of entmax.py and centmax.py: values at score
scales 1e-3 to 1e4 (float32 within the README's tolerance of the float64 solution, float64 to
rounding), masks, NaN / ``+inf`` rows and ``-inf`` positions applied by the kernel itself,
infeasible rows, the fallback of uncertified rows, half precision (and the inputs of the
``entmax`` package's issue #30), and gradients equal to the torch path's (and gradcheck).
tests/test_transform_triton.py compiles the variants for a GPU."""

from __future__ import annotations

import pytest
import torch

from lit_structattn.attention import _sparse_triton, centmax, centmax15, entmax, entmax15
from tests.conftest import count_fallbacks, force_triton
from tests.test_entmax import bounds, tolerance

SCALES = [1e-3, 1e-1, 1, 10, 100, 1e3, 1e4]


@pytest.fixture
def kernels(monkeypatch):
    """The kernels for the rest of the test, and the list of the rows they hand to the torch
    path. The interpreter runs one program at a time: large tiles run the tests faster."""
    force_triton([_sparse_triton], monkeypatch)
    monkeypatch.setattr(_sparse_triton, "ELEMENTS", 2**14)
    return count_fallbacks(_sparse_triton, monkeypatch)


def torch_path(transform, *args, **options):
    """``transform(*args, **options)`` by the torch path (the kernels switched off)."""
    usable = _sparse_triton.usable
    _sparse_triton.usable = lambda z: False
    try:
        return transform(*args, **options)
    finally:
        _sparse_triton.usable = usable


def outputs_and_grads(z, u, mask, cotangent):
    """entmax15 and centmax15 of ``z`` (bounds ``u``, ``mask``) and the gradients of
    ``(p + a) . cotangent`` for the scores and the bounds."""
    z, u = z.clone().requires_grad_(), u.clone().requires_grad_()
    p = entmax15(z, mask=mask)
    a = centmax15(z, u, mask=mask)
    ((p + a) * cotangent).sum().backward()
    return p.detach(), a.detach(), z.grad, u.grad


@pytest.mark.parametrize("kind", ["tight", "loose", "zeros"])
def test_exact_at_every_scale(kernels, kind):
    """float32 within the README's tolerance of the float64 solution of the same inputs (the
    torch path's), float64 to rounding, with masks (rows of 1 to 40 valid positions); every
    row certified on the device (none handed to the torch path)."""
    generator = torch.Generator().manual_seed(0)
    for scale in SCALES:
        z = torch.randn(24, 40, generator=generator) * scale
        u = bounds(generator, (24, 40), kind).float()
        mask = torch.arange(40) < torch.randint(1, 41, (24, 1), generator=generator)
        mask[:, 0] = True  # the tight bounds' 1
        u = torch.where(mask, u, 0.5)  # ignored at masked positions
        if kind != "tight":
            u = torch.where(mask, u / (u * mask).sum(-1, keepdim=True) * 1.2, u)
        for transform, upper in ((entmax15, ()), (centmax15, (u,))):
            out = transform(z, *upper, mask=mask)
            reference = torch_path(transform, z.double(), *(b.double() for b in upper),
                                   mask=mask)
            error = (out.double() - reference).abs().amax(-1)
            limit = tolerance(z.masked_fill(~mask, -1e30), reference, *upper)
            assert (error <= limit).all(), (scale, int(error.argmax()), float(error.max()))
            assert (out >= 0).all() and (out[~mask] == 0).all()
            assert all(b.ge(out).all() for b in upper)
            z64 = z.double() * 1.0001
            torch.testing.assert_close(
                transform(z64, *(b.double() for b in upper), mask=mask),
                torch_path(transform, z64, *(b.double() for b in upper), mask=mask),
                atol=1e-12, rtol=0)
    assert kernels == []


def test_gradients_equal_the_torch_path(kernels):
    """Outputs and both gradients in float64, masks and an empty row, several free and capped
    coordinates per row: the backward kernel's weights ``sqrt(a)`` on the free set, its mean
    and the bounds' gradient show here."""
    generator = torch.Generator().manual_seed(1)
    mask = torch.rand(6, 4, 37, generator=generator) > 0.2
    mask[0, 0] = False  # an empty row
    z = torch.randn(6, 4, 37, generator=generator, dtype=torch.float64)
    u = torch.rand(6, 4, 37, generator=generator, dtype=torch.float64) * mask
    u = u / u.sum(-1, keepdim=True).clamp_min(1e-9) * 1.3
    cotangent = torch.randn(6, 4, 37, generator=generator, dtype=torch.float64)
    got = outputs_and_grads(z, u, mask, cotangent)
    expected = torch_path(outputs_and_grads, z, u, mask, cotangent)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-9)
    a = got[1]
    assert ((a > 0) & (a < u)).sum(-1).max() > 2 and ((a == u) & mask & (u > 0)).any()
    assert (got[2][0, 0] == 0).all() and (got[3][0, 0] == 0).all()
    assert kernels == []


@pytest.mark.usefixtures("kernels")
def test_gradcheck_float64():
    """gradcheck's fast mode (projections on random vectors): the interpreter is slow."""
    generator = torch.Generator().manual_seed(2)
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[1, 6:] = False
    z = (torch.randn(3, 9, generator=generator, dtype=torch.float64) * 2).requires_grad_()
    u = torch.rand(3, 9, generator=generator, dtype=torch.float64) * mask
    u = (u / u.sum(-1, keepdim=True) * 1.2).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: entmax15(s, mask=mask), (z,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda s, b: centmax15(s, b, mask=mask), (z, u),
                                    fast_mode=True)


def test_uncertified_rows_are_solved_again_by_the_torch_path(kernels, monkeypatch):
    """With no Newton or bisection step at all no row is certified: every one is solved again
    by the torch path, and the outputs and gradients (from the sets it returns) are its."""
    generator = torch.Generator().manual_seed(3)
    z = torch.randn(5, 12, generator=generator)
    u = bounds(generator, (5, 12), "loose").float()
    mask = torch.ones(5, 12, dtype=torch.bool)
    cotangent = torch.randn(5, 12, generator=generator)
    expected = torch_path(outputs_and_grads, z, u, mask, cotangent)
    monkeypatch.setattr(_sparse_triton, "MAX_STEPS", 0)
    got = outputs_and_grads(z, u, mask, cotangent)
    assert kernels == [5, 5]
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs)


@pytest.mark.usefixtures("kernels")
def test_the_kernel_applies_the_input_rules_without_the_host_checks(no_host_checks,
                                                                   monkeypatch):
    """NaN / +inf rows NaN, -inf positions masked, infeasible bounds raising: by the kernel
    (run_transform's host checks, a synchronization each, do not run; tests/test_entmax.py
    checks the same rules on the torch path)."""
    z = torch.tensor([[0.0, torch.nan, 1.0], [-torch.inf, 0.5, 1.0], [torch.inf, 0.0, 0.0],
                      [-torch.inf] * 3], requires_grad=True)
    u = torch.full((4, 3), 0.7)
    p, a = entmax15(z), centmax15(z, u)
    finite = z.detach()[1, 1:]
    for out, alone in zip((p, a), (entmax15(finite), centmax15(finite, u[1, 1:])), strict=True):
        assert out[0].isnan().all() and out[2].isnan().all() and (out[3] == 0).all()
        assert out[1, 0] == 0 and out[1, 1:].equal(alone)
    (p + a)[[1, 3]].sum().backward()
    assert torch.isfinite(z.grad).all() and (z.grad[[0, 2, 3]] == 0).all()
    monkeypatch.setattr(_sparse_triton, "check_feasible", no_host_checks)
    with pytest.raises(AssertionError, match="a host check ran"):  # only for flagged rows
        centmax15(torch.tensor([-torch.inf, 0.0, 1.0]), torch.full((3,), 0.45))


@pytest.mark.usefixtures("kernels")
def test_infeasible_rows_raise():
    z = torch.zeros(3, 4)
    u = torch.full((3, 4), 0.5)
    u[1] = 0.2
    with pytest.raises(ValueError, match=r"centmax: the valid upper bounds of row \(1,\)"):
        centmax15(z, u)
    with pytest.raises(ValueError, match="sum to"):  # feasible only with the -inf position
        centmax15(torch.tensor([-torch.inf, 0.0, 1.0]), torch.full((3,), 0.45))
    with pytest.raises(ValueError, match="sum to"):  # feasible only with a masked position
        centmax(z, torch.full((3, 4), 0.4), 1.5, mask=torch.arange(4) < 2)


@pytest.mark.usefixtures("kernels")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_and_any_dim(dtype):
    """Half inputs computed in float32 and returned in their dtype, ``dim`` not last (strided
    rows): as the torch path."""
    generator = torch.Generator().manual_seed(4)
    z = (torch.randn(3, 20, 4, generator=generator) * 5).to(dtype)
    u = (torch.rand(3, 20, 4, generator=generator) * 0.2 + 0.05).to(dtype)
    for transform, upper in ((entmax15, ()), (centmax15, (u,))):
        out = transform(z, *upper, dim=1)
        assert out.dtype == dtype
        torch.testing.assert_close(out, torch_path(transform, z, *upper, dim=1))


@pytest.mark.usefixtures("kernels")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_entmax_issue_30_logits_around_minus_1000(dtype):
    """The inputs of the ``entmax`` package's issue #30 (logits around -1000 in half precision):
    the float64 solution of the same values, up to the output's rounding."""
    generator = torch.Generator().manual_seed(30)
    z = (torch.randn(16, 10, generator=generator) * 3 - 1000).to(dtype)
    u = torch.full((16, 10), 0.3, dtype=dtype)
    eps = torch.finfo(dtype).eps
    for transform, upper in ((entmax15, ()), (centmax15, (u,))):
        expected = torch_path(transform, z.double(), *(b.double() for b in upper))
        torch.testing.assert_close(transform(z, *upper).double(), expected, atol=eps, rtol=eps)


@pytest.mark.usefixtures("kernels")
def test_other_alpha_stays_on_the_torch_path(monkeypatch):
    """The kernels take alpha = 1.5 only: other alpha, and a tensor alpha, run the torch path
    (its own host checks of the inputs)."""
    def unexpected(*args, **options):
        raise AssertionError("the kernel ran")

    monkeypatch.setattr(_sparse_triton, "forward", unexpected)
    z = torch.randn(4, 6, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(entmax(z, 1.3), torch_path(entmax, z, 1.3))
    torch.testing.assert_close(entmax(z, torch.full((4, 1), 1.5)), torch_path(entmax15, z))
    torch.testing.assert_close(centmax(z, torch.full((4, 6), 0.3), 1.7),
                               torch_path(centmax, z, torch.full((4, 6), 0.3), 1.7))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_on_cuda_the_kernels_agree_with_the_cpu(dtype):
    """Outputs and gradients on a GPU (the kernels, compiled) against the CPU's torch paths,
    at scales 1 and 1e3, and under CUDA autocast."""
    generator = torch.Generator().manual_seed(6)
    mask = torch.rand(64, 50, generator=generator) > 0.1
    mask[:, 0] = True
    u = bounds(generator, (64, 50), "tight").to(dtype)
    cotangent = torch.randn(64, 50, generator=generator).to(dtype)
    assert _sparse_triton.usable(u.cuda())
    eps = torch.finfo(dtype).eps
    for scale in (1, 1e3):
        z = (torch.randn(64, 50, generator=generator, dtype=torch.float64) * scale).to(dtype)
        expected = outputs_and_grads(z, u, mask, cotangent)
        got = outputs_and_grads(z.cuda(), u.cuda(), mask.cuda(), cotangent.cuda())
        for ours, theirs in zip(got, expected, strict=True):
            torch.testing.assert_close(ours.cpu(), theirs, atol=max(eps, 1e-5), rtol=eps)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert centmax15(z.cuda(), u.float().cuda()).dtype == torch.float32
        assert entmax15(z.cuda()).dtype == torch.float32
