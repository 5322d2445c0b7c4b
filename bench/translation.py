"""Benchmark: the translation model at the cpu-budget size (configs/translation/base.yaml) on
Multi30k De->En: the cost of a training step per attention transform, and decoding speed.

Training step = teacher-forced label-smoothed loss, backward and an Adam update of
:class:`TranslationTask`'s model, on the same training batches (64 pairs, with the <SINK>
token) for every transform; the transforms take turns batch by batch so that load on a shared
machine hits all of them alike. The constrained transforms use a constant fertility of 2 and
the exhaustion bonus 0.2. Decoding = greedy and beam-5 translation of the whole test2016 set
(batches of 200, as configured) by the softmax model: a trained checkpoint when
``--checkpoint`` is given (outputs of realistic length), otherwise the untrained model, which
runs every sentence to the length limit (2 S + 10) and so gives a lower bound.

    python -m bench.translation [--steps 40] [--threads 1] [--checkpoint best.ckpt]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from bench.timing import (
    config_task,
    markdown_table,
    optimizer_of,
    start_step_bench,
    step_bench_parser,
    training_step_times,
    write_report,
)
from lit_structattn.datamodules.translation import TranslationDataModule
from lit_structattn.tasks import TranslationTask

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_translation.md"
TRANSFORMS = ("softmax", "sparsemax", "csoftmax", "csparsemax")


def make_task(attention: str) -> TranslationTask:
    constrained = attention.startswith("c")
    return config_task(["translation/base.yaml"], "--data.init_args.sink", "true",
                       attention=attention, fertility=2.0,
                       exhaustion_bonus=0.2 if constrained else 0.0)


def step_times(data: TranslationDataModule, steps: int, tasks: dict[str, TranslationTask]
               ) -> dict[str, list[float]]:
    """Seconds per training step of each task over the same batches."""
    loader = iter(data.train_dataloader())
    batches = [next(loader) for _ in range(steps)]
    optimizers = {name: optimizer_of(task) for name, task in tasks.items()}
    return training_step_times(batches, {name: task.loss for name, task in tasks.items()},
                               optimizers)


@torch.no_grad()
def decoding_speed(data: TranslationDataModule, task: TranslationTask) -> dict[str, float]:
    """Sentences per second of greedy and beam-5 decoding of the test set."""
    task.eval()
    batches = list(data.test_dataloader())
    sentences = sum(len(b["src"]) for b in batches)
    speed = {}
    for name, beam in (("greedy", 1), ("beam 5", 5)):
        start = time.perf_counter()
        for batch in batches:
            task.decode(batch, beam)
        speed[name] = sentences / (time.perf_counter() - start)
    return speed


def main() -> None:
    parser = step_bench_parser(__doc__, steps=40)
    parser.add_argument("--checkpoint", type=Path, help="a trained softmax TranslationTask")
    args = parser.parse_args()
    allocator = start_step_bench(args)
    data = TranslationDataModule(sink=True, batch_size=64)
    data.setup("fit")
    steps_table = ratio_table("attention", step_times(
        data, args.steps, {name: make_task(name) for name in TRANSFORMS}))
    if args.checkpoint:
        task = TranslationTask.load_from_checkpoint(args.checkpoint, map_location="cpu")
        decoder = f"the trained checkpoint `{args.checkpoint.name}`"
    else:
        task = make_task("softmax")
        decoder = "an untrained model (every output runs to the length limit: a lower bound)"
    plain = TranslationDataModule(sink=task.hparams.sink, eval_batch_size=200)
    plain.setup("test")
    speed = decoding_speed(plain, task)
    speed_table = markdown_table(["decoding", "sentences / s"],
                                 [[name, f"{value:.0f}"] for name, value in speed.items()])
    print(steps_table, speed_table, sep="\n\n")
    if not args.no_report:
        command = (f"python -m bench.translation --steps {args.steps} --threads {args.threads}"
                   + (f" --checkpoint {args.checkpoint}" if args.checkpoint else ""))
        body = (
            f"{__doc__.split(chr(10) * 2)[1]}\n\n{__doc__.split(chr(10) * 2)[2]}\n\n"
            f"{allocator}\n\n## Training step ({args.steps} batches of 64 pairs)\n\n"
            f"{steps_table}\n\nTarget: csoftmax and csparsemax <= 1.3x softmax.\n\n"
            f"## Decoding the 1000 test sentences with {decoder}\n\n{speed_table}\n\n"
            "Targets: beam 5 >= 100 sentences/s, greedy >= 400 sentences/s."
        )
        write_report(REPORT, "Translation: training step per attention, decoding speed",
                     command, body)


def ratio_table(label: str, times: dict[str, list[float]]) -> str:
    """The median step per name and its ratio to the first name's (softmax)."""
    first = statistics.median(next(iter(times.values())))
    return markdown_table(
        [label, "median step (ms)", "/ softmax"],
        [[name, f"{1e3 * statistics.median(t):.0f}", f"{statistics.median(t) / first:.2f}x"]
         for name, t in times.items()])


if __name__ == "__main__":
    main()
