"""Benchmark: training speed of the decomposable attention model (Kim et al. 2017, §4.4) with
structured intra-sentence attention (dependency-CRF marginals) against simple attention (a
softmax over heads), and without intra-sentence attention, in the same run.

SNLI batches of 32 pairs from the cpu protocol's training split (SNLI dev minus the held-out
10%), the model of configs/nli/base.yaml (300 units, parsing BiLSTM 100 per direction, trained
300-d embeddings); one step = forward, cross-entropy, backward and an Adagrad update. The
candidates take turns batch by batch, so load on a shared machine hits all of them alike; the
table gives training pairs per second (from the median step) and the ratio to simple attention.

    python -m bench.nli [--steps 30] [--threads 1]
"""

from __future__ import annotations

import statistics
from pathlib import Path

import torch.nn.functional as F

from bench.timing import (
    config_task,
    markdown_table,
    optimizer_of,
    start_step_bench,
    step_bench_parser,
    training_step_times,
    write_report,
)
from lit_structattn.datamodules.nli import NLIDataModule

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_nli.md"
CANDIDATES = ("simple", "structured", "none")
BATCH = 32


def step_times(steps: int) -> dict[str, list[float]]:
    data = NLIDataModule("snli", batch_size=BATCH)
    data.setup("fit")
    loader = iter(data.train_dataloader())
    batches = [next(loader) for _ in range(steps)]
    tasks = {intra: config_task(["nli/base.yaml", "nli/snli.yaml"], intra=intra)
             for intra in CANDIDATES}
    for task in tasks.values():
        task.prepare_for(data)
    models = {intra: task.model for intra, task in tasks.items()}

    def loss_of(model):
        return lambda batch: F.cross_entropy(
            model(batch["premise"], batch["premise_lengths"], batch["hypothesis"],
                  batch["hypothesis_lengths"]).logits, batch["labels"])

    return training_step_times(
        batches, {name: loss_of(model) for name, model in models.items()},
        {name: optimizer_of(task) for name, task in tasks.items()})


def speed_table(times: dict[str, list[float]]) -> tuple[str, float]:
    """The markdown table and the structured / simple ratio of pairs per second."""
    rate = {name: BATCH / statistics.median(t) for name, t in times.items()}
    table = markdown_table(
        ["intra-sentence attention", "median step (ms)", "pairs/s", "pairs/s / simple"],
        [[name, f"{1e3 * statistics.median(times[name]):.0f}", f"{rate[name]:.0f}",
          f"{rate[name] / rate['simple']:.2f}x"] for name in CANDIDATES])
    return table, rate["structured"] / rate["simple"]


def main() -> None:
    parser = step_bench_parser(__doc__, steps=30)
    args = parser.parse_args()
    allocator = start_step_bench(args)
    table, ratio = speed_table(step_times(args.steps))
    print(table)
    if not args.no_report:
        body = (f"{__doc__.split(chr(10) * 2)[1]}\n\n{allocator}\n\n"
                f"## SNLI, {args.steps} batches of {BATCH} pairs\n\n{table}\n\n"
                f"Target: structured >= 0.33x the pairs/s of simple; measured {ratio:.2f}x.")
        write_report(REPORT, "NLI: structured vs simple intra-sentence attention, training "
                     "speed", f"python -m bench.nli --steps {args.steps} --threads "
                     f"{args.threads}", body)


if __name__ == "__main__":
    main()
