"""alpha-entmax (Peters, Niculae & Martins, 2019), with a learnable alpha (Correia, Niculae &
Martins, 2019).

``entmax_alpha(z) = argmax_{p in simplex} p.z + H_alpha(p)`` with the Tsallis entropy
``H_alpha(p) = sum_j (p_j - p_j^alpha) / (alpha (alpha - 1))``, for alpha in [1, 2]. The solution
is ``p_i = [(alpha - 1) z_i - tau]_+^(1 / (alpha - 1))`` with tau making the row sum to 1;
alpha = 1 is softmax, alpha = 2 is sparsemax (:func:`~.sparsemax.sparsemax`). With
``x = (alpha - 1) (z - max z)`` the threshold lies in ``[-1, -L^(1 - alpha)]`` (at -1 the
largest coordinate alone has mass 1, at ``-L^(1 - alpha)`` every coordinate has at most 1/L).

* alpha = 1.5, exactly: on a support S the threshold has a closed form (the smaller root of
  ``sum_S (x_i - tau)^2 = 1``). Starting from tau = -1 and S = {x > tau}, the closed form on S
  and the new S = {x > tau} alternate like Michelot's algorithm for sparsemax: tau only grows,
  never passes the solution, and an unchanged support means the exact answer. Rows not settled
  after a few passes are solved by sorting (Peters et al.'s Algorithm 2). The last closed form
  uses the two-pass variance, exact to rounding however flat the support.
* other alpha (a float, or a tensor per row or per head): bisection on tau over that bracket,
  in the compute dtype, down to a thousandth of it, then Newton's method from the bracket's low
  end to the resolution of the dtype (the mass is convex in tau, so Newton from below never
  passes the root and converges quadratically from that close), and the output renormalised on
  the support found. Only the coordinates above -1 can be in the support; on long rows the
  iterations run on them alone.

On CUDA alpha = 1.5 (a float) is one Triton kernel per direction, shared with sparsemax
(:mod:`._sparse_triton`: the threshold by a safeguarded Newton/bisection in registers, every
row certified on the device, the rare uncertified row solved again by the torch path above);
other alpha, and a tensor alpha, run the torch path on every device.

The backward pass is the closed form ``dz = s * (g - sum(s g) / sum(s))``, ``s = p^(2 - alpha)``
on the support; for a tensor alpha, ``dp_i / dalpha = k (w_i - s_i sum(w) / sum(s))`` with
``k = 1 / (alpha - 1)`` and ``w = k p - p log p`` (Correia et al., Prop. 1), and its limit
``-p_i (log^2 p_i - sum_j p_j log^2 p_j) / 2`` at alpha = 1.

Contract as for every transform (:mod:`._checks`): masks, any ``dim``, half precision computed
in float32 (also under autocast), NaN / ``+inf`` rows NaN, ``-inf`` scores masked.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import _sparse_triton
from ._checks import check_scores, run_transform
from ._threshold import center, checks_every_pass, solve_threshold
from .sparsemax import sparsemax

Alpha = float | Tensor


def tsallis_exponent(alpha: Alpha) -> Alpha:
    """``1 / (alpha - 1)``, the exponent of ``[x - tau]_+`` (alpha > 1)."""
    return 1 / (alpha - 1)


def power(y: Tensor, exponent: Alpha) -> Tensor:
    """``y ** exponent`` for ``y >= 0``; a square by multiplication (the alpha = 1.5 case)."""
    if isinstance(exponent, float) and exponent == 2.0:
        return y * y
    return y.pow(exponent)


def bisect_threshold(mass: Callable[[Tensor], Tensor], low: Tensor, high: Tensor,
                     passes: int | None = None, every_pass: bool | None = None
                     ) -> tuple[Tensor, Tensor]:
    """The bracket ``(low, high)`` (each ``[..., 1]``) of the threshold tau with
    ``mass(tau) = 1``, for a ``mass`` decreasing in tau with ``mass(low) >= 1 >= mass(high)``.

    Bisection for ``passes`` passes, or by default until no row's bracket can shrink (checked
    every pass where that is free, see :func:`~._threshold.checks_every_pass`) or for
    ``2 * mantissa + 16`` passes, enough to go from a bracket of width 1e4 to the resolution of
    a threshold of 1e-5. Each pass halves the width and moves ``low`` up where the mass at
    its new middle is still at least 1.
    """
    converging = passes is None and (checks_every_pass(low) if every_pass is None
                                     else every_pass)
    if passes is None:
        passes = int(-2 * math.log2(torch.finfo(low.dtype).eps)) + 16
    width = high - low
    for _ in range(passes):
        width = width / 2
        middle = low + width
        if converging and bool((middle == low).all()):
            break
        low = torch.where(mass(middle) >= 1, middle, low)
    return low, low + width


BISECTION_PASSES = 10  # then the bracket is 1/1024 of [-1, -L^(1 - alpha)]
NEWTON_PASSES = 8  # at most; from there Newton converges quadratically


def newton_from_below(x: Tensor, exponent: Alpha, tau: Tensor,
                      every_pass: bool | None = None) -> Tensor:
    """Newton's method for ``sum_i [x_i - tau]_+^exponent = 1`` from ``tau [..., 1]`` below the
    root, for at most :data:`NEWTON_PASSES` passes (on the CPU until no row moves by more than
    a few units in the last place of tau, see :func:`~._threshold.checks_every_pass`).

    The mass is convex and decreasing in tau (``exponent >= 1``), so its tangent lies below it:
    every Newton step lands between tau and the root, never past it (rounding aside: steps are
    never taken backwards). ``x``: ``[..., K]``, ``-inf`` where masked.
    """
    every_pass = checks_every_pass(tau) if every_pass is None else every_pass
    eps, tiny = torch.finfo(tau.dtype).eps, torch.finfo(tau.dtype).tiny
    for _ in range(NEWTON_PASSES):
        y = torch.relu(x - tau)
        slope = power(y, exponent - 1) * y.sign()  # 0 off the support, also for exponent 1
        excess = (slope * y).sum(-1, keepdim=True) - 1
        step = (excess / (exponent * slope.sum(-1, keepdim=True)).clamp_min(tiny)).clamp_min(0)
        tau = tau + step
        if every_pass and bool((step <= 4 * eps * tau.abs()).all()):
            break
    return tau


def entmax_by_bisection(x: Tensor, alpha: Alpha, count: Tensor) -> Tensor:
    """alpha-entmax ``[..., L]`` of ``x = (alpha - 1) * centered scores`` (``-inf`` at masked
    positions; ``count [..., 1]`` valid positions per row; ``alpha`` a float or ``[..., 1]``):
    :data:`BISECTION_PASSES` passes of :func:`bisect_threshold`, then Newton's method from the
    bracket's low end (:func:`newton_from_below`) to the resolution of the dtype, and the output
    renormalised on the support found. Empty rows give zeros.

    Only the coordinates above -1 ever carry mass; when at most half of the row is, the
    iterations run on them alone (gathered by ``topk``: ``[..., K]``, K the widest row's).
    """
    exponent = tsallis_exponent(alpha)
    low = torch.full_like(count, -1.0)
    high = -count.clamp_min(1) ** (1 - alpha)
    width = int((x > -1).sum(-1).max())  # only these coordinates have mass above tau = -1
    narrow = x.topk(width, dim=-1, sorted=False).values if width <= x.shape[-1] // 2 else x
    low, _ = bisect_threshold(
        lambda t: power(torch.relu(narrow - t), exponent).sum(-1, keepdim=True), low, high,
        BISECTION_PASSES)
    tau = newton_from_below(narrow, exponent, low)
    p = power(torch.relu(x - tau), exponent)
    return p / p.sum(-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


def entmax15_threshold_on(x: Tensor, support: Tensor) -> Tensor:
    """tau ``[..., 1]`` with ``sum_{support} (x_i - tau)^2 = 1`` (the smaller root; the mean if
    there is none), for ``x [..., L]`` finite and ``support`` float 0/1 ``[..., L]``. The
    variance is taken about the mean (two passes), so that ``1 - n var`` keeps its digits."""
    size = support.sum(-1, keepdim=True).clamp_min(1)
    mean = (x * support).sum(-1, keepdim=True) / size
    spread = (torch.square(x - mean) * support).sum(-1, keepdim=True)  # n var
    return mean - ((1 - spread).clamp_min(0) / size).sqrt()


def entmax15_threshold_iterative(x: Tensor, max_iter: int, every_pass: bool | None = None
                                 ) -> tuple[Tensor, Tensor]:
    """The support iteration for 1.5-entmax: tau ``[..., 1]`` and whether it converged.

    ``x``: ``[..., L]`` halved centered scores (maximum 0), ``-inf`` at masked positions. From
    tau = -1 (below the solution), each pass takes the closed form on ``S = {x > tau}``: it lies
    between tau and the solution, so S only shrinks, and an unchanged S is exact. The passes
    take the variance in one pass (the support decides, and a coordinate it misjudges carries
    no mass to speak of); the caller solves the final support with
    :func:`entmax15_threshold_on`. ``every_pass`` as for
    :func:`~.sparsemax.sparsemax_threshold_iterative`.
    """
    every_pass = checks_every_pass(x) if every_pass is None else every_pass
    x = x.clamp_min(-2)  # finite; coordinates below -1 never matter
    tau = torch.full_like(x[..., :1], -1.0)
    size = torch.full_like(tau, -1.0)
    converged = torch.zeros_like(tau, dtype=torch.bool)
    for _ in range(max_iter):
        support = torch.relu(x - tau).sign()
        new_size = support.sum(-1, keepdim=True)
        converged = new_size == size
        if every_pass and bool(converged.all()):
            break
        mean = (x * support).sum(-1, keepdim=True) / new_size.clamp_min(1)
        spread = (x.square() * support).sum(-1, keepdim=True) - new_size * mean.square()
        step = mean - ((1 - spread).clamp_min(0) / new_size.clamp_min(1)).sqrt()
        tau = step if every_pass else torch.where(converged, tau, step)
        size = new_size
    return tau, converged


def entmax15_threshold(x: Tensor) -> Tensor:
    """tau ``[..., 1]`` of 1.5-entmax by sorting (Peters et al. 2019, Algorithm 2): the closed
    form for every support size k at once, the support the largest k whose k-th coordinate
    lies above its threshold. ``x`` as for :func:`entmax15_threshold_iterative`; rows with no
    valid position get ``+inf``."""
    x_sorted = x.sort(dim=-1, descending=True).values
    is_real = torch.isfinite(x_sorted)
    x_sorted = x_sorted.masked_fill(~is_real, 0)
    k = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype)
    mean = x_sorted.cumsum(-1) / k
    spread = x_sorted.square().cumsum(-1) - k * mean.square()  # k var, one pass
    tau = mean - ((1 - spread).clamp_min(0) / k).sqrt()
    support_size = (is_real & (tau <= x_sorted)).sum(-1, keepdim=True)
    tau = tau.gather(-1, (support_size - 1).clamp_min(0))
    return tau.masked_fill(support_size == 0, torch.inf)


def entmax15_solve(x: Tensor) -> Tensor:
    """1.5-entmax ``[..., L]`` of the halved centered scores ``x`` (``-inf`` masked): the
    support iteration, the sort where it has not settled, and the closed form on the support
    found."""
    tau = solve_threshold(entmax15_threshold_iterative, entmax15_threshold, x)
    tau = entmax15_threshold_on(x.clamp_min(-2), torch.relu(x - tau).sign())
    return torch.square(torch.relu(x - tau))


def softmax_rows(z: Tensor, valid: Tensor | None) -> Tensor:
    """Softmax ``[..., L]`` over the valid positions; zeros for a row with none."""
    e = torch.exp(center(z, valid))
    if valid is not None:
        e = e * valid
    return e / e.sum(-1, keepdim=True).clamp_min(torch.finfo(z.dtype).tiny)


def solve(z: Tensor, alpha: Alpha, valid: Tensor | None) -> Tensor:
    """alpha-entmax ``[..., L]`` of the scores ``z [..., L]`` over the ``valid`` positions for a
    float ``alpha`` in [1, 2) or a tensor ``[..., 1]`` (rows with alpha = 1 take softmax)."""
    if isinstance(alpha, float) and alpha == 1.0:
        return softmax_rows(z, valid)
    x = center(z, valid)
    if valid is not None:
        x = x.masked_fill(~valid, -torch.inf)
    if isinstance(alpha, float) and alpha == 1.5:
        return entmax15_solve(x / 2)
    count = torch.full_like(z[..., :1], z.shape[-1]) if valid is None else \
        valid.sum(-1, keepdim=True).to(z.dtype)
    if isinstance(alpha, float):
        return entmax_by_bisection((alpha - 1) * x, alpha, count)
    softmax = alpha == 1
    bounded = alpha.masked_fill(softmax, 2.0)  # any alpha > 1: those rows are replaced
    p = entmax_by_bisection((bounded - 1) * x, bounded, count)
    return torch.where(softmax, softmax_rows(z, valid), p) if bool(softmax.any()) else p


def alpha_gradient(grad: Tensor, p: Tensor, s: Tensor, alpha: Tensor) -> Tensor:
    """``sum_i grad_i dp_i / dalpha`` ``[..., 1]`` (Correia et al. 2019, Prop. 1) for the output
    ``p [..., L]``, ``s = p^(2 - alpha)`` on the support, ``alpha [..., 1]``; at alpha = 1 the
    limit ``-(sum g p log^2 p - sum g p * sum p log^2 p) / 2``."""
    softmax = alpha == 1
    k = tsallis_exponent(alpha.masked_fill(softmax, 2.0))
    w = k * p - torch.xlogy(p, p)
    s_mass = s.sum(-1, keepdim=True).clamp_min(torch.finfo(p.dtype).tiny)
    general = k * ((grad * w).sum(-1, keepdim=True)
                   - (grad * s).sum(-1, keepdim=True) * w.sum(-1, keepdim=True) / s_mass)
    if not bool(softmax.any()):
        return general
    log_square = p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny)).square()
    limit = -((grad * log_square).sum(-1, keepdim=True)
              - (grad * p).sum(-1, keepdim=True) * log_square.sum(-1, keepdim=True)) / 2
    return torch.where(softmax, limit, general)


def fused(z: Tensor, alpha: Alpha) -> bool:
    """Whether the Triton kernels take 1.5-entmax of ``z [..., L]`` (see
    :func:`._sparse_triton.usable`): for a float alpha of 1.5 on CUDA."""
    return isinstance(alpha, float) and alpha == 1.5 and _sparse_triton.usable(z)


def entmax15_rows(z: Tensor, u: None, valid: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(p, state)`` for the rows the Triton kernel did not certify (see
    :func:`._sparse_triton.forward`)."""
    p = solve(z, 1.5, valid)
    return p, (p > 0).to(torch.int8)


class EntmaxFunction(torch.autograd.Function):
    """alpha-entmax over the last dimension, with the closed-form backward for the scores
    and, when alpha is a tensor ``[..., 1]``, for alpha; on CUDA at alpha = 1.5 by the Triton
    kernels."""

    @staticmethod
    def forward(ctx, z: Tensor, valid: Tensor | None, alpha: Alpha) -> Tensor:
        # every attribute first: under torch.compile, a graph break further down (the Triton
        # check) loses the ones set after it
        ctx.alpha = None if isinstance(alpha, Tensor) else alpha
        ctx.alpha_dtype = alpha.dtype if isinstance(alpha, Tensor) else None
        ctx.fused = fused(z, alpha)
        if ctx.fused:
            p, state = _sparse_triton.forward(z, None, valid, entmax15_rows, "entmax",
                                              square=True)
            ctx.save_for_backward(p, state)
            return p
        rows_alpha = alpha.to(z.dtype) if isinstance(alpha, Tensor) else alpha
        p = solve(z, rows_alpha, valid)
        ctx.save_for_backward(p, *([rows_alpha] if isinstance(alpha, Tensor) else []))
        return p

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, Tensor | None]:
        if ctx.fused:
            p, state = ctx.saved_tensors
            return _sparse_triton.backward(grad, state, False, out=p)[0], None, None
        p, *rows_alpha = ctx.saved_tensors
        alpha = rows_alpha[0] if rows_alpha else ctx.alpha
        if isinstance(alpha, float) and alpha == 1.5:
            s = p.sqrt()
        else:
            s = torch.where(p > 0, p.pow(2 - alpha), 0)
        s_mass = s.sum(-1, keepdim=True)
        mean = (grad * s).sum(-1, keepdim=True) / s_mass.clamp_min(torch.finfo(p.dtype).tiny)
        grad_z = s * (grad - mean)
        if not rows_alpha or not ctx.needs_input_grad[2]:
            return grad_z, None, None
        return grad_z, None, alpha_gradient(grad, p, s, alpha).to(ctx.alpha_dtype)


def check_alpha(alpha: Alpha, scores: Tensor, dim: int, name: str) -> Alpha:
    """``alpha`` as a float, or as a tensor ``[..., 1]`` of the rows (``dim`` moved last) with
    gradients flowing back to the given one; ``ValueError`` outside [1, 2] or when a tensor
    does not broadcast to ``scores`` with size 1 along ``dim``."""
    if not isinstance(alpha, Tensor):
        if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not 1 <= alpha <= 2:
            raise ValueError(f"{name}: alpha must be a number in [1, 2], got {alpha!r}")
        return float(alpha)
    if not alpha.is_floating_point():
        raise ValueError(f"{name}: alpha must be a floating-point tensor, got {alpha.dtype}")
    if scores.dim() and -scores.dim() <= dim < scores.dim():
        rows = list(scores.shape)
        rows[dim] = 1
        try:
            fits = list(torch.broadcast_shapes(alpha.shape, rows)) == rows
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"{name}: alpha of shape {list(alpha.shape)} does not broadcast to "
                             f"the rows {rows} of scores (size 1 along dim={dim})")
        alpha = alpha.expand(rows).movedim(dim, -1)
    if bool(((alpha < 1) | (alpha > 2) | alpha.isnan()).any()):
        raise ValueError(f"{name}: every alpha must lie in [1, 2]")
    return alpha


def entmax(scores: Tensor, alpha: Alpha = 1.5, dim: int = -1,
           mask: Tensor | None = None) -> Tensor:
    """alpha-entmax of ``scores`` along ``dim``: softmax at alpha = 1, sparsemax at 2, sparse
    in between (exact zeros below the threshold).

    Args:
        scores: ``[..., L, ...]`` floating scores.
        alpha: a number in [1, 2], or a floating tensor of values in [1, 2] broadcastable to
            the rows of ``scores`` (size 1 along ``dim``, e.g. ``[B, H, 1, 1]`` per head of
            ``[B, H, T, L]`` scores), differentiable (Correia et al. 2019).
        dim: the dimension over which the output sums to 1.
        mask: bool, broadcastable to ``scores``; True = valid. Masked positions get exactly 0
            (and 0 gradient); a slice with no valid position gets all zeros.
    Returns:
        ``p`` of the shape of ``scores``, ``p >= 0``, summing to 1 along ``dim``.
    Raises:
        ValueError: alpha outside [1, 2] or of a shape that does not fit; non-floating
            ``scores``, a non-bool or non-broadcastable ``mask``, or a bad ``dim``.
    """
    check_scores(scores, "entmax")
    alpha = check_alpha(alpha, scores, dim, "entmax")
    if isinstance(alpha, float) and alpha == 2.0:
        return sparsemax(scores, dim=dim, mask=mask)
    return run_transform(EntmaxFunction, "entmax", scores, None, dim, mask, options=(alpha,),
                         checks_itself=lambda z: fused(z, alpha))


def entmax15(scores: Tensor, dim: int = -1, mask: Tensor | None = None) -> Tensor:
    """:func:`entmax` with alpha = 1.5 (its exact fast path)."""
    return entmax(scores, 1.5, dim=dim, mask=mask)
