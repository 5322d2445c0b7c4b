"""The lazy protocol shared by the structured distributions (:class:`.LinearChainCRF`,
:class:`.DependencyCRF`): results computed on first access, cached, in the precision both
promise, from a few pieces that depend on the structure.

A subclass supplies its score tensors in the compute dtype (``_scores``), its dynamic program
(``_program``: the semiring sum over the structures of each batch element, written once for
every :class:`._common.Semiring`), the compiled kernel that may serve it (``_kernel_serves``,
``_kernel_inference``), the score of given structures with their checks (``_score``,
``_checked_structure``), how a best structure is read off the gradient of the best score
(``_structure_of``), and its entropy (``_entropy``). :class:`StructuredDistribution` derives:

* ``log_partition``: the program in the log semiring (or the kernel's log Z);
* ``marginals``: the compiled kernel's, otherwise the gradient of log Z w.r.t. the scores
  (``create_graph``, so they are differentiable);
* ``argmax``: the gradient of the program in the max semiring, a 0/1 indicator;
* ``entropy`` and ``log_prob(structure)`` = score - log Z.

Precision: everything is computed in float64 if any score tensor is float64, otherwise in
float32 (half precision is widened, see :func:`._common.precision`), with autocast disabled.
Floating-point results are returned in the dtype of the first score tensor, or in the compute
dtype when the distribution is built under ``torch.autocast`` on its device. Results are
differentiable w.r.t. the scores when one requires grad and grad mode is on at first access;
otherwise (also under ``torch.no_grad()`` or ``torch.inference_mode()``) they are plain
tensors, computed with autograd enabled locally on detached copies.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import cached_property
from typing import ClassVar

import torch
from torch import Tensor

from ..common.precision import autocast_off
from ._common import (
    LOG,
    MAX,
    Semiring,
    as_grad_input,
    check_lengths,
    local_autograd,
    precision,
    tracks_grad,
)

__all__ = ["StructuredDistribution", "gradient_inference"]


class StructuredDistribution(ABC):
    """A batch of distributions over structures, each ``p(y) = exp(score(y) - log Z)``.

    Args:
        lengths: ``[B]`` integer sizes in ``[1, size]`` (checked), or None for all ``size``.
        size: the largest size the score tensors allow.
        scores, *others: the score tensors as given (any floating dtypes, batch first); the
            first one fixes the device and the dtype of the results.
    """

    #: The log semiring the torch program runs in (see :mod:`._common`).
    _LOG: ClassVar[Semiring] = LOG

    def __init__(self, lengths: object, size: int, scores: Tensor, *others: Tensor) -> None:
        self.batch_size = scores.shape[0]
        self.lengths = check_lengths(lengths, self.batch_size, size, self._owner, scores.device)
        self._inputs = (scores, *others)
        self._device = scores.device
        self._dtype, self._result_dtype = precision(scores, *others)

    @property
    def _owner(self) -> str:
        return type(self).__name__

    # ------------------------------------------------------------------ public results

    @cached_property
    def log_partition(self) -> Tensor:
        """``[B]`` log of the sum of ``exp(score(y))`` over the structures of each element."""
        return self._log_partition.to(self._result_dtype)

    @cached_property
    def marginals(self) -> Tensor:
        """The probabilities of the parts (see the subclass); exactly 0 at padding."""
        return self._inference[1].to(self._result_dtype)

    @cached_property
    def argmax(self) -> Tensor:
        """long: the highest-scoring structure (see the subclass), 0 at padding. Ties are broken
        deterministically; the result is never differentiable."""
        with local_autograd(), autocast_off(self._device):
            scores = self._grad_inputs(track=False)
            best = self._program(scores, MAX)
            (indicator,) = torch.autograd.grad(best.sum(), scores[0])
        return self._structure_of(indicator)

    @cached_property
    def entropy(self) -> Tensor:
        """``[B]`` entropy ``-sum_y p(y) log p(y)`` in nats (how: see the subclass's
        ``_entropy``)."""
        with autocast_off(self._device):
            return self._entropy().to(self._result_dtype)

    def log_prob(self, structure: Tensor) -> Tensor:
        """``[B]`` log-probability of the given structures (one per element, encoded like
        ``argmax``), differentiable w.r.t. the scores like ``log_partition``."""
        structure = self._checked_structure(structure)
        with autocast_off(self._device):
            return (self._score(structure) - self._log_partition).to(self._result_dtype)

    # ------------------------------------------------------------------ internals

    @cached_property
    def _log_partition(self) -> Tensor:
        """``[B]`` log Z in the compute dtype: the first element of :attr:`_inference` when
        that exists already or a compiled kernel serves it (exact, and faster than the torch
        program alone even though it computes the marginals too), otherwise the program in the
        log semiring, with autocast off."""
        if "_inference" in vars(self) or self._kernel_serves:
            return self._inference[0]
        with autocast_off(self._device):
            return self._program(self._scores, self._LOG)

    @cached_property
    def _inference(self) -> tuple[Tensor, ...]:
        """``(log Z [B], *marginals)`` in the compute dtype: by the compiled kernel where one
        serves, otherwise as gradients of log Z (:func:`gradient_inference`)."""
        track = tracks_grad(*self._inputs)
        with local_autograd(), autocast_off(self._device):
            scores = self._grad_inputs(track)
            if self._kernel_serves:
                results = self._kernel_inference(scores, track)
            else:
                results = gradient_inference(
                    lambda *inputs: self._program(inputs, self._LOG), scores, track)
        return results if track else tuple(r.detach() for r in results)

    def _grad_inputs(self, track: bool) -> tuple[Tensor, ...]:
        """:attr:`_scores` ready for ``torch.autograd.grad`` (see :func:`as_grad_input`; call
        inside ``local_autograd``)."""
        return tuple(as_grad_input(scores, track) for scores in self._scores)

    # ------------------------------------------------------------------ supplied by subclasses

    @property
    @abstractmethod
    def _scores(self) -> tuple[Tensor, ...]:
        """The score tensors in the compute dtype (see :func:`._common.widened`; cache them):
        the program's inputs, w.r.t. which the marginals are the gradients of log Z."""

    @abstractmethod
    def _program(self, scores: tuple[Tensor, ...], semiring: Semiring) -> Tensor:
        """``[B]`` semiring sum over the structures of each element, of scores laid out like
        :attr:`_scores`; ``-inf`` scores count as a finite floor with zero gradient."""

    @property
    @abstractmethod
    def _kernel_serves(self) -> bool:
        """Whether a compiled kernel computes :attr:`_inference` (checked at each use)."""

    @abstractmethod
    def _kernel_inference(self, scores: tuple[Tensor, ...], track: bool) -> tuple[Tensor, ...]:
        """:attr:`_inference` of ``scores`` (from :meth:`_grad_inputs`) by the kernel."""

    @abstractmethod
    def _checked_structure(self, structure: object) -> Tensor:
        """``structure`` as a long tensor, checked, with padding set to 0."""

    @abstractmethod
    def _score(self, structure: Tensor) -> Tensor:
        """``[B]`` score of checked structures, in the compute dtype."""

    @abstractmethod
    def _structure_of(self, indicator: Tensor) -> Tensor:
        """The structure encoded like ``argmax`` from the 0/1 gradient of the best score w.r.t.
        the first score tensor."""

    @abstractmethod
    def _entropy(self) -> Tensor:
        """``[B]`` entropy in the compute dtype (called with autocast off)."""


@torch.compiler.disable
def gradient_inference(log_partition_of: Callable[..., Tensor], scores: tuple[Tensor, ...],
                       track: bool) -> tuple[Tensor, ...]:
    """``(log Z [B], *marginals)``: ``log_partition_of(*scores)`` and its gradients w.r.t.
    ``scores`` (tensors autograd can differentiate w.r.t., see :func:`as_grad_input`; zeros for
    one it does not reach), differentiable (``create_graph``) when ``track``. Where a NaN or
    ``+inf`` score makes log Z non-finite, the marginals are NaN (a clamped log-sum-exp would
    give them 0).

    Runs eagerly under ``torch.compile`` (a graph break): a compiled log Z has no double
    backward, so the gradient of marginals taken from it would be wrong."""
    log_z = log_partition_of(*scores)
    grads = torch.autograd.grad(log_z.sum(), scores, create_graph=track, materialize_grads=True)
    bad = ~torch.isfinite(log_z)
    return (log_z, *(grad.masked_fill(bad.reshape(-1, *[1] * (grad.dim() - 1)), math.nan)
                     for grad in grads))
