"""Benchmark: the training-step cost of the joint attention-output layers (Shankar et al. 2018)
and of segmentation attention (Kim et al. 2017) against soft attention, at the sizes of the
reproduction configs.

Translation: Multi30k De->En subword batches of 64 pairs, the model of
configs/translation/base.yaml (:class:`TranslationTask`, joint BPE vocabulary 8000 or
``--bpe-size``), one step = loss,
backward and an Adam update; output layers soft, beam-joint (K = 6), sample-joint and hard
(6 samples, REINFORCE) with softmax attention, and the attention layers sigmoid and
segmentation with the soft output. Morphology: German-noun batches of 20, the model of
configs/morphology/base.yaml (:class:`TransductionTask`, 69 symbols): soft, beam-joint (K = 6) and
full-joint. The candidates take turns batch by batch, so load on a shared machine hits all of
them alike; the table gives the median step and its ratio to soft attention.

    python -m bench.joint_attention [--steps 30] [--threads 1] [--bpe-size 8000] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from lightning.pytorch.utilities import move_data_to_device

from bench.timing import (
    config_task,
    markdown_table,
    optimizer_of,
    training_step_times,
    write_report,
)
from lit_structattn.datamodules.morphology import InflectionDataModule
from lit_structattn.datamodules.translation import TranslationDataModule
from lit_structattn.run.allocator import steady_allocator

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_joint_attention.md"
TRANSLATION = {  # candidate -> Seq2Seq arguments
    "soft": {},
    "beam-joint (K = 6)": {"output": "beam_joint", "joint_k": 6},
    "sample-joint (6 samples)": {"output": "sample_joint", "joint_k": 6},
    "hard (6 samples)": {"output": "hard", "joint_k": 6},
    "sigmoid attention": {"attention": "sigmoid"},
    "segmentation attention": {"attention": "segmentation"},
}
MORPHOLOGY = {
    "soft": {},
    "beam-joint (K = 6)": {"output": "beam_joint", "joint_k": 6},
    "full-joint": {"output": "full_joint"},
}


def first_batches(data, steps: int, device: str = "cpu") -> list:
    """The first ``steps`` training batches of ``data``, on ``device``."""
    loader = iter(data.train_dataloader())
    return [move_data_to_device(next(loader), device) for _ in range(steps)]


def translation_times(steps: int, bpe_size: int, device: str = "cpu") -> dict[str, list[float]]:
    """Seconds per training step of every output and attention of :data:`TRANSLATION` on the
    first ``steps`` batches of Multi30k (BPE ``bpe_size``), on ``device``."""
    data = TranslationDataModule(batch_size=64, bpe_size=bpe_size)
    data.setup("fit")
    tasks = {name: config_task(["translation/base.yaml"], "--data.init_args.bpe_size",
                               str(len(data.subwords)), **kwargs).to(device)
             for name, kwargs in TRANSLATION.items()}
    return training_step_times(first_batches(data, steps, device),
                               {name: task.loss for name, task in tasks.items()},
                               {name: optimizer_of(task) for name, task in tasks.items()},
                               device=device)


def morphology_times(steps: int, device: str = "cpu") -> dict[str, list[float]]:
    """Seconds per training step of every output of :data:`MORPHOLOGY` on the first ``steps``
    batches of German nouns, on ``device``."""
    data = InflectionDataModule(pos="noun", batch_size=20)
    data.setup("fit")
    tasks = {name: config_task(["morphology/base.yaml", "morphology/nouns.yaml"],
                               **kwargs).to(device)
             for name, kwargs in MORPHOLOGY.items()}

    def loss_of(task):
        return lambda batch: task.model.loss(batch["src"], batch["src_lengths"],
                                             batch["tgt_in"], batch["tgt_out"])

    return training_step_times(first_batches(data, steps, device),
                               {name: loss_of(task) for name, task in tasks.items()},
                               {name: optimizer_of(task) for name, task in tasks.items()},
                               device=device)


def ratio_table(times: dict[str, list[float]]) -> str:
    soft = statistics.median(times["soft"])
    return markdown_table(
        ["model", "median step (ms)", "/ soft"],
        [[name, f"{1e3 * statistics.median(t):.0f}", f"{statistics.median(t) / soft:.2f}x"]
         for name, t in times.items()],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bpe-size", type=int, default=8000)
    parser.add_argument("--no-report", action="store_true", help="print only")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    args = parser.parse_args()
    allocator = steady_allocator() if args.device == "cpu" else f"On `{args.device}`."
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    translation = ratio_table(translation_times(args.steps, args.bpe_size, args.device))
    print(translation)
    morphology = ratio_table(morphology_times(args.steps, args.device))
    print(morphology)
    if not args.no_report:
        paragraphs = __doc__.split("\n\n")
        body = (
            f"{paragraphs[1]}\n\n{allocator}\n\n"
            f"## Translation ({args.steps} batches of 64 pairs, BPE {args.bpe_size})\n\n"
            f"{translation}\n\n"
            f"## Morphology, German nouns ({args.steps} batches of 20)\n\n{morphology}\n\n"
            "Targets: beam-joint (K = 6) <= 1.25x soft (the paper: 20-30% on a GPU); "
            "segmentation attention <= 2x soft (Kim et al.: 5x). On a CPU the output layer "
            "(hidden x vocabulary) is most of a soft translation step, and the joint outputs "
            "and the sampled ones compute it for 6 positions, so their cost grows with the "
            "vocabulary; on a GPU those products run in parallel."
        )
        report = REPORT if args.device == "cpu" else \
            REPORT.with_name(f"{REPORT.stem}_{args.device.replace(':', '')}.md")
        write_report(report, "Joint attention and segmentation attention: training-step cost",
                     f"python -m bench.joint_attention --steps {args.steps} "
                     f"--threads {args.threads} --bpe-size {args.bpe_size}"
                     + ("" if args.device == "cpu" else f" --device {args.device}"), body)


if __name__ == "__main__":
    main()
