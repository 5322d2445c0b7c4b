"""The runner's best-on-validation cells and row-group averages (the babi_qa table), on stored
results; tables without ``select_by`` or groups render as before."""

from __future__ import annotations

from dataclasses import replace

from lit_structattn.reproduce.report import render
from lit_structattn.reproduce.tables import TABLES


def result(seed, val, accuracy, facts=None):
    metrics = {"test/accuracy": accuracy, **({} if facts is None else
                                             {"test/fact_accuracy": facts})}
    return {"metrics": metrics, "validation": {"val/accuracy": val}, "wall_seconds": 30.0,
            "seed": seed, "threads": 1}


def test_babi_table_rows_and_paper_numbers():
    table = TABLES["babi_qa"]
    assert len(table.rows) == 36 and table.select_by == "val/accuracy"
    row = next(r for r in table.rows if r.name == "task 16, Binary CRF")
    assert row.paper == {"test/accuracy": 97.9, "test/fact_accuracy": 85.6}
    assert row.overrides == ("--data.init_args.task", "16",
                             "--model.init_args.model.init_args.hops", "3")
    assert row.group == "Binary CRF"
    task2 = next(r for r in table.rows if r.name == "task 02, Unary CRF")
    assert task2.overrides == ("--data.init_args.task", "2")  # K = 2, the base config's
    task7 = next(r for r in table.rows if r.name == "task 07, MemN2N")
    assert "test/fact_accuracy" not in task7.paper


def test_best_on_validation_mean_and_group_average():
    table = TABLES["babi_qa"]
    rows = tuple(r for r in table.rows if r.name in ("task 07, MemN2N", "task 16, MemN2N"))
    results = {
        "task 16, MemN2N": [result(0, 0.60, 0.50, 0.10), result(1, 0.95, 0.90, 0.80),
                            result(2, 0.95, 0.70, 0.40)],  # tie on validation: seed 1 wins
        "task 07, MemN2N": [result(0, 0.80, 0.82), result(1, 0.70, 0.84)],
    }
    text = render(replace(table, rows=rows, select_top={}), "cpu", range(3), results)
    assert "the test value of the seed best on val/accuracy / mean" in text
    assert "| task 16, MemN2N | 90.0 / 70.0 ± 20.0 (paper 97.1) | 80.0 / 43.3 ± 35.1 (paper " \
           "91.0) | 3 |" in text
    assert "| task 07, MemN2N | 82.0 / 83.0 ± 1.4 (paper 83.2) | — / — |" in text
    # answers averaged over both tasks, facts over task 16 only (as the paper leaves out 7, 8)
    assert "| average, MemN2N (2 rows) | 86.0 / 76.5 (paper 90.2) | 80.0 / 43.3 (paper " \
           "91.0) | — | — |" in text


def test_tables_without_selection_render_as_before():
    table = TABLES["tree_transduction"]
    results = {row.name: [{"metrics": {"test/ltf_d2": 0.5}, "wall_seconds": 60.0, "seed": 0,
                           "threads": 1}] for row in table.rows}
    text = render(table, "cpu", range(1), results)
    assert "Cells: ours, mean ± standard deviation over seeds (in %; the mean alone for one " \
           "seed), then the paper's number." in text
    assert "| no attention | 50.0 (paper 7.6) | — (paper 4.1) |" in text  # one seed: no ±
    assert "| average," not in text


def test_the_whole_group_shows_the_papers_printed_average_beside_its_rows_mean():
    """Table 4 prints 39.6 as MemN2N's average fact accuracy, where its rows average 36.6: a
    report of the whole group shows both, labelled; a report of part of it only the rows'."""
    table = TABLES["babi_qa"]
    memn2n = [row for row in table.rows if row.group == "MemN2N"]
    results = {row.name: [{"metrics": {"test/accuracy": 0.5, **({} if "test/fact_accuracy" not in
                                                                   row.paper else
                                                                   {"test/fact_accuracy": 0.25})},
                           "validation": {"val/accuracy": 0.5}, "wall_seconds": 60.0}]
               for row in memn2n}  # no fact accuracy for tasks 7 and 8
    whole = render(replace(table, rows=tuple(memn2n)), "cpu", range(1), results)
    assert ("| average, MemN2N (12 rows) | 50.0 / 50.0 (paper: printed 81.4, mean of its rows "
            "81.4) | 25.0 / 25.0 (paper: printed 39.6, mean of its rows 36.6) |") in whole
    part = render(replace(table, rows=tuple(memn2n[:2])), "cpu", range(1), results)
    assert "paper: printed" not in part and "| average, MemN2N (2 rows) |" in part


def test_a_metric_may_show_the_mean_of_the_n_best_on_validation():
    """Kim et al.'s bAbI facts: the mean over the 10 best of 20 initializations (here the 2 best
    of 3: seeds 1 and 2, tied on validation, ahead of seed 0); answers keep the single best."""
    table = TABLES["babi_qa"]
    assert table.select_top == {"test/fact_accuracy": 10}
    rows = tuple(r for r in table.rows if r.name == "task 16, MemN2N")
    results = {"task 16, MemN2N": [result(0, 0.60, 0.50, 0.10), result(1, 0.95, 0.90, 0.80),
                                   result(2, 0.95, 0.70, 0.40)]}
    text = render(replace(table, rows=rows, select_top={"test/fact_accuracy": 2}), "cpu",
                  range(3), results)
    assert "seed best on val/accuracy (facts: the mean of the 2 best) / mean" in text
    assert "| task 16, MemN2N | 90.0 / 70.0 ± 20.0 (paper 97.1) | 60.0 / 43.3 ± 35.1" in text
