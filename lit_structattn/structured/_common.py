"""Helpers shared by the structured distributions: the semirings their programs run in, input
checks, and the local autograd set-up used to compute marginals and argmaxes as gradients.

Each distribution writes its dynamic program once, over items in log space, and runs it in a
:class:`Semiring`. In :data:`LOG` the program gives the log-partition, whose gradient w.r.t. the
scores is the marginals. In :data:`MAX` it gives the best score, and because ``max`` over a
dimension routes the whole gradient to a single index (never splitting ties), its gradient is the
0/1 indicator of one best structure. In :data:`ENTROPY` (Li & Eisner 2009) it gives the entropy
of the distribution, from local log-probabilities only: no difference of large score sums.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from ..common.checks import check_int_tensor
from ..common.precision import compute_dtype


def _same(scores: Tensor) -> Tensor:
    return scores


@dataclass(frozen=True)
class Semiring:
    """A semiring over log-space items: the product of two items is their sum ``a + b``
    (elementwise, so that a program is written with ``+``), ``sum(x, dim)`` is the semiring sum
    over a dimension, and ``lift(scores)`` makes items of real scores (after the program has
    raised ``-inf`` scores to a finite floor)."""

    sum: Callable[[Tensor, int], Tensor]
    lift: Callable[[Tensor], Tensor] = _same

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        """The semiring sum of two tensors.

        Not ``torch.logaddexp`` (double backward NaN once ``|a - b|`` exceeds the ``exp``
        range) nor ``torch.maximum`` (splits the gradient of ties, mixing two structures).
        """
        return self.sum(torch.stack([a, b]), 0)


def max_reduce(x: Tensor, dim: int) -> Tensor:
    """Max over ``dim``; the gradient goes to exactly one index (the first maximum)."""
    return x.max(dim).values


# Terms more than ``log(eps) - 10`` nats below the largest (about -26 in float32, -46 in float64)
# change a sum of up to a few thousand terms by far less than its rounding, and clamping them
# there keeps ``exp`` off its (~100x slower) underflow path on CPU, which padding (identity
# matrices with ~-inf off the diagonal) and forbidden transitions would otherwise hit; nor can
# their products with gradients reach the slow denormal range in the backward pass.
def _log_floor(dtype: torch.dtype) -> float:
    return math.log(torch.finfo(dtype).eps) - 10.0


def clamped_logsumexp(x: Tensor, dim: int) -> Tensor:
    """``log(sum(exp(x), dim))``, stable, twice differentiable, fast on CPU.

    The shift is detached (the result does not depend on it), so the backward pass is just the
    softmax weights ``exp(x - result)``; terms far below the largest are clamped (see
    :func:`_log_floor`), a relative change far below the floating-point resolution.
    """
    shift = x.detach().amax(dim, keepdim=True)
    return (x - shift).clamp_min(_log_floor(x.dtype)).exp().sum(dim).log() + shift.squeeze(dim)


def _entropy_sum(x: Tensor, dim: int) -> Tensor:
    """:data:`ENTROPY` sum over ``dim`` of items ``log w + i H``: ``log sum w`` and the entropy
    of the mixture, ``sum q (H - log q)`` with ``q = w / sum w``. Items with ``q = 0`` (a
    floored ``-inf`` score) add exactly 0, with a finite gradient."""
    log_w, entropy = x.real, x.imag
    total = torch.logsumexp(log_w, dim)
    log_q = log_w - total.unsqueeze(dim)
    return torch.complex(total, (log_q.exp() * (entropy - log_q)).sum(dim))


def _entropy_items(scores: Tensor) -> Tensor:
    return torch.complex(scores, torch.zeros_like(scores))


#: Log-sum-exp: ``torch.logsumexp`` (one fused op), the fastest where the items are rarely far
#: below each other (measured on the dependency chart).
LOG = Semiring(torch.logsumexp)
#: :data:`LOG` with :func:`clamped_logsumexp`, the fastest where many items are ~-inf (the padding
#: of the chain CRF).
CLAMPED_LOG = Semiring(clamped_logsumexp)
#: Max, with the whole gradient on one index (see :func:`max_reduce`).
MAX = Semiring(max_reduce)
#: The entropy semiring, items ``log w + i H`` stored as complex numbers (real part: log weight
#: of a set of partial structures; imaginary part: the entropy of the distribution over it),
#: so that the product, ``(a + b, H_a + H_b)`` (independent parts), is still ``+``. A score is
#: an item of entropy 0, and so are the real constants a program writes (its floor, its zeros).
#: The result's imaginary part is the entropy, its real part the log-partition.
ENTROPY = Semiring(_entropy_sum, _entropy_items)


def check_lengths(
    lengths: object, batch: int, maximum: int, owner: str, device: torch.device
) -> Tensor:
    """Return ``lengths`` as a long tensor ``[B]`` (all ``maximum`` when None), checking that
    every entry lies in ``[1, maximum]``."""
    if lengths is None:
        return torch.full((batch,), maximum, dtype=torch.long, device=device)
    check_int_tensor(lengths, "lengths", owner)
    if lengths.shape != (batch,):
        raise ValueError(
            f"{owner}: lengths must have shape [{batch}] (one per batch element), got "
            f"{list(lengths.shape)}"
        )
    lengths = lengths.to(device=device, dtype=torch.long)
    bad = (lengths < 1) | (lengths > maximum)
    if bad.any():
        index = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{owner}: lengths must lie in [1, {maximum}], got {int(lengths[index])} at "
            f"batch index {index}"
        )
    return lengths


def check_indices(
    values: object, shape: tuple[int, ...], name: str, owner: str, device: torch.device
) -> Tensor:
    """Return ``values`` as a long tensor after checking it is an integer tensor of ``shape``."""
    check_int_tensor(values, name, owner)
    if values.shape != shape:
        raise ValueError(
            f"{owner}: {name} must have shape {list(shape)}, got {list(values.shape)}"
        )
    return values.to(device=device, dtype=torch.long)


def precision(scores: Tensor, *others: Tensor) -> tuple[torch.dtype, torch.dtype]:
    """``(compute dtype, result dtype)`` of a distribution over ``scores`` and ``others``.

    Computation is in float64 if any of the tensors is float64, otherwise in float32 (half
    precision is widened). Results take the dtype of ``scores``, except under ``torch.autocast``
    on their device, where they keep the compute dtype (as autocast treats ``logsumexp`` and
    ``softmax``); the inference then runs with
    :func:`lit_structattn.common.precision.autocast_off`.
    """
    compute = compute_dtype(scores, *others)
    if torch.is_autocast_enabled(scores.device.type):
        return compute, compute
    return compute, scores.dtype


def tracks_grad(*tensors: Tensor) -> bool:
    """Whether results computed now from ``tensors`` should carry an autograd graph."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


@contextlib.contextmanager
def local_autograd() -> Iterator[None]:
    """Autograd on, also inside ``torch.no_grad()`` and ``torch.inference_mode()`` (where
    Lightning runs validation and test), for computing marginals and argmaxes as gradients."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


def widened(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """``tensor`` cast to the compute ``dtype`` with autograd on, so that it keeps its graph
    whatever the grad mode of the moment. Cast each input once and cache the result: every
    result then reaches the input through this one cast, and the gradient of a half-precision
    input is rounded to its dtype once, not once per result (rounded terms that cancel would
    leave only their rounding errors)."""
    if tensor.dtype == dtype:
        return tensor
    with local_autograd():
        return tensor.to(dtype)


def as_grad_input(tensor: Tensor, track: bool) -> Tensor:
    """``tensor`` itself when its graph is to be kept, else a detached copy requiring grad, so
    that ``torch.autograd.grad`` can differentiate w.r.t. it in any case (an inference-mode
    tensor is cloned into a normal one). Call inside :func:`local_autograd`."""
    if track and tensor.requires_grad:
        return tensor
    if tensor.is_inference():
        return tensor.clone().requires_grad_()
    return tensor.detach().requires_grad_()
