"""Benchmark: the cost of a tree-transduction training step with each source encoder.

One step = teacher-forced loss, backward and an SGD update of the model of
configs/tree_transduction/base.yaml (:class:`TransductionTask`, the paper's l = 50; batch 20), on
the same training batches for every encoder. The encoders take turns batch by batch so that
load on a shared machine hits all of them; the report gives the median time per step and its
ratio to the ``simple`` encoder (target: ``structured`` <= 2x ``simple``; Kim et al. report 5x
for structured attention).

    python -m bench.tree_transduction [--steps 60]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from bench.timing import (
    config_task,
    markdown_table,
    optimizer_of,
    training_step_times,
    write_report,
)
from lit_structattn.datamodules.tree_transduction import TreeTransductionDataModule

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_tree_transduction.md"
ENCODERS = ("none", "simple", "structured")


def training_batches(steps: int) -> list[dict[str, torch.Tensor]]:
    """``steps`` batches of the paper's training distribution (batch 20, depth 2-4)."""
    data = TreeTransductionDataModule(train_per_depth=max(steps * 20 // 3 + 1, 20),
                                      eval_per_depth=1, batch_size=20)
    data.setup("fit")
    loader = iter(data.train_dataloader())
    return [next(loader) for _ in range(steps)]


def step_times(steps: int) -> dict[str, list[float]]:
    """Seconds per training step for each encoder over the same batches."""
    batches = training_batches(steps)
    tasks = {name: config_task(["tree_transduction/base.yaml"],
                               **{"encoder.source_attention": name})
             for name in ENCODERS}
    optimizers = {name: optimizer_of(task) for name, task in tasks.items()}
    return training_step_times(batches, {name: task._loss for name, task in tasks.items()},
                               optimizers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--no-report", action="store_true", help="print only")
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    times = step_times(args.steps)
    simple = statistics.median(times["simple"])
    table = markdown_table(
        ["source encoder", "median step (ms)", "/ simple"],
        [[name, f"{1e3 * statistics.median(t):.1f}", f"{statistics.median(t) / simple:.2f}x"]
         for name, t in times.items()],
    )
    print(table)
    if not args.no_report:
        body = (
            f"{__doc__.split(chr(10) * 2)[1]}\n\n{args.steps} batches of 20 training formulas "
            f"(depth 2-4), the same for every encoder.\n\n{table}\n\n"
            "Target: structured <= 2x simple (goal 1.5x)."
        )
        write_report(REPORT, "Tree transduction: training step cost per source encoder",
                     f"python -m bench.tree_transduction --steps {args.steps}", body)


if __name__ == "__main__":
    main()
