"""Input checks, non-finite scores and dtype handling shared by the attention transforms.

Every transform works on the last dimension; the public wrappers move ``dim`` there, check
the inputs once, and run the computation in float32 when given half precision (or under
autocast), because sorting, cumulative sums and log-sum-exp lose too much in 16 bits.

Non-finite scores at valid positions: ``-inf`` is a masked position (exactly 0 weight and 0
gradient; a constrained row must then be feasible on its finite positions); ``NaN`` or
``+inf`` makes the whole row NaN, as ``torch.softmax`` does, so that bad input is never hidden.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from ..common.checks import check_float_tensor, describe
from ..common.precision import autocast_off, compute_dtype


def check_scores(scores: Tensor, name: str) -> None:
    """Raise ``ValueError`` unless ``scores`` is a floating tensor with at least one dimension."""
    check_float_tensor(scores, "scores", name)


def check_companion(other: Tensor | None, scores: Tensor, what: str, name: str) -> None:
    """Check that ``upper`` (floating) or ``mask`` (bool) broadcasts to ``scores``."""
    if other is None:
        return
    if not isinstance(other, Tensor):
        raise ValueError(f"{name}: {what} must be a tensor, got {describe(other)}")
    if what == "mask" and other.dtype != torch.bool:
        raise ValueError(f"{name}: mask must be a bool tensor (True = valid), got {other.dtype}")
    if what == "upper" and not other.is_floating_point():
        raise ValueError(f"{name}: upper must be a floating-point tensor, got {other.dtype}")
    try:
        shape = torch.broadcast_shapes(other.shape, scores.shape)
    except RuntimeError:
        shape = None
    if shape != scores.shape:
        raise ValueError(
            f"{name}: {what} of shape {list(other.shape)} does not broadcast to scores of shape "
            f"{list(scores.shape)}"
        )


def to_last(t: Tensor | None, dim: int, shape: torch.Size) -> Tensor | None:
    """Broadcast ``t`` to ``shape`` and move ``dim`` to the end (``None`` stays ``None``)."""
    if t is None:
        return None
    return t.expand(shape).movedim(dim, -1)


def check_feasible(upper: Tensor, valid: Tensor | None, name: str) -> None:
    """Raise ``ValueError`` naming the first row whose valid upper bounds sum to less than 1.

    Rows with no valid position at all are allowed: their output is all zeros.
    ``upper``/``valid``: ``[..., L]`` (the transform dimension last).
    """
    bounded = upper if valid is None else upper.masked_fill(~valid, 0)
    total = bounded.detach().clamp_min(0).sum(-1)
    nonempty = torch.ones_like(total, dtype=torch.bool) if valid is None else valid.any(-1)
    tolerance = torch.finfo(upper.dtype).eps ** 0.5
    bad = nonempty & (total < 1 - tolerance)
    if bool(bad.any()):
        row = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name}: the valid upper bounds of row {row} sum to {float(total[row]):.6g} < 1, so "
            "no distribution satisfies them (rows are indexed over the dimensions other than dim)"
        )


@contextlib.contextmanager
def float32_compute(scores: Tensor) -> Iterator[torch.dtype]:
    """Context in which the caller computes in float32 if ``scores`` is half or autocast is on.

    Yields the dtype the result should be returned in: float32 under autocast (like
    ``torch.softmax``'s autocast policy), otherwise the dtype of ``scores``.
    """
    autocasting = torch.is_autocast_enabled(scores.device.type)
    with autocast_off(scores.device):
        yield torch.float32 if autocasting else scores.dtype


def run_transform(
    function: type[torch.autograd.Function],
    name: str,
    scores: Tensor,
    upper: Tensor | None,
    dim: int,
    mask: Tensor | None,
    checks_itself: Callable[[Tensor], bool] | None = None,
    options: tuple[object, ...] = (),
) -> Tensor:
    """Check the inputs, move ``dim`` last, and apply ``function`` in a safe dtype.

    ``function.apply`` receives ``(z [..., L], valid [..., L] | None)`` for unconstrained
    transforms, or ``(z, upper [..., L], valid)`` when ``upper`` is given, followed by
    ``options`` (a transform's own parameters, such as entmax's alpha). Non-finite scores
    and infeasible bounds are handled here (each check a host synchronization), unless
    ``checks_itself(z)`` says that ``function`` applies the same rules to ``z`` itself (a GPU
    kernel that does it on the device). Returns a tensor of the shape of ``scores``.
    """
    check_scores(scores, name)
    check_companion(upper, scores, "upper", name)
    check_companion(mask, scores, "mask", name)
    if not -scores.dim() <= dim < scores.dim():
        raise ValueError(
            f"{name}: dim={dim} is out of range for scores of shape {list(scores.shape)}"
        )
    if scores.shape[dim] == 0:
        raise ValueError(f"{name}: dimension {dim} of scores (shape {list(scores.shape)}) is "
                         "empty; there is no distribution over zero positions")
    valid = to_last(mask, dim, scores.shape)
    with float32_compute(scores) as out_dtype:
        dtype = compute_dtype(scores) if upper is None else compute_dtype(scores, upper)
        z = scores.movedim(dim, -1).to(dtype)
        u = None if upper is None else to_last(upper, dim, scores.shape).to(dtype)
        broken = None
        if checks_itself is None or not checks_itself(z):
            z, valid, broken = screen_non_finite(z, valid)
            if u is not None:
                check_feasible(u, valid, name)
        inputs = (z, valid) if u is None else (z, u, valid)
        out = function.apply(*inputs, *options)
        if broken is not None:
            out = out.masked_fill(broken, torch.nan)
    return out.to(out_dtype).movedim(-1, dim)


def screen_non_finite(
    z: Tensor, valid: Tensor | None
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``(z, valid, broken)`` with ``-inf`` scores turned into masked positions and the rows
    that hold a NaN or ``+inf`` at a valid position zeroed and flagged in ``broken [..., 1]``
    (None when there is none), for the caller to fill with NaN. ``z``, ``valid``: ``[..., L]``.

    The common case (every valid score finite) costs one elementwise test and one reduction.
    Under ``torch.compile`` the screening runs unconditionally, without those host checks (they
    would break the graph): ``valid`` is then always a tensor and ``broken`` never None.
    """
    non_finite = ~torch.isfinite(z)
    if valid is not None:
        non_finite = non_finite & valid
    if torch.compiler.is_compiling():
        return _screened(z, valid, non_finite)
    if not bool(non_finite.any()):
        return z, valid, None
    z, valid, broken = _screened(z, valid, non_finite)
    return z, valid, broken if bool(broken.any()) else None


def _screened(z: Tensor, valid: Tensor | None, non_finite: Tensor
              ) -> tuple[Tensor, Tensor, Tensor]:
    """``(z, valid, broken)`` of :func:`screen_non_finite` for the ``non_finite [..., L]``
    valid positions: ``-inf`` ones masked, rows with a NaN or ``+inf`` flagged."""
    negative = non_finite & (z == -torch.inf)
    valid = ~negative if valid is None else valid & ~negative
    broken = (non_finite & ~negative).any(-1, keepdim=True)
    return z.masked_fill(non_finite, 0.0), valid, broken
