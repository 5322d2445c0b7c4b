"""The GPU check's pieces that run anywhere: seconds per epoch of a reproduction row (timed here
on the CPU), in a chosen precision, the cost estimate of a whole table, the refusal without a
GPU, the report of steps that pass, fail, run over their time limit or are never reached, the
quick plan's time limits, and its dry run on the CPU."""

from __future__ import annotations

import re
import subprocess
import sys
import time

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
    assert "not timed" in epoch_seconds.render([timed], {"nli": table})


def test_a_row_is_timed_in_the_precision_asked_for():
    table = load_tables()["tree_transduction"]
    timed = epoch_seconds.time_row(table, table.rows[0], "ci", "cpu", batches=3,
                                   precision="bf16-mixed")
    assert timed.error is None and timed.precision == "bf16-mixed"
    assert epoch_seconds.time_row(table, table.rows[0], "ci", "cpu", batches=3).precision \
        == "32-true"  # as configured


def test_named_rows_are_timed_in_each_precision_the_first_also_in_fp32(monkeypatch, capsys):
    timed = []

    def fake(table, row, budget, device, batches, precision):
        timed.append((table.name, row.name, precision))
        return EpochTime(table.name, row.name, budget, 0.01, 10, 2, precision=precision)

    monkeypatch.setattr(epoch_seconds, "time_row", fake)
    times, tables = epoch_seconds.run("cpu", ["cpu"], 3, named=[
        "tree_transduction/structured", "easy_first_ner/NEF-F, N=5 (en)"],
        precisions=["bf16-mixed", "16-mixed"], fp32_first=True)
    assert timed == [("tree_transduction", "structured", "32-true"),
                     ("tree_transduction", "structured", "bf16-mixed"),
                     ("tree_transduction", "structured", "16-mixed"),
                     ("easy_first_ner", "NEF-F, N=5 (en)", "bf16-mixed"),
                     ("easy_first_ner", "NEF-F, N=5 (en)", "16-mixed")]
    assert "tree_transduction / structured / cpu / 16-mixed: 0.1 s per epoch, 10.0 ms per " \
        "batch" in capsys.readouterr().out  # printed as it goes
    report = epoch_seconds.render(times, tables)
    assert "| tree_transduction | structured | cpu | 16-mixed | 10.0 | 10 | 0.1 | 2 |" in report
    assert "cpu, 32-true: hours (estimate) | cpu, bf16-mixed: hours (estimate) | " \
        "cpu, 16-mixed: hours (estimate) |" in report
    with pytest.raises(SystemExit, match="'tree_transduction' has .*'structured'"):
        epoch_seconds.run("cpu", ["cpu"], 3, named=["tree_transduction/structure"])


def test_no_row_is_started_once_the_seconds_are_spent(monkeypatch):
    def slow(table, row, budget, device, batches, precision):
        time.sleep(0.3)
        return EpochTime(table.name, row.name, budget, 0.01, 10, 2, precision="32-true")

    monkeypatch.setattr(epoch_seconds, "time_row", slow)
    times, tables = epoch_seconds.run("cpu", ["cpu"], 3, ["tree_transduction"], "all",
                                      seconds=0.2)
    assert [t.error for t in times] == [None, "not started: --seconds 0.2 spent",
                                        "not started: --seconds 0.2 spent"]
    assert "| structured | cpu | - | - | - | - | not timed: not started" in \
        epoch_seconds.render(times, tables)


def test_a_table_costs_its_mean_row_times_epochs_rows_and_seeds():
    table = load_tables()["tree_transduction"]  # 3 rows, 3 seeds
    times = [EpochTime("tree_transduction", "a", "cpu", 0.01, 100, 10),  # 10 s a run
             EpochTime("tree_transduction", "b", "cpu", 0.03, 100, 10),  # 30 s a run
             EpochTime("tree_transduction", "c", "paper", error="no data")]
    assert epoch_seconds.table_cost_hours(times, table, "cpu") == pytest.approx(20 * 9 / 3600)
    assert epoch_seconds.table_cost_hours(times, table, "paper") is None
    assert epoch_seconds.table_cost_hours(times, table, "cpu", "bf16-mixed") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_the_gpu_check_refuses_to_run_without_a_gpu(monkeypatch):
    monkeypatch.setattr("sys.argv", ["bench.gpu"])
    with pytest.raises(SystemExit, match="no CUDA GPU"):
        gpu.main()


def fake_gpu(monkeypatch, steps: list[gpu.Step]) -> None:
    """The full check's plan replaced by ``steps``, and torch made to see one GPU."""
    monkeypatch.setattr(gpu, "full_plan", lambda repeats, batches: steps)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_the_gpu_report_gathers_each_steps_tables_and_failures(monkeypatch, tmp_path):
    """With the GPU and the steps faked: a step's markdown tables go into the report, a failing
    step's output tail is quoted with its exit code, and the others still run."""
    fake_gpu(monkeypatch, [
        gpu.Step("tests", "Fine", ("-c", "print('noise'); print('| a |')")),
        gpu.Step("benches", "Broken", ("-c", 'raise SystemExit("went wrong")'),
                 {"STRUCTATTN_COMPILED": "0"}),
        gpu.Step("epochs", "Also run", ("-c", "print('| b |')"))])
    monkeypatch.setattr("sys.argv", ["bench.gpu", "--report", str(tmp_path / "gpu.md")])
    gpu.main()
    report = (tmp_path / "gpu.md").read_text()
    assert "On `Fake GPU` (1 GPU(s))" in report
    assert "## Fine" in report and "\n| a |\n" in report and "\nnoise\n" not in report
    assert "FAILED (exit 1)" in report and "went wrong" in report
    assert """`STRUCTATTN_COMPILED=0 python -c 'raise SystemExit("went wrong")'`""" in report
    assert "## Also run" in report and "\n| b |\n" in report


def test_a_step_over_its_time_limit_is_stopped_with_its_children(monkeypatch, tmp_path):
    """A step that runs over its limit is killed with the processes it started (which hold its
    output open), its output so far is kept, and the next step runs."""
    hangs = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(120)']); print('| done so far |', flush=True); "
             "time.sleep(120)")
    fake_gpu(monkeypatch, [gpu.Step("benches", "Hangs", ("-c", hangs), limit_s=3),
                           gpu.Step("epochs", "Next", ("-c", "print('| next |')"), limit_s=60)])
    monkeypatch.setattr("sys.argv", ["bench.gpu", "--report", str(tmp_path / "gpu.md")])
    start = time.perf_counter()
    gpu.main()
    assert time.perf_counter() - start < 60
    report = (tmp_path / "gpu.md").read_text()
    assert re.search(r"## Hangs\n\n`.*`: TIMED OUT in \d+ s \(benches, limit 3 s\)", report)
    assert "| done so far |" in report
    assert "## Next" in report and "passed" in report and "\n| next |\n" in report


@pytest.mark.parametrize("stopped_at", ["First", "Second"])
def test_a_check_stopped_midway_leaves_the_report_of_what_it_did(monkeypatch, tmp_path,
                                                                stopped_at):
    fake_gpu(monkeypatch, [gpu.Step("tests", "First", ("-c", "print('| one |')")),
                           gpu.Step("benches", "Second", ("-c", "print(2)")),
                           gpu.Step("epochs", "Third", ("-c", "print(3)"))])
    run_step = gpu.run_step

    def stopped(step):
        if step.title == stopped_at:
            raise KeyboardInterrupt  # the machine taken back
        return run_step(step)

    monkeypatch.setattr(gpu, "run_step", stopped)
    monkeypatch.setattr("sys.argv", ["bench.gpu", "--report", str(tmp_path / "gpu.md")])
    with pytest.raises(KeyboardInterrupt):
        gpu.main()
    report = (tmp_path / "gpu.md").read_text()
    assert ("\n| one |\n" in report) == (stopped_at == "Second")
    assert "## Second\n\n`python -c 'print(2)'`: not reached (benches)." in report
    assert "## Third\n\n`python -c 'print(3)'`: not reached (epochs)." in report


def test_the_quick_check_fits_its_slot_most_important_first():
    """Its limits add up to at most 8 minutes; the cuda tests of the transforms and CRFs come
    first, then the transforms and marginals at the issue's sizes, the training steps of every
    family in both mixed precisions, and seconds per epoch of every table."""
    plan = gpu.quick_plan(gpu.QUICK)
    assert all(step.limit_s for step in plan)
    assert sum(step.limit_s for step in plan) <= gpu.QUICK_SECONDS == 480
    assert [step.part for step in plan] == ["tests", "benches", "benches", "training", "epochs"]
    tests, transforms, marginals, training, epochs = (step.shown() for step in plan)
    assert "-m cuda" in tests and "tests/test_transform_precision.py" in tests \
        and "tests/test_cuda_structured.py" in tests
    assert "--device cuda" in transforms and "--sizes 2048x1024 3200x50" in transforms
    assert "chain-decoder" in marginals and "--no-memory" not in marginals
    assert "--precisions bf16-mixed 16-mixed --fp32-first --batches 22 --seconds 120" in training
    assert set(gpu.FAMILIES) <= set(plan[3].command)
    rows = epoch_seconds.named_rows(load_tables(), list(gpu.FAMILIES))  # rows that exist
    assert len({table.name for table, _ in rows}) == len(gpu.FAMILIES) == 6
    assert "--rows first" in epochs and "--tables" not in epochs and "--seconds 40" in epochs
    dry = [step.shown() for step in gpu.quick_plan(gpu.DRY_RUN)]
    assert [text.split(" --")[0] for text in dry] == [text.split(" --")[0] for text in
                                                      (tests, transforms, marginals, training,
                                                       epochs)]  # the same commands
    assert all("--device cpu" in text for text in dry[1:])


@pytest.mark.slow
def test_the_quick_check_dry_run_starts_every_step_on_the_cpu(tmp_path):
    """``python -m bench.gpu --quick --dry-run``: every step of the quick check, once, at tiny
    sizes on the CPU, each passing, into the report it is given."""
    report = tmp_path / "gpu.md"
    done = subprocess.run([sys.executable, "-m", "bench.gpu", "--quick", "--dry-run",
                           "--report", str(report)], cwd=gpu.ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    text = report.read_text()
    assert "Dry run on the CPU" in text
    for step in gpu.quick_plan(gpu.DRY_RUN):
        assert f"## {step.title}\n\n`{step.shown()}`: passed in " in text
    assert "| [8 x 16] | fertility | csparsemax |" in text
    assert "| LinearChainCRF B=32 T=100 C=2 |" in text
    assert "| tree_transduction | structured | ci | 32-true |" in text
    assert "| tree_transduction | structured | ci | bf16-mixed |" in text
    assert "| tree_transduction | no attention | ci | 32-true |" in text
