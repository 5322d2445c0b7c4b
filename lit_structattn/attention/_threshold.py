"""Shared machinery of the threshold-based transforms (sparsemax, csoftmax, csparsemax).

Each of them is ``a = g(z - tau)`` for a scalar threshold tau per row that makes the output
sum to 1. Two exact solvers find tau:

* an *active-set iteration* (Michelot's algorithm for sparsemax, the clamp-the-violators loop
  of Martins & Kreutzer for csoftmax, variable fixing for csparsemax): a few elementwise
  passes, no sort, and exact once the active sets stop changing;
* a *sort-based sweep* over the sorted breakpoints, O(L log L) whatever the input.

:func:`solve_threshold` runs the iteration for at most ``max_iter`` passes and hands the rows
that have not converged to the sort-based solver, so the cost is bounded and the answer exact
(under ``torch.compile`` a ``torch.cond`` branch, for a graph without host checks).
csoftmax and csparsemax run their own variant of this hand-over (the sort in float64, and for
csparsemax a check of every row's mass), and on CPU compiled float64 solvers (``_compiled``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

MAX_ITER = 12


def checks_every_pass(t: Tensor) -> bool:
    """Whether an iterative solver on ``t``'s device stops as soon as every row has converged.
    On the CPU that check is free and saves passes. On a GPU it is a host synchronization per
    pass (a round trip that costs more than a pass over a batch of attention rows), so there
    the solvers run their ``max_iter`` passes with converged rows held fixed, and synchronize
    once, when they hand the unconverged rows to the sort. Under ``torch.compile`` never (a
    host check would break the graph)."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()

Solver = Callable[..., Tensor]
IterativeSolver = Callable[..., tuple[Tensor, Tensor]]


def center(z: Tensor, valid: Tensor | None) -> Tensor:
    """``z [..., L]`` minus its maximum over the valid positions of each row.

    Every transform here is invariant to this shift; it keeps sums small and the output exact
    to float precision for scores of any magnitude. Rows with no valid position are unchanged.
    """
    top = z if valid is None else z.masked_fill(~valid, -torch.inf)
    shift = top.amax(-1, keepdim=True)
    return z - shift.masked_fill(~torch.isfinite(shift), 0)


def first_true(condition: Tensor, default: int) -> Tensor:
    """Index ``[..., 1]`` of the first True along the last dimension, ``default`` if none."""
    first = condition.to(torch.uint8).argmax(-1, keepdim=True)
    return first.masked_fill(~condition.any(-1, keepdim=True), default)


def solve_threshold(
    iterative: IterativeSolver,
    by_sorting: Solver,
    *rows: Tensor | None,
    max_iter: int | None = None,
) -> Tensor:
    """tau ``[..., 1]`` for the row tensors ``rows`` (each ``[..., L]``, or None).

    ``iterative(*rows, max_iter=...)`` returns ``(tau [..., 1], converged [..., 1])``;
    ``by_sorting(*rows)`` returns tau for any rows. Rows not converged after ``max_iter``
    passes (default :data:`MAX_ITER`) are solved again by sorting; under ``torch.compile`` by
    :func:`sort_pending_in_graph` (``rows`` then all tensors).
    """
    tau, converged = iterative(*rows, max_iter=MAX_ITER if max_iter is None else max_iter)
    if torch.compiler.is_compiling():
        return sort_pending_in_graph(tau, converged, by_sorting, *rows)
    return sort_pending(tau, converged, by_sorting, *rows)


def sort_pending_in_graph(tau: Tensor, converged: Tensor, by_sorting: Solver, *rows: Tensor
                          ) -> Tensor:
    """:func:`sort_pending` as a branch of the graph (``torch.cond``), for ``torch.compile``:
    where some row has not converged, every row is sorted and the converged ones keep their
    ``tau``. No host check, so no graph break; the sort costs nothing where all converged."""

    def keep(tau: Tensor, converged: Tensor, *rows: Tensor) -> Tensor:
        return tau.clone()

    def sort_unconverged(tau: Tensor, converged: Tensor, *rows: Tensor) -> Tensor:
        return torch.where(converged, tau, by_sorting(*rows))

    return torch.cond(converged.all(), keep, sort_unconverged, (tau, converged, *rows))


def sort_pending(
    tau: Tensor, converged: Tensor, by_sorting: Solver, *rows: Tensor | None
) -> Tensor:
    """``tau [..., 1]`` with the rows not ``converged [..., 1]`` solved again by
    ``by_sorting(*rows)`` (each row tensor ``[..., L]`` or ``[..., 1]``, or None)."""
    pending = ~converged.squeeze(-1)
    if bool(pending.any()):
        tau = tau.clone()
        tau[pending] = by_sorting(*(None if r is None else r[pending] for r in rows))
    return tau
