"""The verdict on each claim of a paper's table, computed from the runs.

Problem: whether a paper's claim holds here is a judgement on a few seeds whose spread is
often as large as the effect; a report that says it in prose can say it differently each time.
One documented rule, applied to the ledger, says it the same way for every claim.

The rule (values in the report's units, `scale` applied). For a comparison, with the seeds
run for each row: d = mean(A) - mean(B); SE = sqrt(sd_A^2/n_A + sd_B^2/n_B) (Welch; sample
standard deviations); s = +1 for `higher`, -1 for `lower`; t = s*d/SE (t = +-inf when SE =
0 and d != 0, t = 0 when both are 0). Seeds won: among the seeds run for both rows, how many
have s*(A_seed - B_seed) > 0, "k of n".

- untestable: declared `untestable` (its reason), or a row not run / without the metric, or a
  row with fewer than 2 seeds (reason: "one seed of <row>: no spread")
- reproduced: t >= 2
- same sign within spread: 0 < t < 2
- reversed within spread: -2 < t <= 0
- contradicted: t <= -2

For a comparison of row groups (``compare_groups``), each row A_k of group A against the row
B_k of group B of the same item (one task under two models), over the m pairs of rows that
recorded the metric (a pair where neither did, e.g. a task without the metric, is left out):
d = mean over pairs of (mean(A_k) - mean(B_k)), SE = sqrt(sum_k sd_Ak^2/n_Ak + sd_Bk^2/n_Bk) / m,
the same rule on t; seeds won among the seeds run for every row of the pairs, a seed won when
its mean over the pairs is in the paper's direction. With one pair this is the comparison of
two rows.

For a value: d = mean - value, SE = sd/sqrt(n); reproduced when |d| <= tolerance + 2*SE,
contradicted otherwise; "seeds won" = seeds within `tolerance` of the value; untestable as
above (fewer than 2 seeds, or not run).

A row shown from the ledger's earlier report (no per-seed results) uses that report's mean, std
and seed count; its seeds won are "—".

Method: a row's values of a metric are a :class:`Sample`; SE is computed from the sample
variances themselves (sd^2 with no square root in between, so that a t of exactly 2 is 2.0).
:func:`judge` applies the rule to one claim, :func:`verdicts` to a table's.

Contract: :func:`verdicts` is a function of the table's claims, the runs' results and the
earlier report's rows alone; :class:`Verdict` holds the numbers a report prints beside it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .tables import Claim, Comparison, GroupComparison, Table, Untestable, Value

REPRODUCED = "reproduced"
SAME_SIGN = "same sign within spread"
REVERSED = "reversed within spread"
CONTRADICTED = "contradicted"
UNTESTABLE = "untestable"


@dataclass(frozen=True)
class Sample:
    """A row's values of one metric, in the report's units: mean, sample variance (None for one
    seed), number of seeds, and ``per_seed`` ``{seed: value}`` (None for a row of an earlier
    report, which printed only its mean and spread)."""

    mean: float
    variance: float | None
    n: int
    per_seed: dict[int | str, float] | None = None


@dataclass(frozen=True)
class Verdict:
    """The verdict on ``claim``: ``ours`` (A - B for a comparison, the mean for a value; None
    where it cannot be computed), its standard error ``se``, ``won``: ``(k, n)`` seeds won
    (None where seeds cannot be paired), ``paper``: the paper's gap or value (None when
    unknown), ``verdict``: one of the five categories, and ``reason``: ``t = ...`` or why the
    claim is untestable here."""

    claim: Claim
    ours: float | None
    se: float | None
    won: tuple[int, int] | None
    paper: float | None
    verdict: str
    reason: str


class Unlogged(str):
    """Why a row that was run has no sample of a metric: none of its runs logged it."""


#: ``(row, metric key)`` -> that row's sample of the metric, or why there is none (an
#: :class:`Unlogged` reason when the row was run)
SampleOf = Callable[[str, str], "Sample | str"]


def row_sample(table: Table, runs: list[dict], key: str) -> Sample | None:
    """The sample of metric ``key`` over ``runs`` (result dicts with ``metrics`` and ``seed``),
    times ``table.scale``; None when no run logged it."""
    found = {r.get("seed", index): table.scale * r["metrics"][key]
             for index, r in enumerate(runs) if key in r["metrics"]}
    if not found:
        return None
    values = list(found.values())
    return Sample(statistics.mean(values),
                  statistics.variance(values) if len(values) > 1 else None, len(values), found)


def verdicts(table: Table, results: Mapping[str, list[dict]],
             earlier: Mapping[str, Mapping[str, Sample]] | None = None) -> tuple[Verdict, ...]:
    """The verdict on every claim of ``table`` from ``results`` (``{row name: result dicts}``)
    and ``earlier`` (``{row name: {metric key: Sample}}`` of the rows shown from an earlier
    report, which take the place of their runs)."""
    earlier, labels = earlier or {}, dict(table.metrics)

    def sample_of(row: str, key: str) -> Sample | str:
        if row in earlier:
            found = earlier[row].get(key)
        elif results.get(row):
            found = row_sample(table, results[row], key)
        else:
            return f"{row} not run"
        return Unlogged(f"{row} recorded no {labels[key]}") if found is None else found

    return tuple(judge(claim, sample_of) for claim in table.claims)


def judge(claim: Claim, sample_of: SampleOf) -> Verdict:
    """The verdict on ``claim``; ``sample_of(row, key)``: that row's :class:`Sample` of the
    metric, or a string saying why there is none (:class:`Unlogged` for a row run without it,
    whose pair a comparison of groups leaves out when neither of its rows logged the metric)."""
    states = claim.states
    if isinstance(states, Untestable):
        return Verdict(claim, None, None, None, None, UNTESTABLE, states.reason)
    if isinstance(states, Value):
        return _value(claim, states, sample_of(states.row, states.metric))
    pairs = (states.rows,) if isinstance(states, Comparison) else states.pairs
    samples = [tuple(sample_of(row, states.metric) for row in pair) for pair in pairs]
    if isinstance(states, GroupComparison):
        kept = [k for k, found in enumerate(samples)
                if not all(isinstance(s, Unlogged) for s in found)]
        if kept:  # else the first pair's reason says why
            pairs, samples = [pairs[k] for k in kept], [samples[k] for k in kept]
    return _comparison(claim, states, pairs, samples)


def _comparison(claim: Claim, states: Comparison | GroupComparison,
                pairs: list[tuple[str, str]], samples: list[tuple[Sample | str, ...]]
                ) -> Verdict:
    """The verdict on a comparison of the rows ``pairs`` (A, B), whose samples are
    ``samples``: one pair for a comparison of rows, the groups' paired rows for one of
    groups."""
    paper = states.paper_gap
    missing = next((s for found in samples for s in found if isinstance(s, str)), None)
    if missing is not None:
        return Verdict(claim, None, None, None, paper, UNTESTABLE, missing)
    sign = 1 if states.direction == "higher" else -1
    d = sum(a.mean - b.mean for a, b in samples) / len(samples)
    won = _seeds_won(samples, sign)
    one_seed = next((row for pair, found in zip(pairs, samples, strict=True)
                     for row, s in zip(pair, found, strict=True) if s.n < 2), None)
    if one_seed is not None:
        return Verdict(claim, d, None, won, paper, UNTESTABLE,
                       f"one seed of {one_seed}: no spread")
    se = math.sqrt(sum(a.variance / a.n + b.variance / b.n for a, b in samples)) / len(samples)
    t = _ratio(sign * d, se)
    verdict = (REPRODUCED if t >= 2 else SAME_SIGN if t > 0 else REVERSED if t > -2
               else CONTRADICTED)
    return Verdict(claim, d, se, won, paper, verdict, f"t = {_shown(t)}")


def _seeds_won(samples: list[tuple[Sample, Sample]], sign: int) -> tuple[int, int] | None:
    """``(k, n)``: of the n seeds run for every row of ``samples``' pairs, the k whose
    difference A - B summed over the pairs is in the direction ``sign``; None when a row has no
    per-seed values or no seed was run for all."""
    found = [s.per_seed for pair in samples for s in pair]
    if any(values is None for values in found):
        return None
    seeds = set.intersection(*(set(values) for values in found))
    if not seeds:
        return None
    return (sum(sign * sum(a.per_seed[s] - b.per_seed[s] for a, b in samples) > 0
                for s in seeds), len(seeds))


def _value(claim: Claim, states: Value, ours: Sample | str) -> Verdict:
    if isinstance(ours, str):
        return Verdict(claim, None, None, None, states.value, UNTESTABLE, ours)
    won = None if ours.per_seed is None else (
        sum(abs(v - states.value) <= states.tolerance for v in ours.per_seed.values()),
        len(ours.per_seed))
    if ours.n < 2:
        return Verdict(claim, ours.mean, None, won, states.value, UNTESTABLE,
                       f"one seed of {states.row}: no spread")
    se = math.sqrt(ours.variance / ours.n)
    off, allowed = abs(ours.mean - states.value), states.tolerance + 2 * se
    verdict = REPRODUCED if off <= allowed else CONTRADICTED
    return Verdict(claim, ours.mean, se, won, states.value, verdict,
                   f"{off:.1f} off, {'within' if off <= allowed else 'beyond'} "
                   f"{states.tolerance:.1f} + 2 SE")


def _ratio(d: float, se: float) -> float:
    """``d / se``, +-inf for ``se`` 0 and 0 for both 0."""
    if se > 0:
        return d / se
    return 0.0 if d == 0 else math.copysign(math.inf, d)


def _shown(t: float) -> str:
    return f"{'+' if t > 0 else '-'}inf" if math.isinf(t) else f"{t:.1f}"
