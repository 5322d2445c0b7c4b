"""Benchmark: the training-step cost of the unary and binary CRF attention over facts and of
MemN2N with sparsemax against MemN2N (Kim et al. 2017, §4.3), in the same run, at the sizes of
configs/babi/base.yaml.

bAbI batches of 32 questions (task 16: K = 3 hops, 9 facts; task 2: K = 2, up to 25 facts), one
step = forward, the answer loss summed over the batch, backward and an SGD update (gradient
clipping, the same for every model, is left out). The candidates take turns batch by batch, so
load on a shared machine hits all of them alike; the table gives the median step and its ratio
to MemN2N (target for the binary CRF: at most 1.5x).

    python -m bench.babi [--steps 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.timing import (
    config_task,
    markdown_table,
    optimizer_of,
    training_step_times,
    write_report,
)
from lit_structattn.datamodules.babi import BabiDataModule
from lit_structattn.layers import registry
from lit_structattn.run.allocator import steady_allocator

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_babi.md"
TASKS = {16: 3, 2: 2}  # task -> K, Kim et al. (2017) Table 4
LABELS = {"softmax": "MemN2N", "sparsemax": "MemN2N sparsemax", "unary_crf": "Unary CRF",
          "binary_crf": "Binary CRF"}
ATTENTIONS = registry.names("memory_network")  # every attention the memory network takes


def step_times(task: int, steps: int) -> dict[str, list[float]]:
    """Seconds per training step of the memory network with every attention of
    :data:`ATTENTIONS` (the rows of configs/babi/rows/) on ``steps`` training batches of
    ``task``."""
    data = BabiDataModule(task=task, batch_size=32)
    data.setup("fit")
    batches = list(itertools.islice(itertools.cycle(data.train_dataloader()), steps))
    tasks = {}
    for name in ATTENTIONS:
        torch.manual_seed(0)
        tasks[name] = config_task(["babi/base.yaml", f"babi/rows/{name}.yaml"],
                                  "--data.init_args.task", str(task), hops=TASKS[task])

    def loss_of(model):
        def loss(batch):
            logits = model(batch["story"], batch["story_lengths"], batch["sentence_lengths"],
                           batch["query"], batch["query_lengths"]).logits
            return F.cross_entropy(logits, batch["answer"], reduction="sum")
        return loss

    return training_step_times(batches, {name: loss_of(t.model) for name, t in tasks.items()},
                               {name: optimizer_of(t) for name, t in tasks.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    allocator = steady_allocator()
    rows, binary = [], []
    for task in TASKS:
        times = step_times(task, args.steps)
        base = statistics.median(times["softmax"])
        for name in ATTENTIONS:
            median = statistics.median(times[name])
            if name == "binary_crf":
                binary.append(f"task {task}: {median / base:.2f}x")
            rows.append((f"task {task} (K = {TASKS[task]})", LABELS[name],
                         f"{1000 * median:.2f}", f"{median / base:.2f}x"))
    body = "\n\n".join([
        __doc__.split("\n\n")[1].replace("\n", " "),
        markdown_table(["batches", "model", "median step (ms)", "vs MemN2N"], rows),
        f"Binary CRF / MemN2N: {', '.join(binary)} (target <= 1.5x).",
        allocator,
    ])
    write_report(REPORT, "Training step: CRF attention over facts vs MemN2N (bAbI)",
                 f"python -m bench.babi --steps {args.steps} --threads {args.threads}", body)
    print(REPORT.read_text())


if __name__ == "__main__":
    main()
