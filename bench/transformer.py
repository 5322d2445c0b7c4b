"""Benchmark: the training step of the small Transformer (configs/translation/transformer.yaml)
on Multi30k De->En per cross-attention transform, the rows of reports/transformer_nmt.md.

Training step = teacher-forced label-smoothed loss, backward and an Adam update of
:class:`TranslationTask`'s model, on the same training batches (64 pairs) for softmax, entmax15
and sparsemax cross-attention (self-attention is softmax in all three); the transforms take
turns batch by batch so that load on a shared machine hits all of them alike. The step times of
reports/transformer_nmt.md are each run's own, timed while another run shared the machine;
these are measured side by side in one process.

    python -m bench.transformer [--steps 40] [--threads 1]
"""

from __future__ import annotations

from pathlib import Path

from bench.timing import config_task, start_step_bench, step_bench_parser, write_report
from bench.translation import ratio_table, step_times
from lit_structattn.datamodules.translation import TranslationDataModule
from lit_structattn.tasks import TranslationTask

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_transformer.md"
CROSS_ATTENTION = ("softmax", "entmax15", "sparsemax")  # the rows of transformer_nmt


def transformer_task(cross_attention: str) -> TranslationTask:
    return config_task(["translation/base.yaml", "translation/transformer.yaml"],
                       cross_attention=cross_attention)


def main() -> None:
    parser = step_bench_parser(__doc__, steps=40)
    args = parser.parse_args()
    allocator = start_step_bench(args)
    data = TranslationDataModule(batch_size=64)
    data.setup("fit")
    table = ratio_table("cross-attention", step_times(
        data, args.steps, {name: transformer_task(name) for name in CROSS_ATTENTION}))
    print(table)
    if not args.no_report:
        body = (f"{__doc__.split(chr(10) * 2)[1]}\n\n{allocator}\n\n"
                f"## Training step ({args.steps} batches of 64 pairs)\n\n{table}")
        write_report(REPORT, "The Transformer's training step per cross-attention transform",
                     f"python -m bench.transformer --steps {args.steps} --threads "
                     f"{args.threads}", body)


if __name__ == "__main__":
    main()
