"""The verdict rule of ``lit_structattn/reproduce/claims.py`` on constructed results: every
verdict, the edges (SE = 0, one seed, a row not run, a metric not logged, the ``lower``
direction, value claims, comparisons of row groups, rows of an earlier report), and the claims
table a report opens with."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from lit_structattn.reproduce.claims import (
    CONTRADICTED,
    REPRODUCED,
    REVERSED,
    SAME_SIGN,
    UNTESTABLE,
    verdicts,
)
from lit_structattn.reproduce.report import RowSummary, claim_verdicts, render
from lit_structattn.reproduce.tables import (
    Claim,
    Comparison,
    GroupComparison,
    Row,
    Table,
    Untestable,
    Value,
)

KEY, OTHER = "test/score", "test/other"


def table(*claims: Claim, scale: float = 100.0) -> Table:
    rows = tuple(Row(name, ()) for name in ("A", "B"))
    return Table("mine", "Mine", rows, ((KEY, "score"), (OTHER, "other")),
                 {"cpu": ((), "as committed")}, "constructed", scale=scale, claims=claims)


def compare(direction: str = "higher", gap: float | None = 10.0, name: str = "A over B"
            ) -> Claim:
    return Claim(name, Comparison(("A", "B"), KEY, direction, gap), source="Table 9")


def runs(*values: float, key: str = KEY, first_seed: int = 0) -> list[dict]:
    return [{"seed": seed, "wall_seconds": 60.0, "metrics": {key: value}}
            for seed, value in enumerate(values, start=first_seed)]


def judged(claim: Claim, results: dict[str, list[dict]], **options):
    (found,) = verdicts(table(claim, **options), results)
    return found


def test_reproduced_with_welch_standard_error_and_seeds_won():
    found = judged(compare(), {"A": runs(0.8, 0.9), "B": runs(0.4, 0.5)})
    assert found.ours == pytest.approx(40.0)
    assert found.se == pytest.approx(math.sqrt(50 / 2 + 50 / 2))  # sd 7.07 in each row
    assert (found.won, found.paper, found.verdict) == ((2, 2), 10.0, REPRODUCED)
    assert found.reason == "t = 5.7"


@pytest.mark.parametrize(("a", "b", "verdict"), [
    ((0.8, 0.9), (0.4, 0.5), REPRODUCED),     # t = 5.7
    ((0.5, 0.7), (0.4, 0.6), SAME_SIGN),      # d = 10, SE = 14.1: t = 0.7
    ((0.4, 0.6), (0.5, 0.7), REVERSED),       # t = -0.7
    ((0.6, 0.6), (0.5, 0.7), REVERSED),       # d = 0: t = 0
    ((0.4, 0.5), (0.8, 0.9), CONTRADICTED),   # t = -5.7
])
def test_each_verdict_by_t(a, b, verdict):
    assert judged(compare(), {"A": runs(*a), "B": runs(*b)}).verdict == verdict


def test_t_at_exactly_two_is_reproduced_and_minus_two_contradicted():
    # d = 2, SE = sqrt(2/2 + 0/2) = 1 (variances 2 and 0): t = 2
    at_two = judged(compare(), {"A": runs(3.0, 5.0), "B": runs(2.0, 2.0)}, scale=1.0)
    assert (at_two.se, at_two.reason, at_two.verdict) == (1.0, "t = 2.0", REPRODUCED)
    at_minus_two = judged(compare("lower", gap=None), {"A": runs(3.0, 5.0), "B": runs(2.0, 2.0)},
                          scale=1.0)
    assert (at_minus_two.reason, at_minus_two.verdict) == ("t = -2.0", CONTRADICTED)


def test_zero_standard_error():
    same = {"A": runs(0.5, 0.5), "B": runs(0.4, 0.4)}
    found = judged(compare(), same)
    assert (found.se, found.verdict, found.reason) == (0.0, REPRODUCED, "t = +inf")
    found = judged(compare(), {"A": same["B"], "B": same["A"]})
    assert (found.verdict, found.reason) == (CONTRADICTED, "t = -inf")
    found = judged(compare(), {"A": runs(0.5, 0.5), "B": runs(0.5, 0.5)})
    assert (found.verdict, found.reason, found.won) == (REVERSED, "t = 0.0", (0, 2))


def test_one_seed_is_untestable_but_shows_its_difference():
    found = judged(compare(), {"A": runs(0.8, 0.9), "B": runs(0.4)})
    assert (found.verdict, found.reason) == (UNTESTABLE, "one seed of B: no spread")
    assert found.ours == pytest.approx(45.0) and found.se is None and found.won == (1, 1)


def test_a_row_not_run_or_without_the_metric_is_untestable():
    found = judged(compare(), {"A": runs(0.8, 0.9)})
    assert (found.verdict, found.reason, found.ours) == (UNTESTABLE, "B not run", None)
    assert found.paper == 10.0
    found = judged(compare(), {"A": runs(0.8, 0.9), "B": runs(0.4, 0.5, key=OTHER)})
    assert (found.verdict, found.reason) == (UNTESTABLE, "B recorded no score")


def test_a_run_without_the_metric_is_left_out():
    """A run cut short logs no test metric: the row's other seeds are judged."""
    cut = {"seed": 2, "wall_seconds": 1.0, "metrics": {"val/loss": 1.0}}
    full = judged(compare(), {"A": runs(0.8, 0.9), "B": runs(0.4, 0.5)})
    assert judged(compare(), {"A": runs(0.8, 0.9, 0.7), "B": [*runs(0.4, 0.5), cut]}) != full
    with_cut = judged(compare(), {"A": runs(0.8, 0.9), "B": [*runs(0.4, 0.5), cut]})
    assert with_cut == full


def test_seeds_won_pairs_seeds_run_for_both_rows():
    found = judged(compare(), {"A": runs(0.8, 0.3, 0.9), "B": runs(0.4, 0.5, first_seed=1)})
    assert found.won == (1, 2)  # seed 1: 30 < 40; seed 2: 90 > 50; seed 0 of A is unpaired
    assert found.ours == pytest.approx(200 / 3 - 45)
    found = judged(compare(), {"A": runs(0.8, 0.9), "B": runs(0.4, 0.5, first_seed=5)})
    assert found.won is None and found.verdict == REPRODUCED


def test_lower_direction():
    lower = compare("lower", gap=-2.0)
    found = judged(lower, {"A": runs(1.0, 1.2), "B": runs(3.0, 3.2)}, scale=1.0)
    assert found.ours == pytest.approx(-2.0) and found.verdict == REPRODUCED
    assert found.won == (2, 2) and found.paper == -2.0
    found = judged(lower, {"A": runs(3.0, 3.2), "B": runs(1.0, 1.2)}, scale=1.0)
    assert found.verdict == CONTRADICTED and found.won == (0, 2)


def grouped(pairs: int = 2) -> Claim:
    """Group a (rows A1, A2, ...) above group b (B1, B2, ...), paired by number."""
    return Claim("a over b", GroupComparison(
        ("a", "b"), tuple((f"A{k}", f"B{k}") for k in range(1, pairs + 1)), KEY, "higher", 5.0))


def test_groups_compare_the_mean_over_paired_rows():
    """d: the mean of the pairs' differences; SE: the rows' squared errors summed, rooted,
    over the number of pairs; a seed won when its summed difference is in the direction."""
    results = {"A1": runs(0.8, 0.9), "B1": runs(0.4, 0.5),  # 85 - 45 = 40, both seeds won
               "A2": runs(0.1, 0.7), "B2": runs(0.6, 0.6)}  # 40 - 60 = -20: seed 0 lost
    found = judged(grouped(), results)
    assert found.ours == pytest.approx(10.0)
    assert found.se == pytest.approx(math.sqrt(50 / 2 + 50 / 2 + 1800 / 2 + 0) / 2)
    assert (found.won, found.paper, found.verdict) == ((1, 2), 5.0, SAME_SIGN)
    assert found.reason == "t = 0.6"
    results["A2"] = runs(0.5, 0.7)  # 60 - 60 = 0: t = 20 / (sqrt(150) / 2)
    found = judged(grouped(), results)
    assert (found.ours, found.won, found.verdict) == (pytest.approx(20.0), (2, 2), REPRODUCED)


def test_one_pair_of_groups_is_the_comparison_of_its_rows():
    results = {"A1": runs(0.8, 0.3, 0.9), "B1": runs(0.4, 0.5, first_seed=1)}
    by_group, by_rows = judged(grouped(1), results), judged(compare(gap=5.0), {
        "A": results["A1"], "B": results["B1"]})
    assert (by_group.ours, by_group.se, by_group.won, by_group.verdict, by_group.reason) == (
        by_rows.ours, by_rows.se, by_rows.won, by_rows.verdict, by_rows.reason)


def test_groups_leave_out_a_pair_without_the_metric_and_count_seeds_run_for_all():
    results = {"A1": runs(0.8, 0.9, 0.7), "B1": runs(0.4, 0.5, 0.1),
               "A2": runs(0.5, 0.7), "B2": runs(0.6, 0.6)}
    found = judged(grouped(), results)
    assert found.won == (2, 2)  # seed 2 was not run for A2 and B2
    neither = {**results, "A3": runs(0.1, key=OTHER), "B3": runs(0.2, key=OTHER)}
    left_out, two_pairs = judged(grouped(3), neither), judged(grouped(2), results)
    assert (left_out.ours, left_out.se, left_out.won, left_out.reason) == (
        two_pairs.ours, two_pairs.se, two_pairs.won, two_pairs.reason)
    one = {**results, "A3": runs(0.1, 0.2), "B3": runs(0.2, key=OTHER)}
    assert judged(grouped(3), one).reason == "B3 recorded no score"
    assert judged(grouped(3), {**results, "A3": runs(0.1, 0.2)}).reason == "B3 not run"
    assert judged(grouped(1), {"A1": runs(0.1, key=OTHER), "B1": runs(0.2, key=OTHER)}
                  ).reason == "A1 recorded no score"
    single = judged(grouped(), {**results, "B2": runs(0.6)})
    assert (single.verdict, single.reason) == (UNTESTABLE, "one seed of B2: no spread")


def test_value_claims():
    claim = Claim("B near 57", Value("B", KEY, 57.0, 5.0))
    found = judged(claim, {"B": runs(0.50, 0.54)})  # mean 52, 5.0 off: within 5 + 2 SE
    assert found.ours == pytest.approx(52.0) and found.se == pytest.approx(2.0)
    assert (found.verdict, found.won, found.paper) == (REPRODUCED, (1, 2), 57.0)
    assert found.reason == "5.0 off, within 5.0 + 2 SE"
    found = judged(claim, {"B": runs(0.10, 0.12, 0.08)})
    assert (found.verdict, found.won) == (CONTRADICTED, (0, 3))
    assert found.reason == "47.0 off, beyond 5.0 + 2 SE"
    # the spread widens what counts as within: 8 off with SE 2 is within 5 + 4
    assert judged(claim, {"B": runs(0.47, 0.51)}).verdict == REPRODUCED
    assert judged(claim, {"B": runs(0.48, 0.48)}).verdict == CONTRADICTED  # SE 0: 9 off
    found = judged(claim, {"B": runs(0.57)})
    assert (found.verdict, found.reason, found.won) == (
        UNTESTABLE, "one seed of B: no spread", (1, 1))
    assert judged(claim, {}).reason == "B not run"


def test_declared_untestable():
    found = judged(Claim("METEOR", Untestable("no WordNet here")), {"A": runs(0.5, 0.6)})
    assert (found.verdict, found.reason, found.ours, found.won) == (
        UNTESTABLE, "no WordNet here", None, None)


def test_a_row_of_the_earlier_report_uses_its_mean_spread_and_seeds():
    """A row shown from an earlier report (no per-seed results) uses the mean, std and seed
    count it printed; its seeds won are unknown."""
    mine = table(compare())
    rows = {"A": RowSummary({KEY: (80.0, 5.0, None)}, 4, 1.0, earlier=True),
            "B": RowSummary({KEY: (45.0, 7.0710678, None)}, 2, 1.0)}
    results = {"A": runs(0.1), "B": runs(0.4, 0.5)}  # A's one run is not the row shown
    (found,) = claim_verdicts(mine, results, rows)
    assert found.ours == pytest.approx(35.0) and found.won is None
    assert found.se == pytest.approx(math.sqrt(25 / 4 + 50 / 2))
    assert found.verdict == REPRODUCED
    one = {**rows, "A": RowSummary({KEY: (80.0, None, None)}, 1, 1.0, earlier=True)}
    assert claim_verdicts(mine, results, one)[0].reason == "one seed of A: no spread"
    other = {**rows, "A": RowSummary({OTHER: (80.0, 1.0, None)}, 3, 1.0, earlier=True)}
    assert claim_verdicts(mine, results, other)[0].reason == "A recorded no score"


def test_the_report_opens_with_its_claims_table():
    mine = table(compare(), Claim("B near 57", Value("B", KEY, 57.0, 5.0)),
                 Claim("METEOR", Untestable("no WordNet here")))
    text = render(mine, "cpu", range(2), {"A": runs(0.8, 0.9), "B": runs(0.4, 0.5)})
    lines = text.splitlines()
    assert lines[:7] == [
        "# Mine", "",
        "| claim | paper | ours | SE | seeds won | verdict |", "|---|---|---|---|---|---|",
        "| A over B (Table 9) | +10.0 | +40.0 | 7.07 | 2 of 2 | reproduced (t = 5.7) |",
        "| B near 57 | 57.0 (tolerance 5.0) | 45.0 | 5.00 | 0 of 2 | reproduced (12.0 off, "
        "within 5.0 + 2 SE) |",
        "| METEOR | — | — | — | — | untestable: no WordNet here |"]
    assert lines[8].startswith("Paper and ours: A − B") and "reproduce/claims.py" in lines[8]
    assert "Bug or budget" not in text
    bare = table()  # neither claims nor the paper's numbers: no paper's table
    assert render(bare, "cpu", range(1), {"A": runs(0.8), "B": runs(0.4)}).splitlines()[2] == (
        "**Claims:** none: this table compares this library's own rows, with no paper's "
        "numbers beside them.")
    of_a_paper = replace(bare, rows=(replace(bare.rows[0], paper={KEY: 0.5}), bare.rows[1]))
    assert render(of_a_paper, "cpu", range(1), {"A": runs(0.8), "B": runs(0.4)}
                  ).splitlines()[2] == "**Claims:** this table states no claims of the paper yet."


def test_bug_or_budget_lists_the_evidence_and_the_cited_verdicts():
    cited_claim = compare(name="A over B at 12 epochs")
    (elsewhere,) = verdicts(table(cited_claim), {"A": runs(0.8, 0.9), "B": runs(0.4, 0.5)})
    claim = Claim("A over B", Comparison(("A", "B"), KEY, "higher", None),
                  evidence=("At 3 of 30 epochs.", "See the notes."),
                  see=(("later", "A over B at 12 epochs"), ("never", "A over B")))
    text = render(table(claim), "cpu", range(2), {"A": runs(0.4, 0.5), "B": runs(0.8, 0.9)},
                  cited={("later", "A over B at 12 epochs"): (("cpu", elsewhere),)})
    assert ("| A over B | — | -40.0 | 7.07 | 0 of 2 | contradicted (t = -5.7) |"
            in text.splitlines())
    assert ("**Bug or budget:**\n\n"
            "- **A over B:** At 3 of 30 epochs. See the notes.\n"
            "  - later (budget `cpu`), A over B at 12 epochs: reproduced (t = 5.7); paper "
            "+10.0, ours +40.0, SE 7.07, seeds won 2 of 2.\n"
            "  - never, A over B: not run.\n") in text



def test_a_table_cited_before_all_its_rows_ran_gives_its_verdicts():
    """A row without runs has no summary (a cited table is judged over all its rows, some of
    which may not have run yet): its claims are untestable, not an error."""
    from lit_structattn.reproduce.report import EarlierReport, row_summaries, table_verdicts
    from lit_structattn.reproduce.tables import TABLES

    table = TABLES["tree_transduction"]
    results = {"simple": [{"seed": 0, "metrics": {"test/ltf_d3": 0.5}, "wall_seconds": 1.0}]}
    assert set(row_summaries(table, results, EarlierReport())) == {"simple"}
    found = table_verdicts(table, results, EarlierReport())
    assert found and all(v.verdict == "untestable" for v in found)
