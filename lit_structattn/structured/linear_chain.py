"""Linear-chain conditional random field: exact log-partition, marginals, Viterbi and entropy.

The log-partition is a product of ``T - 1`` matrices in the log semiring. It is computed either
by a left-to-right loop over time (``O(T C^2)`` work, ``T`` sequential steps) or by a log-depth
tree of batched ``[C, C]`` log-matrix products (``O(T C^3)`` work, ``log2 T`` steps); the tree
wins while ``B * C^3`` is small (see ``_SCAN_MAX_WORK``). Marginals are the gradient of the
log-partition (``torch.autograd.grad(..., create_graph=True)``), which is itself differentiable.
On CPU when numba is installed, and on CUDA when Triton is, log Z and the marginals come instead
from a compiled forward-backward with a closed-form backward (:mod:`._chain_kernel`; on CPU,
marginals forward and backward about 6x faster at C = 2, B = 64, T = 50). Viterbi is the
gradient of the same program in the max semiring (:mod:`._common`). The cached results and their
precision rules are those of :class:`._distribution.StructuredDistribution`; the class below
supplies the chain's program, scores and kernel.
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from ..common.checks import check_float_tensor, describe
from ..common.constants import very_negative
from . import _chain_kernel
from ._common import CLAMPED_LOG, Semiring, check_indices, widened
from ._distribution import StructuredDistribution

__all__ = ["LinearChainCRF"]

# Use the log-depth scan when batch * labels**3 is at most this (measured at B=32, T=100 with two
# threads: the scan is ~3x faster than the time loop at C=2, even at C=8, ~10x slower at C=25).
_SCAN_MAX_WORK = 16_384


class LinearChainCRF(StructuredDistribution):
    """A batch of linear-chain CRFs over label sequences ``y = (y_0, ..., y_{L-1})``.

    ``score(y) = sum_t unary[b, t, y_t] + sum_{t < L-1} transition[b, t, y_t, y_{t+1}]`` and
    ``p(y) = exp(score(y) - log_partition)``. There are no separate start/end scores: fold them
    into ``unary[:, 0]`` and ``unary[b, L_b - 1]``.

    Args:
        unary: ``[B, T, C]`` label scores per position, any floating dtype.
        transition: ``[C, C]`` (shared), ``[B, C, C]`` (per sequence) or ``[B, T-1, C, C]`` (per
            position; entry ``t`` links position ``t`` to ``t + 1``). ``transition[..., i, j]``
            scores label ``i`` at ``t`` followed by label ``j`` at ``t + 1``. Any floating
            dtype, not necessarily that of ``unary``.
        lengths: ``[B]`` integer chain lengths in ``[1, T]``; ``None`` means all ``T``. Scores at
            positions ``>= L_b`` and on edges ``>= L_b - 1`` are ignored (any finite value).

    Results (see :class:`._distribution.StructuredDistribution`): ``log_partition`` ``[B]``;
    ``marginals`` ``[B, T, C]``, ``P(y_t = c)``, rows summing to 1 for ``t < L_b`` and exactly
    0 beyond; ``edge_marginals``; ``argmax`` ``[B, T]`` long, the Viterbi sequence, 0 at
    padding; ``entropy`` ``[B]``; ``log_prob(tags)``.

    Scores may be ``-inf`` to forbid a label or a transition (probability exactly 0, zero
    gradient); every chain needs a sequence without one. A NaN or ``+inf`` score within a chain
    makes that chain's results NaN. Any score scale works, gaps far beyond ``exp``'s range
    included: the compiled kernels are exact (float64, log space); the torch algorithms work
    in log space in the compute dtype, accurate to its rounding of the score sums (about
    ``eps * |scores| * T`` in the log-probabilities).

    Precision: everything is computed in float64 if ``unary`` or ``transition`` is float64,
    otherwise in float32 (float16 and bfloat16 inputs are widened), with autocast disabled.
    Floating-point results (``log_partition``, ``marginals``, ``edge_marginals``, ``entropy``,
    ``log_prob``) are returned in the dtype of ``unary``, except when the distribution is built
    under ``torch.autocast`` on the scores' device: then they keep the compute dtype (float32,
    or float64 for a float64 input), like autocast's ``logsumexp`` and ``softmax``. Gradients
    reach ``unary`` and ``transition`` in their own dtypes.

    All results are computed on first access and cached. When the potentials require grad and
    grad mode is on at that time, results are differentiable w.r.t. them (the marginals too,
    so second derivatives of ``log_partition`` are available; the compiled kernel's marginals
    are differentiable once); otherwise they are plain tensors. ``marginals``, ``argmax`` etc.
    also work under ``torch.no_grad()``: autograd is enabled locally on detached copies.

    Raises:
        ValueError: wrong ranks or shapes, non-floating dtypes, lengths outside ``[1, T]``.
    """

    # padding (identity matrices with ~-inf off the diagonal) makes exp underflow often
    _LOG = CLAMPED_LOG

    def __init__(self, unary: Tensor, transition: Tensor, lengths: Tensor | None = None) -> None:
        owner = "LinearChainCRF"
        self.unary = check_float_tensor(unary, "unary", owner, rank=3)
        self.transition = _check_transition(transition, unary, owner)
        super().__init__(lengths, unary.shape[1], unary, transition)
        self.num_steps, self.num_labels = unary.shape[1:]

    @cached_property
    def edge_marginals(self) -> Tensor:
        """``[B, T-1, C, C]`` ``P(y_t = i, y_{t+1} = j)`` at ``[b, t, i, j]``; exactly 0 on
        padded edges ``t >= L_b - 1``."""
        return self._inference[2].to(self._result_dtype)

    def log_prob(self, tags: Tensor) -> Tensor:
        """``[B]`` log-probability of the label sequences ``tags`` (``[B, T]`` integer).

        Tags at padded positions ``t >= L_b`` are ignored; the others must lie in ``[0, C)``.
        Differentiable w.r.t. the potentials like ``log_partition``.
        """
        return super().log_prob(tags)

    # ------------------------------------------------------------------ the chain's pieces

    @cached_property
    def _scores(self) -> tuple[Tensor, Tensor]:
        """The unary scores ``[B, T, C]`` and the transition scores as a ``[B, T-1, C, C]``
        view, in the compute dtype (see :func:`widened`)."""
        batch, steps, labels = self.unary.shape
        transition = widened(self.transition, self._dtype)
        if transition.dim() == 3:
            transition = transition[:, None]
        return (widened(self.unary, self._dtype),
                transition.expand(batch, steps - 1, labels, labels))

    @property
    def _kernel_serves(self) -> bool:
        return _chain_kernel.backend_for(self.unary) is not None

    def _kernel_inference(self, scores: tuple[Tensor, Tensor],
                          track: bool) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_partition, marginals, edge_marginals)`` by the compiled forward-backward of
        :mod:`._chain_kernel` (numba on CPU, Triton on CUDA)."""
        return _chain_kernel.ChainInference.apply(*scores, self.lengths,
                                                  _chain_kernel.backend_for(self.unary))

    def _entropy(self) -> Tensor:
        """Computed from the marginals, ``H = sum_t H(y_t, y_{t+1}) - sum_{0 < t < L-1} H(y_t)``
        (exact on a chain; ``H(y_0)`` when ``L = 1``), not as ``log Z - E[score]``, which loses
        all digits when scores are large and is NaN with ``-inf`` (forbidden) scores."""
        _, node, edge = self._inference
        steps = torch.arange(self.num_steps, device=self.unary.device)
        # edges at position t, minus one: 1 inside a chain, 0 at its ends, -1 if L = 1
        weight = (steps > 0).to(node.dtype) + (steps < self.lengths[:, None] - 1) - 1
        pairs = _entropy_terms(edge).sum((1, 2, 3))
        return pairs - (weight * _entropy_terms(node).sum(-1)).sum(-1)

    def _checked_structure(self, tags: object) -> Tensor:
        tags = check_indices(tags, (self.batch_size, self.num_steps), "tags", "LinearChainCRF",
                             self.unary.device)
        tags = torch.where(self._node_mask, tags, 0)
        if ((tags < 0) | (tags >= self.num_labels)).any():
            raise ValueError(f"LinearChainCRF: tags must lie in [0, {self.num_labels}) at "
                             "positions within the lengths")
        return tags

    def _score(self, tags: Tensor) -> Tensor:
        unary, transition = self._masked(*self._scores)
        score = unary.gather(-1, tags[..., None]).sum((1, 2))
        pairs = (tags[:, :-1] * self.num_labels + tags[:, 1:])[..., None]
        return score + transition.flatten(2).gather(-1, pairs).sum((1, 2))

    def _structure_of(self, onehot: Tensor) -> Tensor:
        return onehot.argmax(-1)

    @property
    def _node_mask(self) -> Tensor:
        """``[B, T]`` bool, True at positions within each chain (not cached: a mask made under
        inference mode could not be used by the autograd-based results later)."""
        steps = torch.arange(self.num_steps, device=self.unary.device)
        return steps < self.lengths[:, None]

    def _masked(self, unary: Tensor, transition: Tensor) -> tuple[Tensor, Tensor]:
        """Unary and ``[B, T-1, C, C]`` transition scores with padding replaced by zeros."""
        edge_ok = self._node_mask[:, 1:, None, None]
        return torch.where(self._node_mask[..., None], unary, 0.0), \
            torch.where(edge_ok, transition, 0.0)

    def _program(self, scores: tuple[Tensor, Tensor], semiring: Semiring) -> Tensor:
        """``[B]`` semiring sum over sequences (log-partition, best score, ...). Padded edges
        become identity matrices (0 on the diagonal, ~-inf elsewhere) with no unary score, so
        every chain ends at ``T - 1``; ``-inf`` scores are raised to the same finite ~-inf
        (with zero gradient), which keeps NaN out of the gradients."""
        unary, transition = scores
        node_ok = self._node_mask
        unary = torch.where(node_ok[..., None], unary, 0.0)
        labels = self.num_labels
        floor = very_negative(unary.dtype)
        identity = torch.full((labels, labels), floor, dtype=unary.dtype,
                              device=unary.device).fill_diagonal_(0.0)
        transition = torch.where(node_ok[:, 1:, None, None], transition, identity)
        edges = semiring.lift((transition + unary[:, 1:, None, :]).clamp_min(floor))
        first = semiring.lift(unary[:, 0].clamp_min(floor))
        if self.batch_size * labels**3 <= _SCAN_MAX_WORK:
            return _tree_reduce(first, edges, semiring)
        return _time_loop(first, edges, semiring)


def _entropy_terms(p: Tensor) -> Tensor:
    """``-p log p`` elementwise, 0 at ``p = 0`` with a finite gradient there (``-log p - 1``
    elsewhere; ``torch.special.entr`` has an infinite one)."""
    return -p * torch.where(p > 0, p, 1.0).log()


def _time_loop(first: Tensor, edges: Tensor, semiring: Semiring) -> Tensor:
    """``[B]`` semiring sum of ``first [B, C]`` times the ``edges [B, T-1, C, C]`` chain, one
    vector-matrix product per time step."""
    alpha = first
    for edge in edges.unbind(1):
        alpha = semiring.sum(alpha[:, :, None] + edge, 1)
    return semiring.sum(alpha, -1)


def _tree_reduce(first: Tensor, edges: Tensor, semiring: Semiring) -> Tensor:
    """Same result as ``_time_loop`` by a log-depth tree of pairwise matrix products.

    Matrices are laid out ``[C, C, B, n]`` so the batch and time dimensions are innermost and
    contiguous: reductions over the small label dimension then vectorize well on CPU.
    """
    batch, labels = first.shape
    if edges.shape[1] == 0:
        return semiring.sum(first, -1)
    chain = edges.permute(2, 3, 0, 1)
    chain = torch.cat([chain[..., :1] + first.t()[:, None, :, None], chain[..., 1:]], -1)
    while chain.shape[-1] > 1:
        count = chain.shape[-1]
        even = count - count % 2
        left = chain[..., 0:even:2].unsqueeze(2)
        right = chain[..., 1:even:2].unsqueeze(0)
        product = semiring.sum(left + right, 1)
        chain = torch.cat([product, chain[..., even:]], -1) if even < count else product
    return semiring.sum(chain.reshape(labels * labels, batch), 0)


def _check_transition(transition: object, unary: Tensor, owner: str) -> Tensor:
    batch, steps, labels = unary.shape
    allowed = [(labels, labels), (batch, labels, labels), (batch, steps - 1, labels, labels)]
    if not isinstance(transition, Tensor) or not transition.is_floating_point():
        raise ValueError(f"{owner}: transition must be a floating-point tensor, got "
                         f"{describe(transition)}")
    if tuple(transition.shape) not in allowed:
        raise ValueError(
            f"{owner}: transition must have shape [C, C], [B, C, C] or [B, T-1, C, C] = "
            f"{' or '.join(str(list(s)) for s in allowed)} for unary of shape "
            f"{list(unary.shape)}, got {list(transition.shape)}"
        )
    return transition
