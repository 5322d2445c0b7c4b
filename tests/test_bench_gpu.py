"""The GPU check's pieces that run anywhere: seconds per epoch of a reproduction row (timed here
on the CPU), the cost estimate of a whole table, and the refusal without a GPU."""

from __future__ import annotations

import pytest
import torch

from bench import epoch_seconds, gpu
from bench.epoch_seconds import EpochTime
from lit_structattn.reproduce.tables import load_tables


def test_a_row_is_timed_over_its_whole_epoch():
    table = load_tables()["tree_transduction"]
    row = table.rows[0]
    timed = epoch_seconds.time_row(table, row, "cpu", "cpu", batches=4)
    assert timed.error is None
    assert timed.max_epochs == 13  # the cpu budget's, not the 1 epoch timed
    assert timed.batches_per_epoch > 4  # the whole training split, not the 4 batches timed
    assert timed.epoch_seconds == pytest.approx(timed.batch_seconds * timed.batches_per_epoch)


def test_a_row_without_its_data_is_reported_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTATTN_DATA", str(tmp_path))
    monkeypatch.setenv("STRUCTATTN_CACHE", str(tmp_path / "cache"))
    table = load_tables()["nli"]
    timed = epoch_seconds.time_row(table, table.rows[0], "cpu", "cpu", batches=4)
    assert timed.epoch_seconds is None and timed.error
    assert "not timed" in epoch_seconds.render([timed], {"nli": table}, ["cpu"])


def test_a_table_costs_its_mean_row_times_epochs_rows_and_seeds():
    table = load_tables()["tree_transduction"]  # 3 rows, 3 seeds
    times = [EpochTime("tree_transduction", "a", "cpu", 0.01, 100, 10),  # 10 s a run
             EpochTime("tree_transduction", "b", "cpu", 0.03, 100, 10),  # 30 s a run
             EpochTime("tree_transduction", "c", "paper", error="no data")]
    assert epoch_seconds.table_cost_hours(times, table, "cpu") == pytest.approx(20 * 9 / 3600)
    assert epoch_seconds.table_cost_hours(times, table, "paper") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_the_gpu_check_refuses_to_run_without_a_gpu(monkeypatch):
    monkeypatch.setattr("sys.argv", ["bench.gpu"])
    with pytest.raises(SystemExit, match="no CUDA GPU"):
        gpu.main()


def test_the_gpu_report_gathers_each_steps_tables_and_failures(monkeypatch, tmp_path):
    """With the GPU and the steps faked: a step's markdown tables go into the report, a failing
    step's output tail is quoted with its exit code, and the others still run."""
    import sys

    steps = {"tests": [("Fine", [sys.executable, "-c", "print('noise'); print('| a |')"], {})],
             "benches": [("Broken", [sys.executable, "-c", "raise SystemExit('went wrong')"],
                          {"STRUCTATTN_COMPILED": "0"})],
             "epochs": []}
    monkeypatch.setattr(gpu, "commands", lambda repeats, batches: steps)
    monkeypatch.setattr(gpu, "REPORT", tmp_path / "bench_gpu.md")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr("sys.argv", ["bench.gpu"])
    gpu.main()
    report = (tmp_path / "bench_gpu.md").read_text()
    assert "On `Fake GPU` (1 GPU(s))" in report
    assert "## Fine" in report and "\n| a |\n" in report and "\nnoise\n" not in report
    assert "FAILED (exit 1)" in report and "went wrong" in report
    assert "`STRUCTATTN_COMPILED=0 python -c raise SystemExit('went wrong')`" in report
