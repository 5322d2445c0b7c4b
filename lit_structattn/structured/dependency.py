"""Projective first-order dependency CRF (Eisner 1996): log-partition, arc marginals, argmax,
entropy.

The inside pass of Eisner's algorithm (Kim et al. 2017, appendix B) runs one Python step per span
width; each step is a handful of batched tensor ops over the batch and all spans of that width.
Arc marginals are the gradient of the log-partition (``create_graph=True``, so they are
differentiable), which replaces the explicit outside pass; the argmax tree is the gradient of the
same program in the max semiring. On CPU, when numba is installed, log Z and the marginals come
instead from a compiled inside-outside pass with a closed-form backward (:mod:`._eisner_kernel`).
The cached results and their precision rules are those of
:class:`._distribution.StructuredDistribution`; the class below supplies the tree's program,
scores and kernel.

Entropy. Where the kernel serves, ``H = log Z - sum_arcs marginal * score`` from the kernel's
float64 log Z and marginals (one more kernel run, with float64 outputs), forbidden and non-arcs
left out of the sum: exact at any score scale (in float32, the rounding of log Z alone would be
``eps * |log Z|``, and of the marginals times large scores far worse). Elsewhere the
inside pass runs in the entropy semiring (:data:`._common.ENTROPY`) in the compute dtype: sums of
local ``q log q`` with ``q`` conditional probabilities, accurate to the rounding of the score sums
like the other results of the torch pass.

Chart layout. With ``CR[s, t]`` / ``CL[s, t]`` the complete spans headed at ``s`` / ``t`` and
``IR`` / ``IL`` the incomplete ones (an arc ``s -> t`` / ``t -> s`` just added), width ``k`` needs

    S[s, t]  = (+)_{u in [s, t)}    CR[s, u] (x) CL[u+1, t]          IR = S (x) arc[s, t]
    CR[s, t] = (+)_{u in (s, t]}    IR[s, u] (x) CR[u, t]            IL = S (x) arc[t, s]
    CL[s, t] = (+)_{u in [s, t)}    CL[s, u] (x) IL[u, t]

Every term pairs a span *starting* at ``s`` with a span *ending* at ``t``. We keep the needed
left parts in a tensor indexed ``[start, width]`` (``X``) and the right parts in one indexed
``[end, width]`` with widths in decreasing order (``Y``), so that for all spans of width ``k`` at
once the terms are ``X[:, :n] + Y[:, 1:]`` (``n`` spans), reduced over the last dimension. The
three sums are stacked as channels of ``X`` and ``Y``; the terms that involve a width-``k``
incomplete span (``u = t`` in CR, ``u = s`` in CL) and the last term of ``S`` (``u = t - 1``) are
added separately, so each step appends one column to ``X`` and prepends one to ``Y``.
"""

from __future__ import annotations

import math
from functools import cached_property

import torch
from torch import Tensor

from ..common.checks import check_float_tensor
from ..common.constants import very_negative
from . import _eisner_kernel
from ._common import (
    ENTROPY,
    LOG,
    Semiring,
    as_grad_input,
    check_indices,
    local_autograd,
    tracks_grad,
    widened,
)
from ._distribution import StructuredDistribution, gradient_inference

__all__ = ["DependencyCRF"]


class DependencyCRF(StructuredDistribution):
    """A batch of distributions over projective dependency trees (first-order, arc-factored).

    Position 0 is the root symbol and positions ``1..N_b`` the words of sentence ``b``; a tree
    gives every word exactly one head, is acyclic, reaches every word from the root, and has no
    crossing arcs. ``score(tree) = sum_m arc_scores[b, head(m), m]`` and
    ``p(tree) = exp(score(tree) - log_partition)``.

    Args:
        arc_scores: ``[B, N+1, N+1]``; ``arc_scores[b, h, m]`` scores the arc head ``h`` ->
            modifier ``m``. Entries that are not arcs (the diagonal, column 0, rows and columns
            beyond ``N_b``) are ignored whatever finite value they hold. ``-inf`` forbids an
            arc (marginal exactly 0, zero gradient); every sentence needs a tree without one.
            A NaN or ``+inf`` arc score makes its sentence's results NaN.
        lengths: ``[B]`` integer number of words ``N_b`` in ``[1, N]`` (without the root);
            ``None`` means all ``N``.
        multiroot: if True the root may have several children; if False exactly one word is
            attached to the root.

    Results (see :class:`._distribution.StructuredDistribution`): ``log_partition`` ``[B]``;
    ``marginals`` ``[B, N+1, N+1]``, the arc probabilities ``P(head(m) = h)`` at ``[b, h, m]``,
    column ``m`` summing to 1 for the words ``m = 1..N_b``, non-arc entries exactly 0;
    ``argmax`` ``[B, N+1]`` long, the head of each word in the highest-scoring tree (always one
    valid projective tree, single-rooted if ``multiroot`` is False), 0 in the root slot and at
    padding; ``entropy`` ``[B]``, finite with ``-inf`` arcs; ``log_prob(heads)``.

    Precision: everything is computed in float64 for float64 ``arc_scores`` and in float32
    otherwise (float16 and bfloat16 inputs are widened), with autocast disabled. Floating-point
    results (``log_partition``, ``marginals``, ``entropy``, ``log_prob``) are returned in the
    dtype of ``arc_scores``, except when the distribution is built under ``torch.autocast`` on
    the scores' device: then they keep the compute dtype (float32, or float64 for a float64
    input), like autocast's ``logsumexp`` and ``softmax``. Gradients reach ``arc_scores`` in its
    dtype. Any score scale works: the compiled kernel is exact (float64; sentences beyond its
    range go to a float64 log-space pass; the entropy is formed in float64 too); the torch pass
    (other devices) works in log space in the compute dtype, accurate to its rounding of the
    score sums.

    Results are computed on first access and cached; they are differentiable w.r.t.
    ``arc_scores`` when it requires grad and grad mode is on at that time (the marginals and the
    entropy too; the compiled kernel's once), and plain tensors otherwise, also under
    ``torch.no_grad()``.

    Raises:
        ValueError: wrong rank or shape, non-floating dtype, lengths outside ``[1, N]``.
    """

    def __init__(
        self, arc_scores: Tensor, lengths: Tensor | None = None, multiroot: bool = True
    ) -> None:
        owner = "DependencyCRF"
        check_float_tensor(arc_scores, "arc_scores", owner, rank=3)
        batch, size, other = arc_scores.shape
        if size != other or size < 2:
            raise ValueError(
                f"{owner}: arc_scores must have shape [B, N+1, N+1] with N >= 1, got "
                f"{list(arc_scores.shape)}"
            )
        self.arc_scores = arc_scores
        super().__init__(lengths, size - 1, arc_scores)
        self.multiroot = bool(multiroot)
        self.num_words = size - 1

    def log_prob(self, heads: Tensor) -> Tensor:
        """``[B]`` log-probability of the trees given as head indices ``heads [B, N+1]``.

        Entries at the root slot and beyond ``N_b`` are ignored; the others must lie in
        ``[0, N_b]`` and differ from their own position. The heads are assumed to form a tree
        of this distribution's kind (projective; single-rooted if ``multiroot`` is False) -- this
        is not checked, and for other head vectors the result is not a log-probability.
        Differentiable w.r.t. ``arc_scores`` like ``log_partition``.
        """
        return super().log_prob(heads)

    # ------------------------------------------------------------------ the tree's pieces

    @cached_property
    def _scores(self) -> tuple[Tensor]:
        """The arc scores in the compute dtype (see :func:`widened`)."""
        return (widened(self.arc_scores, self._dtype),)

    @property
    def _arcs(self) -> Tensor:
        return self._scores[0]

    def _program(self, scores: tuple[Tensor], semiring: Semiring) -> Tensor:
        return _log_partition_of(scores[0], self.lengths, self.multiroot, semiring)

    @property
    def _kernel_serves(self) -> bool:
        return _eisner_kernel.usable(self.arc_scores)

    def _kernel_inference(self, scores: tuple[Tensor], track: bool) -> tuple[Tensor, Tensor]:
        """``(log_partition, marginals)`` by the compiled inside-outside of
        :mod:`._eisner_kernel`, in the dtype of ``scores``. Sentences that the kernel's
        probability space cannot hold (their best tree some 575 nats or more below the best
        head of every word, see :mod:`._eisner_kernel`) are solved in log space, in float64,
        instead."""
        (arcs,) = scores
        log_z, marginals, ok = _eisner_kernel.TreeInference.apply(arcs, self.lengths,
                                                                  self.multiroot)
        if not bool(ok.all()):
            rows = (~ok).nonzero()[:, 0]
            lengths = self.lengths[rows]
            exact = gradient_inference(
                lambda a: _log_partition_of(a, lengths, self.multiroot, LOG),
                (arcs[rows].double(),), track)
            log_z = log_z.index_put((rows,), exact[0].to(log_z.dtype))
            marginals = marginals.index_put((rows,), exact[1].to(marginals.dtype))
        return log_z, marginals

    def _entropy(self) -> Tensor:
        """By the kernel's float64 results where it serves, otherwise by the inside pass in
        the entropy semiring (see the module docstring)."""
        if not self._kernel_serves:
            return _log_partition_of(self._arcs, self.lengths, self.multiroot, ENTROPY).imag
        track = tracks_grad(self.arc_scores)
        with local_autograd():
            arcs = as_grad_input(widened(self._arcs, torch.float64), track)
            log_z, marginals = self._kernel_inference((arcs,), track)
            # forbidden arcs have marginal exactly 0: leave them out, as 0 * -inf is NaN
            allowed = _real_arcs(self.lengths, arcs.shape[-1]) & (arcs != -math.inf)
            entropy = log_z - (marginals * torch.where(allowed, arcs, 0.0)).sum((1, 2))
        return (entropy if track else entropy.detach()).to(self._dtype)

    def _checked_structure(self, heads: object) -> Tensor:
        owner = "DependencyCRF"
        heads = check_indices(heads, (self.batch_size, self.num_words + 1), "heads", owner,
                              self.arc_scores.device)
        positions = torch.arange(self.num_words + 1, device=heads.device)
        words = self._word_mask
        heads = torch.where(words, heads, 0)
        invalid = words & ((heads < 0) | (heads > self.lengths[:, None]) | (heads == positions))
        if invalid.any():
            raise ValueError(f"{owner}: each word's head must lie in [0, N_b] and differ from the "
                             "word itself")
        return heads

    def _score(self, heads: Tensor) -> Tensor:
        real = _real_arcs(self.lengths, self.num_words + 1)
        arcs = torch.where(real, self._arcs, 0.0)
        score = arcs.gather(1, heads[:, None, :]).squeeze(1)
        return torch.where(self._word_mask, score, 0.0).sum(-1)

    def _structure_of(self, tree: Tensor) -> Tensor:
        return tree.argmax(1)

    @property
    def _word_mask(self) -> Tensor:
        """``[B, N+1]`` bool, True at the words ``1..N_b`` (not cached, like the chain's)."""
        positions = torch.arange(self.num_words + 1, device=self.arc_scores.device)
        return (positions > 0) & (positions <= self.lengths[:, None])


def _real_arcs(lengths: Tensor, size: int) -> Tensor:
    """``[B, size, size]`` bool, True at real arcs ``h -> m``: ``h != m``, ``m >= 1``, both
    within the sentence of ``lengths [B]`` words."""
    positions = torch.arange(size, device=lengths.device)
    inside = positions <= lengths[:, None]
    not_self = positions[:, None] != positions[None, :]
    return inside[:, :, None] & inside[:, None, :] & not_self & (positions > 0)


def _log_partition_of(arcs: Tensor, lengths: Tensor, multiroot: bool,
                      semiring: Semiring) -> Tensor:
    """``[B]`` semiring sum over the trees of ``arcs [B, N+1, N+1]`` (non-arcs ignored), read
    at each sentence's length ``lengths [B]``. ``-inf`` scores are raised to a finite ~-inf
    (with zero gradient), which keeps NaN out of the gradients."""
    arcs = torch.where(_real_arcs(lengths, arcs.shape[-1]), arcs, 0.0)
    arcs = semiring.lift(arcs.clamp_min(very_negative(arcs.dtype)))
    roots = _eisner_inside(arcs, semiring, multiroot)
    return roots.gather(1, (lengths - 1)[:, None]).squeeze(1)


def _eisner_inside(arcs: Tensor, semiring: Semiring, multiroot: bool) -> Tensor:
    """``[B, N]``: entry ``k - 1`` is the semiring sum over trees of the prefix ``0..k`` (the
    complete span ``CR[0, k]``). ``arcs`` is ``[B, N+1, N+1]`` with non-arcs already zeroed.

    Channels of ``X`` (by start) / ``Y`` (by end): 0 = CR / CL for ``S``, 1 = IR / CR for CR,
    2 = CL / IL for CL. Before step ``k``, ``X`` holds widths ``0..k-2`` (ch. 0) and ``1..k-1``
    (ch. 1, 2) and ``Y`` widths ``k-1..1`` in every channel, so the two parts of a column cover
    a span of width ``k`` (ch. 0 leaves room for the new arc).
    """
    batch, size, _ = arcs.shape
    diagonals = _arc_diagonals(arcs)
    # With a single root, the root may take a child only while its own span is empty, i.e.
    # CR[0, u] for u > 0 cannot start an incomplete span of the root.
    no_root_prefix = torch.arange(size, device=arcs.device) == 0
    right, left = diagonals[1][:, :, : size - 1].unbind(0)  # width 1: IR = CR, IL = CL
    x = torch.stack([torch.zeros_like(right), right, left])[..., None]
    y = torch.stack([left, right, left])[..., None]
    complete_right = right
    roots = [right[:, 0]]
    for width in range(2, size):
        spans = size - width
        if not multiroot:
            complete_right = torch.where(no_root_prefix[: spans + 1], very_negative(arcs.dtype),
                                         complete_right)
        prev = complete_right[:, :spans]
        x, y = x[:, :, :spans], y[:, :, 1:]  # align starts s with ends s + width
        sums = semiring.sum(x + y, -1)  # [3, B, spans]
        incomplete = semiring.add(sums[0], prev) + diagonals[width][:, :, :spans]
        complete = semiring.add(incomplete, sums[1:])
        incomplete_right, incomplete_left = incomplete.unbind(0)
        complete_right, complete_left = complete.unbind(0)
        roots.append(complete_right[:, 0])
        new_x = torch.stack([prev, incomplete_right, complete_left])[..., None]
        new_y = torch.stack([complete_left, complete_right, incomplete_left])[..., None]
        x = torch.cat([x, new_x], -1)
        y = torch.cat([new_y, y], -1)
    return torch.stack(roots, 1)


def _arc_diagonals(arcs: Tensor) -> tuple[Tensor, ...]:
    """Tuple over widths ``k`` of ``[2, B, N+1]``: ``[0, b, s] = arcs[b, s, s+k]`` (right arcs)
    and ``[1, b, s] = arcs[b, s+k, s]`` (left arcs); entries with ``s + k > N`` are filler.

    One gather instead of ``2 N`` diagonal views keeps the backward pass to one scatter.
    """
    batch, size, _ = arcs.shape
    both = torch.stack([arcs, arcs.transpose(1, 2)])
    positions = torch.arange(size, device=arcs.device)
    column = (positions[:, None] + positions[None, :]).clamp_max(size - 1)  # [start, width]
    skewed = both.gather(3, column.expand(2, batch, size, size))
    return skewed.permute(3, 0, 1, 2).unbind(0)
