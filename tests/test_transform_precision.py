"""The transforms are exact at every score scale and in every precision.

Against the float64 bisection references of the same (rounded) inputs, over score scales 1 to
1e4, shapes that drive every solver path (short rows: enumeration; rows longer than 16;
batches above ``COMPACT_ABOVE``: compaction), masks, and four kinds of bounds, through the
compiled and the torch solvers and the Triton kernels of CUDA, run in Triton's interpreter on
the CPU (the ``solver`` fixture). Tolerance for float32, from the issue
that asked for it: ``max(1e-5, 8 * sum over free coordinates of ulp32(|z_i - max z|))``, the
float32 resolution of what is free. Also: the reproducers of the bugs this replaced, float64
past the ``exp`` range, half precision and autocast, and NaN / inf scores.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lit_structattn.attention import (
    _csoftmax_triton,
    _sparse_triton,
    csoftmax,
    csparsemax,
    get_transform,
    sparsemax,
)
from lit_structattn.layers.attention import Attention
from tests.conftest import force_solver, force_triton
from tests.reference_transforms import csoftmax_ref, csparsemax_ref, sparsemax_ref

# The Triton kernels of each transform that has them; a transform joins by adding its module.
TRITON = {"sparsemax": _sparse_triton, "csparsemax": _sparse_triton, "csoftmax": _csoftmax_triton,
          "entmax15": _sparse_triton, "centmax15": _sparse_triton}


@pytest.fixture(params=["compiled", "torch", "triton"], autouse=True)
def solver(request, monkeypatch):
    """The compiled CPU solvers and the torch ones (as tests/conftest.py's ``solver``), and the
    Triton kernels in the interpreter (a test of a transform ``name`` without them is
    skipped)."""
    if request.param != "triton":
        force_solver(request.param, monkeypatch)
        return request.param
    name = request.node.callspec.params.get("name")
    if name and name not in TRITON:
        pytest.skip(f"{name} has no Triton kernel")
    force_triton(set(TRITON.values()), monkeypatch)
    # The interpreter runs one program at a time, numpy over its tile: larger tiles (still
    # many rows to a program) run the matrix several times faster.
    monkeypatch.setattr(_sparse_triton, "ELEMENTS", 2**14)
    return request.param


SCALES = [1, 3, 10, 30, 100, 300, 1e3, 1e4]
SHAPES = [(8, 7), (16, 50), (600, 64)]  # enumeration, long rows, compaction (> 2**15 scores)
BOUNDS = ["random", "tight", "zeros", "exact"]
REFERENCES = {"sparsemax": sparsemax_ref, "csoftmax": csoftmax_ref, "csparsemax": csparsemax_ref}


def make_bounds(rng: np.random.Generator, shape: tuple[int, int], kind: str) -> np.ndarray:
    """Feasible bounds of a kind: ``random`` (sum 1.05-3), ``tight`` (sum 1.001), ``zeros`` (a
    third exactly 0) or ``exact`` (dyadic, summing to exactly 1 in float32 and float64)."""
    rows, length = shape
    u = rng.uniform(0.05, 1, shape)
    if kind == "exact":
        units = np.floor(u / u.sum(-1, keepdims=True) * 2**16)
        units[:, 0] += 2**16 - units.sum(-1)
        return units / 2**16
    if kind == "zeros":
        u[:, rng.permutation(length)[: length // 3]] = 0
    total = 1.001 if kind == "tight" else rng.uniform(1.05, 3, (rows, 1))
    return u / u.sum(-1, keepdims=True) * total


def tolerance(z: np.ndarray, reference: np.ndarray, u: np.ndarray | None) -> np.ndarray:
    """``[rows]``: ``max(1e-5, 8 * sum_{free i} ulp32(|z_i - max z|))``."""
    gaps = np.abs(z - z.max(-1, keepdims=True)).astype(np.float32)
    free = reference > 0 if u is None else (reference > 0) & (reference < u)
    return np.maximum(1e-5, 8 * (np.spacing(gaps).astype(np.float64) * free).sum(-1))


def check_exact(name: str, z: torch.Tensor, u: torch.Tensor | None, mask: torch.Tensor | None
                ) -> None:
    """``name`` on float32 ``z``/``u`` sums to 1, lies in ``[0, u]`` and agrees with the float64
    reference of the same inputs within :func:`tolerance`, row by row over the valid positions.
    The reference sees padding as positions it must leave at 0: bound 0, and a score below
    every valid one."""
    transform = get_transform(name)
    out = transform(z, upper=u, mask=mask).double().numpy()
    valid = np.ones(z.shape, bool) if mask is None else mask.numpy()
    zd = z.double().numpy()
    filler = np.where(valid, zd, np.inf).min(-1, keepdims=True) - 2
    zd = np.where(valid, zd, filler)
    if u is None:
        reference, ud = REFERENCES[name](zd), None
    else:
        ud = np.where(valid, u.double().numpy(), 0.0)
        reference = REFERENCES[name](zd, ud)
    tol = tolerance(zd, reference, ud)
    assert (np.abs(out.sum(-1) - 1) <= tol).all(), np.abs(out.sum(-1) - 1).max()
    assert (out >= 0).all() and (ud is None or (out <= ud).all())
    error = np.abs(out - reference).max(-1)
    assert (error <= tol).all(), (error.argmax(), error.max(), tol[error.argmax()])
    assert (out[~valid] == 0).all()


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("kind", BOUNDS)
@pytest.mark.parametrize("name", ["csoftmax", "csparsemax"])
def test_constrained_exact_at_every_scale(name, kind, scale):
    rng = np.random.default_rng(int(scale) + 7 * BOUNDS.index(kind))
    for shape in SHAPES:
        z = torch.tensor(rng.normal(size=shape) * scale, dtype=torch.float32)
        u = torch.tensor(make_bounds(rng, shape, kind), dtype=torch.float32)
        check_exact(name, z, u, None)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_exact_at_every_scale_with_masks(name, scale):
    """Padded rows: the bounds of the valid positions are feasible on their own."""
    rng = np.random.default_rng(int(scale))
    for rows, length in SHAPES:
        lengths = rng.integers(1, length + 1, rows)
        mask = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
        z = torch.tensor(rng.normal(size=(rows, length)) * scale, dtype=torch.float32)
        u = np.zeros((rows, length))
        for b in range(rows):
            u[b, : lengths[b]] = make_bounds(rng, (1, int(lengths[b])), "random")[0]
            u[b, lengths[b]:] = rng.uniform(0, 5, length - lengths[b])  # ignored at padding
        upper = torch.tensor(u, dtype=torch.float32) if name != "sparsemax" else None
        check_exact(name, z, upper, mask)


def test_reproducers_of_the_float32_bugs():
    """The two rows the issue reported: a subnormal free mass (csoftmax) and a wrong fixing
    decision at scores of 1e3 that fixed every coordinate (csparsemax)."""
    out = csoftmax(torch.tensor([0.0, -90.0]), torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5]))
    z = [-950.1, -631.4, -509.0, -213.9, -699.6, 1914.7, -1707.1, 1046.0, 237.4, -541.0,
         -1319.0, -5.8, -358.1, -19.1, -329.3, -338.9, -2037.0]
    u = [0.07, 0.068, 0.064, 0.103, 0.058, 0.103, 0.069, 0.011, 0.017, 0.076,
         0.101, 0.087, 0.129, 0.122, 0.023, 0.07, 0.027]
    scores, upper = torch.tensor(z, requires_grad=True), torch.tensor(u, requires_grad=True)
    out = csparsemax(scores, upper)
    expected = csparsemax_ref(scores.detach().double().numpy(), upper.detach().double().numpy())
    np.testing.assert_allclose(out.detach().numpy(), expected, atol=1e-5)
    assert abs(float(out.detach().sum()) - 1) < 1e-5
    (out * torch.arange(17.0)).sum().backward()
    z64, u64 = (t.detach().double().requires_grad_() for t in (scores, upper))
    (csparsemax(z64, u64) * torch.arange(17.0)).sum().backward()
    torch.testing.assert_close(scores.grad, z64.grad.float())
    torch.testing.assert_close(upper.grad, u64.grad.float())
    assert upper.grad.abs().sum() > 0  # one coordinate is free, the others at a bound or 0


@pytest.mark.parametrize("name", ["csoftmax", "csparsemax"])
def test_float64_is_exact_past_the_exp_range(name):
    """Gaps of 800 nats (past float64's exp range) and scores of 1e6."""
    transform = get_transform(name)
    out = transform(torch.tensor([0.0, -800.0], dtype=torch.float64),
                    upper=torch.tensor([0.5, 1.0], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5], dtype=torch.float64))
    rng = np.random.default_rng(0)
    for scale in (1e3, 1e4, 1e6):
        z = rng.normal(size=(32, 40)) * scale
        u = make_bounds(rng, (32, 40), "random")
        ours = transform(torch.tensor(z), upper=torch.tensor(u)).numpy()
        reference = REFERENCES[name](z, u)
        np.testing.assert_allclose(ours, reference, atol=1e-9 * max(1.0, scale / 1e3))
        np.testing.assert_allclose(ours.sum(-1), 1, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_half_inputs_are_computed_in_float32(name, dtype):
    """Half inputs (scores and bounds) give half outputs equal to the float64 solution of the
    same half values, up to the rounding of the output."""
    transform = get_transform(name)
    rng = np.random.default_rng(1)
    eps = torch.finfo(dtype).eps
    for scale in (1, 100, 1e4):
        z = torch.tensor(rng.normal(size=(64, 30)) * scale).to(dtype)
        u = torch.tensor(make_bounds(rng, (64, 30), "random")).to(dtype)
        upper = u if transform.constrained else None
        out = transform(z, upper=upper)
        assert out.dtype == dtype
        zd, ud = z.double().numpy(), u.double().numpy()
        reference = REFERENCES[name](zd) if upper is None else REFERENCES[name](zd, ud)
        np.testing.assert_allclose(out.double().numpy(), reference, atol=eps, rtol=eps)
        if upper is not None:
            assert (out <= u).all()


@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_autocast_computes_in_float32_with_float32_bounds_and_masks(name):
    transform = get_transform(name)
    rng = np.random.default_rng(2)
    z = torch.tensor(rng.normal(size=(16, 20)) * 3, dtype=torch.float32)
    u = torch.tensor(make_bounds(rng, (16, 20), "tight"), dtype=torch.float32)
    mask = torch.ones(16, 20, dtype=torch.bool)
    upper = u if transform.constrained else None
    expected = transform(z.bfloat16().float(), upper=upper, mask=mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = transform(z.bfloat16(), upper=upper, mask=mask)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("transform", ["softmax", "sparsemax", "csoftmax", "csparsemax",
                                       "entmax15", "centmax15"])
def test_attention_layer_trains_under_autocast(transform):
    """The README's layer example under autocast: bf16 scores, float32 bounds and mask."""
    torch.manual_seed(0)
    layer = Attention(query_dim=16, key_dim=16, score="general", transform=transform)
    keys = torch.randn(2, 5, 16)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    upper = torch.ones(2, 5) if layer.constrained else None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        context, weights = layer(torch.randn(2, 16), keys, mask=mask, upper=upper)
    torch.testing.assert_close(weights.float().sum(-1), torch.ones(2), atol=1e-2, rtol=0)
    assert (weights[~mask] == 0).all()
    context.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax", "entmax15",
                                  "centmax15"])
def test_nan_and_positive_infinity_make_the_row_nan(name):
    """Like torch.softmax: a NaN or +inf score at a valid position gives a NaN row; other rows
    and NaN at masked positions are unaffected."""
    transform = get_transform(name)
    z = torch.tensor([[float("nan"), 0.0, 1.0], [0.0, 1.0, 2.0], [float("inf"), 0.0, 1.0],
                      [0.0, 1.0, float("nan")]])
    mask = torch.tensor([[True] * 3, [True] * 3, [True] * 3, [True, True, False]])
    u = torch.ones(4, 3) if transform.constrained else None
    out = transform(z, upper=u, mask=mask)
    assert out[0].isnan().all() and out[2].isnan().all()
    assert torch.isfinite(out[1]).all() and torch.isfinite(out[3]).all()
    torch.testing.assert_close(out[1], transform(z[1], upper=None if u is None else u[1]))
    assert out[3, 2] == 0


@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax", "entmax15",
                                  "centmax15"])
def test_negative_infinity_is_a_masked_position(name):
    transform = get_transform(name)
    z = torch.tensor([[-float("inf"), 0.0, 1.0], [-float("inf")] * 3], requires_grad=True)
    u = torch.full((2, 3), 0.8) if transform.constrained else None
    out = transform(z, upper=u)
    expected = transform(z.detach().nan_to_num(neginf=0.0), upper=u,
                         mask=torch.tensor([[False, True, True], [False] * 3]))
    torch.testing.assert_close(out, expected)
    (out * torch.randn(2, 3)).sum().backward()
    assert torch.isfinite(z.grad).all() and (z.grad[:, 0] == 0).all()
    if transform.constrained:  # the finite positions alone must be feasible
        with pytest.raises(ValueError, match="sum to"):
            transform(torch.tensor([-torch.inf, -torch.inf, 1.0]), upper=torch.full((3,), 0.8))


def test_sparsemax_is_exact_at_every_scale():
    rng = np.random.default_rng(3)
    for scale in SCALES:
        for shape in SHAPES:
            z = torch.tensor(rng.normal(size=shape) * scale, dtype=torch.float32)
            check_exact("sparsemax", z, None, None)
    assert sparsemax(torch.tensor([1e4, 1e4 - 0.5, -1e4])).tolist() == [0.75, 0.25, 0.0]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["sparsemax", "csoftmax", "csparsemax"])
def test_exact_on_cuda(name, dtype):
    """The torch solvers on a GPU, at every scale, and under CUDA autocast."""
    transform = get_transform(name)
    rng = np.random.default_rng(5)
    for scale in SCALES:
        for shape in SHAPES:
            z = torch.tensor(rng.normal(size=shape) * scale).to(dtype)
            u = torch.tensor(make_bounds(rng, shape, "random")).to(dtype)
            upper = u.cuda() if transform.constrained else None
            out = transform(z.cuda(), upper=upper).cpu()
            assert out.dtype == dtype
            expected = transform(z, upper=u if transform.constrained else None)
            eps = torch.finfo(dtype).eps
            torch.testing.assert_close(out, expected, atol=max(eps, 1e-5), rtol=eps)
    with torch.autocast("cuda", dtype=dtype if dtype != torch.float32 else torch.float16):
        scores = torch.randn(64, 30, device="cuda")
        upper = torch.ones(64, 30, device="cuda") if transform.constrained else None
        assert transform(scores, upper=upper).dtype == torch.float32
