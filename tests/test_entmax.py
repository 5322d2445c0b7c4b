"""alpha-entmax and constrained alpha-entmax (lit_structattn/attention/entmax.py, centmax.py).

Against independent float64 bisection references written here (300 passes on tau), at score
scales 1e-3 to 1e4 in every dtype, float32 within the README's tolerance
(``max(1e-5, 8 * sum over free coordinates of ulp32(|z_i - max z|))``); at alpha = 1 and 2
against softmax / sparsemax and csoftmax / csparsemax; gradients (scores, bounds, alpha) by
gradcheck in float64; the ``entmax`` package where both are right, and the inputs of its issue
#30 (logits around -1000 in half precision, where ``entmax_bisect`` returns NaN in bfloat16);
masks, ``-inf``/NaN, any ``dim``, autocast, infeasible rows, the fixed-pass (GPU) variants and
the fallbacks; the names in the registry.
"""

from __future__ import annotations

import importlib

import entmax as peer
import numpy as np
import pytest
import torch

from lit_structattn.attention import (
    _threshold,
    centmax,
    centmax15,
    csoftmax,
    csparsemax,
    entmax,
    entmax15,
    get_transform,
    masked_softmax,
    sparsemax,
)

# The modules, which the package's functions of the same names hide.
entmax_module = importlib.import_module("lit_structattn.attention.entmax")
centmax_module = importlib.import_module("lit_structattn.attention.centmax")

SCALES = [1e-3, 1e-1, 1, 10, 100, 1e3, 1e4]
ALPHAS = [1.1, 1.5, 1.7]
SHAPES = [(8, 7), (16, 50), (32, 400)]  # short rows, long rows, rows the bisection narrows


def bisection(mass, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """The largest tau in ``[low, high]`` with ``mass(tau) >= 1``, 300 float64 passes."""
    for _ in range(300):
        middle = (low + high) / 2
        enough = mass(middle) >= 1
        low, high = torch.where(enough, middle, low), torch.where(enough, high, middle)
    return low


def entmax_reference(z: torch.Tensor, alpha: float, valid: torch.Tensor | None = None
                     ) -> torch.Tensor:
    """alpha-entmax of the rows of ``z`` in float64 by bisection (softmax at alpha = 1)."""
    z = z.double()
    valid = torch.ones_like(z, dtype=torch.bool) if valid is None else valid
    z = z.masked_fill(~valid, -torch.inf)
    if alpha == 1:
        return torch.softmax(z, -1)
    x = (alpha - 1) * (z - z.amax(-1, keepdim=True))
    exponent = 1 / (alpha - 1)
    tau = bisection(lambda t: torch.relu(x - t).pow(exponent).sum(-1, keepdim=True),
                    torch.full_like(x[:, :1], -1.0), torch.zeros_like(x[:, :1]))
    return torch.relu(x - tau).pow(exponent)


def centmax_reference(z: torch.Tensor, u: torch.Tensor, alpha: float) -> torch.Tensor:
    """``argmax_{a in simplex, a <= u} a.z + H_alpha(a)`` in float64 by bisection on tau."""
    z, u = z.double(), u.double()
    x = (alpha - 1) * (z - z.amax(-1, keepdim=True))
    exponent = 1 / (alpha - 1)
    tau = bisection(
        lambda t: torch.minimum(torch.relu(x - t).pow(exponent), u).sum(-1, keepdim=True),
        x.amin(-1, keepdim=True) - 2, torch.zeros_like(x[:, :1]))
    return torch.minimum(torch.relu(x - tau).pow(exponent), u)


def tolerance(z: torch.Tensor, reference: torch.Tensor, u: torch.Tensor | None = None
              ) -> torch.Tensor:
    """``[rows]``: ``max(1e-5, 8 * sum_{free i} ulp32(|z_i - max z|))`` (the README's)."""
    gaps = (z.double() - z.double().amax(-1, keepdim=True)).abs().float()
    ulp = torch.from_numpy(np.spacing(gaps.numpy())).double()
    free = reference > 0 if u is None else (reference > 0) & (reference < u.double())
    return (8 * (ulp * free).sum(-1)).clamp_min(1e-5)


def assert_within(out: torch.Tensor, reference: torch.Tensor, tol: torch.Tensor) -> None:
    error = (out.double() - reference).abs().amax(-1)
    assert (error <= tol).all(), (int(error.argmax()), float(error.max()))
    assert ((out.double().sum(-1) - 1).abs() <= tol).all()


def bounds(generator: torch.Generator, shape: tuple[int, int], kind: str) -> torch.Tensor:
    """Feasible bounds: ``tight`` (about 4 / L, one bound 1, most bind), ``loose`` (sum 1.5) or
    ``zeros`` (a third exactly 0, sum 1.2)."""
    rows, length = shape
    u = torch.rand(shape, generator=generator, dtype=torch.float64)
    if kind == "tight":
        u = u * 4 / length
        u[:, 0] = 1
        return u
    if kind == "zeros":
        u[:, torch.randperm(length, generator=generator)[: length // 3]] = 0
    return u / u.sum(-1, keepdim=True) * (1.5 if kind == "loose" else 1.2)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_entmax_exact_at_every_scale(alpha, shape):
    generator = torch.Generator().manual_seed(0)
    for scale in SCALES:
        z = torch.randn(shape, generator=generator) * scale
        reference = entmax_reference(z, alpha)
        out = entmax(z, alpha)
        assert out.dtype == torch.float32 and (out >= 0).all()
        assert_within(out, reference, tolerance(z, reference))
        z64 = z.double() * 1.0001
        torch.testing.assert_close(entmax(z64, alpha), entmax_reference(z64, alpha),
                                   atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("alpha", [1.0, *ALPHAS, 2.0])
def test_half_precision_is_computed_in_float32(alpha, dtype):
    """Half inputs give half outputs equal to the float64 solution of the same half values, up
    to the output's rounding."""
    generator = torch.Generator().manual_seed(1)
    eps = torch.finfo(dtype).eps
    for scale in (1e-3, 1, 100, 1e4):
        z = (torch.randn(64, 30, generator=generator) * scale).to(dtype)
        out = entmax(z, alpha)
        assert out.dtype == dtype
        torch.testing.assert_close(out.double(), entmax_reference(z, alpha), atol=eps, rtol=eps)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_entmax_issue_30_logits_around_minus_1000(dtype):
    """entmax's issue #30: logits around -1000 in half precision (``entmax_bisect`` returns all
    NaN there in bfloat16). Ours, for every alpha, equals the float64 solution of the same
    values, and so does centmax."""
    generator = torch.Generator().manual_seed(30)
    z = (torch.randn(16, 10, generator=generator) * 3 - 1000).to(dtype)
    u = torch.full((16, 10), 0.3, dtype=dtype)
    eps = torch.finfo(dtype).eps
    for alpha in [1.0, 1.1, 1.3, 1.5, 1.7, 2.0]:
        out = entmax(z, alpha)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), entmax_reference(z, alpha), atol=eps, rtol=eps)
    for alpha in ALPHAS:
        out = centmax(z, u, alpha)
        torch.testing.assert_close(out.double(), centmax_reference(z, u, alpha), atol=eps,
                                   rtol=eps)


def test_alpha_one_is_softmax_and_two_is_sparsemax():
    generator = torch.Generator().manual_seed(2)
    z = torch.randn(20, 9, generator=generator) * 3
    mask = torch.rand(20, 9, generator=generator) > 0.3
    torch.testing.assert_close(entmax(z, 1.0, mask=mask), masked_softmax(z, mask=mask))
    assert torch.equal(entmax(z, 2.0, mask=mask), sparsemax(z, mask=mask))
    assert torch.equal(entmax(z, 2, mask=mask), sparsemax(z, mask=mask))
    # A tensor alpha takes the same values row by row, through bisection.
    alpha = torch.tensor([1.0, 2.0]).repeat(10)[:, None]
    per_row = entmax(z, alpha, mask=mask)
    torch.testing.assert_close(per_row[0::2], masked_softmax(z[0::2], mask=mask[0::2]))
    torch.testing.assert_close(per_row[1::2], sparsemax(z[1::2], mask=mask[1::2]))
    # Near the ends, the solution tends to theirs.
    torch.testing.assert_close(entmax(z, 1.0001), torch.softmax(z, -1), atol=1e-3, rtol=0)
    torch.testing.assert_close(entmax(z, 1.9999), sparsemax(z), atol=1e-3, rtol=0)


@pytest.mark.parametrize("kind", ["tight", "loose", "zeros"])
@pytest.mark.parametrize("shape", SHAPES[:2])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_centmax_exact_at_every_scale(alpha, shape, kind):
    generator = torch.Generator().manual_seed(3)
    for scale in SCALES:
        z = torch.randn(shape, generator=generator) * scale
        u = bounds(generator, shape, kind).float()
        reference = centmax_reference(z, u, alpha)
        out = centmax(z, u, alpha)
        assert (out >= 0).all() and (out <= u).all()
        assert_within(out, reference, tolerance(z, reference, u))


def test_centmax_at_the_ends_is_csoftmax_and_csparsemax():
    generator = torch.Generator().manual_seed(4)
    z = torch.randn(12, 8, generator=generator) * 2
    u = bounds(generator, (12, 8), "tight").float()
    assert torch.equal(centmax(z, u, 1.0), csoftmax(z, u))
    assert torch.equal(centmax(z, u, 2.0), csparsemax(z, u))
    torch.testing.assert_close(centmax(z, u, 1.001), csoftmax(z, u), atol=1e-3, rtol=0)
    torch.testing.assert_close(centmax(z, u, 1.999), csparsemax(z, u), atol=1e-3, rtol=0)
    loose = torch.full((12, 8), 2.0)  # bounds that never bind: entmax itself
    for alpha in ALPHAS:
        torch.testing.assert_close(centmax(z, loose, alpha), entmax(z, alpha))


@pytest.mark.parametrize("alpha", [1.05, 1.3, 1.5, 1.8])
def test_entmax_gradcheck_scores_and_alpha(alpha):
    generator = torch.Generator().manual_seed(5)
    z = (torch.randn(4, 7, generator=generator, dtype=torch.float64) * 2).requires_grad_()
    rows = torch.full((4, 1), alpha, dtype=torch.float64)
    rows[1] = 1.25  # a different alpha per row
    rows = rows.requires_grad_()
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[2, 3:] = False
    assert torch.autograd.gradcheck(lambda s, a: entmax(s, a, mask=mask), (z, rows))
    assert torch.autograd.gradcheck(lambda s: entmax(s, alpha, mask=mask), (z,))


def test_alpha_per_head_any_dim_and_its_gradient():
    """alpha ``[B, H, 1, 1]`` on ``[B, H, T, L]`` scores; the same along ``dim=1`` of the
    transposed scores; the gradient reaches alpha summed over each head's rows."""
    generator = torch.Generator().manual_seed(6)
    z = torch.randn(2, 3, 4, 5, generator=generator, dtype=torch.float64)
    alpha = (1 + torch.rand(1, 3, 1, 1, generator=generator, dtype=torch.float64)
             ).requires_grad_()
    out = entmax(z, alpha)
    for h in range(3):
        torch.testing.assert_close(out[:, h], entmax(z[:, h], float(alpha[0, h].detach())))
    moved = entmax(z.transpose(1, 3), alpha.transpose(1, 3), dim=1)
    torch.testing.assert_close(moved.transpose(1, 3), out)
    assert torch.autograd.gradcheck(lambda a: entmax(z, a), (alpha,))


def test_alpha_gradient_at_one_is_the_limit():
    """At alpha = 1 the gradient is the limit of Correia et al.'s formula: a one-sided
    difference quotient, and the gradient just above 1."""
    generator = torch.Generator().manual_seed(7)
    z = torch.randn(5, 9, generator=generator, dtype=torch.float64) * 2
    weights = torch.randn(5, 9, generator=generator, dtype=torch.float64)

    def alpha_grad(value: float) -> torch.Tensor:
        alpha = torch.full((5, 1), value, dtype=torch.float64, requires_grad=True)
        (entmax(z, alpha) * weights).sum().backward()
        return alpha.grad

    step = 1e-5  # (a smaller step loses the quotient to the rounding of p^(1 / (alpha - 1)))
    quotient = ((entmax(z, 1 + step) - entmax(z, 1.0)) * weights).sum(-1, keepdim=True) / step
    torch.testing.assert_close(alpha_grad(1.0), quotient, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(alpha_grad(1.0), alpha_grad(1 + 1e-6), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("alpha", [1.2, 1.5, 1.8])
def test_centmax_gradcheck_scores_and_bounds(alpha):
    generator = torch.Generator().manual_seed(8)
    z = (torch.randn(5, 8, generator=generator, dtype=torch.float64) * 2).requires_grad_()
    u = (torch.rand(5, 8, generator=generator, dtype=torch.float64) * 0.4 + 0.1
         ).requires_grad_()
    mask = torch.ones(5, 8, dtype=torch.bool)
    mask[3, 5:] = False
    assert torch.autograd.gradcheck(lambda s, b: centmax(s, b, alpha, mask=mask), (z, u))
    out = centmax(z, u, alpha, mask=mask)
    assert ((out > 0) & (out < u)).any() and (out == u).any()  # both sets are exercised


def test_against_the_entmax_package():
    """``entmax.entmax15`` and ``entmax.entmax_bisect`` where both are right: ordinary scores
    in float32, outputs and gradients."""
    generator = torch.Generator().manual_seed(9)
    z = torch.randn(64, 40, generator=generator) * 2
    weights = torch.randn(64, 40, generator=generator)
    for ours, theirs in [(entmax15, lambda s: peer.entmax15(s, -1)),
                         (lambda s: entmax(s, 1.3), lambda s: peer.entmax_bisect(s, 1.3, -1)),
                         (lambda s: entmax(s, 1.7), lambda s: peer.entmax_bisect(s, 1.7, -1))]:
        grads = []
        for transform in (ours, theirs):
            leaf = z.clone().requires_grad_()
            out = transform(leaf)
            (out * weights).sum().backward()
            grads.append((out.detach(), leaf.grad))
        torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-6, rtol=0)
        torch.testing.assert_close(grads[0][1], grads[1][1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("alpha", [1.3, 1.5])
def test_masks_negative_infinity_nan_and_empty_rows(alpha):
    z = torch.tensor([[-torch.inf, 0.0, 1.0, 0.5], [0.0, 1.0, 2.0, 3.0],
                      [torch.nan, 0.0, 1.0, 0.0], [torch.inf, 0.0, 1.0, 0.0],
                      [0.0, 1.0, 2.0, torch.nan]], requires_grad=True)
    mask = torch.tensor([[True] * 4, [True, True, False, False], [True] * 4, [True] * 4,
                         [True, True, True, False]])
    u = torch.full((5, 4), 0.6)
    for out in (entmax(z, alpha, mask=mask), centmax(z, u, alpha, mask=mask)):
        assert out[2].isnan().all() and out[3].isnan().all()
        assert out[0, 0] == 0 and (out[1, 2:] == 0).all() and out[4, 3] == 0
        torch.testing.assert_close(out[[0, 1, 4]].sum(-1), torch.ones(3))
        (out[[0, 1, 4]] * torch.randn(3, 4)).sum().backward()
        assert torch.isfinite(z.grad[[0, 1, 4]]).all() and z.grad[0, 0] == 0
        assert (z.grad[1, 2:] == 0).all() and z.grad[4, 3] == 0
        z.grad = None
    nothing = torch.zeros(2, 4, dtype=torch.bool)
    assert (entmax(torch.randn(2, 4), alpha, mask=nothing) == 0).all()
    assert (centmax(torch.randn(2, 4), torch.ones(2, 4), alpha, mask=nothing) == 0).all()
    masked = entmax(z.detach()[1:2], alpha, mask=mask[1:2])
    torch.testing.assert_close(masked[:, :2], entmax(z.detach()[1:2, :2], alpha))


def test_any_dim_and_autocast():
    generator = torch.Generator().manual_seed(10)
    z = torch.randn(3, 6, 4, generator=generator) * 3
    u = torch.rand(3, 6, 4, generator=generator) * 0.3 + 0.2
    for transform in (lambda s, b, **k: entmax(s, 1.3, **k), lambda s, b, **k: entmax15(s, **k),
                      lambda s, b, **k: centmax15(s, b, **k)):
        moved = transform(z, u, dim=1)
        torch.testing.assert_close(moved, transform(z.transpose(1, 2), u.transpose(1, 2))
                                   .transpose(1, 2))
        expected = transform(z.bfloat16().float(), u, dim=1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = transform(z.bfloat16(), u, dim=1)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, expected)


def test_bad_alpha_and_infeasible_rows_raise():
    z = torch.zeros(3, 4)
    for alpha in (0.9, 2.5, float("nan"), True, "1.5"):
        with pytest.raises(ValueError, match="alpha"):
            entmax(z, alpha)
    with pytest.raises(ValueError, match="alpha"):
        entmax(z, torch.tensor([[1.5], [2.5], [1.2]]))
    with pytest.raises(ValueError, match="does not broadcast"):
        entmax(z, torch.full((3, 4), 1.5))
    with pytest.raises(ValueError, match="floating"):
        entmax(z, torch.ones(3, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="fixed alpha"):
        centmax(z, torch.ones(3, 4), torch.tensor(1.5))
    u = torch.full((3, 4), 0.5)
    u[1] = 0.2
    for alpha in (1.0, 1.3, 1.5, 2.0):
        with pytest.raises(ValueError, match=r"row \(1,\)"):
            centmax(z, u, alpha)
    with pytest.raises(ValueError, match="sum to"):  # feasible only with the -inf position
        centmax15(torch.tensor([-torch.inf, 0.0, 1.0]), torch.full((3,), 0.45))


def test_fixed_passes_as_on_a_gpu_give_the_same_solution(monkeypatch):
    """With no early stop (on a GPU: a fixed number of passes, no host synchronization per
    pass) every path gives the same solution."""
    generator = torch.Generator().manual_seed(11)
    z = torch.randn(64, 50, generator=generator) * 5
    u = bounds(generator, (64, 50), "tight").float()
    alpha = 1 + torch.rand(64, 1, generator=generator)
    outputs = [entmax15(z), entmax(z, 1.3), entmax(z, alpha), centmax15(z, u), centmax(z, u, 1.3)]
    for module in (entmax_module, centmax_module):
        monkeypatch.setattr(module, "checks_every_pass", lambda t: False)
    fixed = [entmax15(z), entmax(z, 1.3), entmax(z, alpha), centmax15(z, u), centmax(z, u, 1.3)]
    for first, second in zip(outputs, fixed, strict=True):
        torch.testing.assert_close(first, second, atol=1e-6, rtol=0)


def test_the_fallbacks_agree(monkeypatch):
    """The 1.5 sort (entmax15: rows the support iteration leaves; centmax15: rows whose sets do
    not settle, in float64) gives the solution of the fast paths."""
    generator = torch.Generator().manual_seed(12)
    z = torch.randn(64, 50, generator=generator) * 3
    u = bounds(generator, (64, 50), "loose").float()
    fast = entmax15(z), centmax15(z, u)
    monkeypatch.setattr(_threshold, "MAX_ITER", 1)
    monkeypatch.setattr(centmax_module, "PASSES_15", 1)
    monkeypatch.setattr(centmax_module, "SET_ROUNDS", 1)
    torch.testing.assert_close(entmax15(z), fast[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(centmax15(z, u), fast[1], atol=1e-6, rtol=0)


def test_registered_by_name():
    generator = torch.Generator().manual_seed(13)
    z = torch.randn(4, 6, generator=generator)
    u = torch.full((4, 6), 0.3)
    assert get_transform("entmax15")(z).equal(entmax15(z))
    assert get_transform("entmax")(z).equal(entmax15(z))
    assert get_transform("entmax", alpha=1.3)(z, dim=-1).equal(entmax(z, 1.3))
    assert get_transform("centmax15")(z, upper=u).equal(centmax15(z, u))
    assert get_transform("centmax15").constrained and not get_transform("entmax").constrained
    with pytest.raises(ValueError, match="needs upper bounds"):
        get_transform("centmax15")(z)
    with pytest.raises(ValueError, match="takes no option alpha"):
        get_transform("sparsemax", alpha=1.5)
