"""Helpers shared by the structured distributions: input checks, the max reduction, and the
local autograd set-up used to compute marginals and argmaxes as gradients.

Both distributions compute a log-partition by dynamic programming; the gradient of the result
w.r.t. the scores is the marginals. The same program with ``max`` in place of log-sum-exp gives
the best score, and because ``max`` over a dimension routes the whole gradient to a single index
(never splitting ties), its gradient is the 0/1 indicator of one best structure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from ..common.checks import check_int_tensor
from ..common.precision import autocast_off, compute_dtype


def max_reduce(x: Tensor, dim: int) -> Tensor:
    """Max over ``dim``; the gradient goes to exactly one index (the first maximum)."""
    return x.max(dim).values


def very_negative(dtype: torch.dtype) -> float:
    """A finite stand-in for log(0) (and for ``-inf`` scores, which would make log-sum-exps
    and their gradients NaN): far below any score, yet a sum of 2**32 of them is finite."""
    return torch.finfo(dtype).min / 2**32


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


def inference_log_partition(distribution: object, kernel_serves: bool, device: torch.device,
                            torch_program: Callable[[], Tensor]) -> Tensor:
    """``[B]`` log Z of a structured distribution, in its compute dtype: the first element of its
    cached ``_inference`` (log Z with the marginals) when that exists already or a compiled
    kernel serves it (exact, and faster than the torch program alone even though it computes
    the marginals too), otherwise ``torch_program()`` run with autocast off."""
    if "_inference" in vars(distribution) or kernel_serves:
        return distribution._inference[0]
    with autocast_off(device):
        return torch_program()


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
