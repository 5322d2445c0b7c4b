"""Benchmark: structured inference and structured attention against their peers.

1. Marginals forward+backward of our LinearChainCRF and DependencyCRF against torch-struct
   (``bench/structured_crf.py``).
2. One decoder step of segmentation attention against softmax attention (B=64, source length
   50, D=256): score, transform/CRF marginals, context, and the backward pass.

Same inputs in one run, 2 threads, best of k after warm-up; writes ``reports/bench_structured.md``.

    python -m bench.structured [--repeats 20]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from bench import structured_crf
from bench.timing import best_time, markdown_table, write_report
from lit_structattn.attention import Attention
from lit_structattn.structured.segmentation import SegmentationAttention

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_structured.md"


def attention_step_times(repeats: int, batch: int = 64, length: int = 50, dim: int = 256):
    """Forward+backward time of one decoder attention step, softmax vs segmentation."""
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(batch, dim, generator=generator)
    keys = torch.randn(batch, length, dim, generator=generator)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    lengths[0] = length
    mask = torch.arange(length)[None, :] < lengths[:, None]
    layers = {
        "softmax": Attention(dim, dim, score="general", transform="softmax"),
        "segmentation": SegmentationAttention(dim, dim, score="general"),
    }

    def step(layer):
        def run() -> None:
            q = query.detach().requires_grad_()
            context, _ = layer(q, keys, mask=mask)
            context.sum().backward()

        return run

    return {name: best_time(step(layer), repeats) for name, layer in layers.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-report", action="store_true", help="print only")
    args = parser.parse_args()
    torch.set_num_threads(2)
    crf_rows = structured_crf.run(args.repeats)
    crf_table = structured_crf.render(crf_rows)
    step = attention_step_times(args.repeats)
    step_table = markdown_table(
        ["decoder attention step (B=64, L=50, D=256)", "time (us)", "/ softmax"],
        [[name, f"{t * 1e6:.0f}", f"{t / step['softmax']:.2f}x"] for name, t in step.items()],
    )
    print(crf_table, "", step_table, sep="\n")
    if not args.no_report:
        body = (
            "## Marginals, forward + backward, ours vs torch-struct\n\n"
            f"{structured_crf.DESCRIPTION}\n\n{crf_table}\n\n"
            "Target: <= 1.0x torch-struct at every size (goal 0.5x).\n\n"
            "## One decoder attention step\n\nScore (bilinear), transform or CRF marginals, "
            "context and the backward pass to the query, best of "
            f"{args.repeats}.\n\n{step_table}\n\nTarget: segmentation <= 2x softmax."
        )
        write_report(REPORT, "Structured inference and attention: speed against peers",
                     "python -m bench.structured", body)


if __name__ == "__main__":
    main()
