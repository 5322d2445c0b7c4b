"""Benchmark: forward+backward time of the attention transforms against their peers.

Ours: sparsemax, csoftmax, csparsemax. Peers: ``entmax.sparsemax`` (sort-based, the sparse
transform a user would otherwise pick) and ``torch.softmax`` (the floor). Same inputs, one run,
2 threads, best of k interleaved rounds after warm-up; prints ratios and writes
``reports/bench_transforms.md``.

    python -m bench.transforms [--repeats 30]
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import entmax
import torch

from bench.timing import best_times, markdown_table, write_report
from lit_structattn.allocator import steady_allocator
from lit_structattn.attention import csoftmax, csparsemax, sparsemax

SIZES = [(512, 64), (64, 1024)]
REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_transforms.md"


REGIMES = {
    "tight": "upper ~ U(0, 4/L), the first set to 1: sum about 3, most bounds bind",
    "fertility": "upper = 2 - cumulative attention of 3 earlier softmax steps, clamped at 0 "
    "(as in constrained NMT decoding with fertility 2)",
}


def make_inputs(
    rows: int, length: int, regime: str = "tight", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores ~ N(0, 2) and upper bounds of the given regime (see ``REGIMES``)."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, length, generator=generator) * 2
    if regime == "tight":
        upper = torch.rand(rows, length, generator=generator) * 4 / length
        upper[:, 0] = 1.0  # always feasible
    else:
        earlier = torch.randn(3, rows, length, generator=generator) * 4
        upper = (2 - torch.softmax(earlier, -1).sum(0)).clamp_min(0)
    return scores, upper


def fwd_bwd(transform, scores: torch.Tensor, weights: torch.Tensor):
    """A closure running ``transform`` forward and backward on a fresh leaf."""

    def step() -> None:
        z = scores.detach().requires_grad_()
        (transform(z) * weights).sum().backward()

    return step


def run(repeats: int) -> list[dict[str, float]]:
    results = []
    for (rows, length), regime in itertools.product(SIZES, REGIMES):
        scores, upper = make_inputs(rows, length, regime)
        weights = torch.randn_like(scores)
        candidates = {
            "torch.softmax": lambda z: torch.softmax(z, -1),
            "entmax.sparsemax": lambda z: entmax.sparsemax(z, -1),
            "sparsemax": lambda z: sparsemax(z),
            "csoftmax": lambda z, u=upper: csoftmax(z, u),
            "csparsemax": lambda z, u=upper: csparsemax(z, u),
        }
        torch.testing.assert_close(sparsemax(scores), entmax.sparsemax(scores, -1))
        steps = {name: fwd_bwd(fn, scores, weights) for name, fn in candidates.items()}
        times = best_times(steps, repeats)
        results.append({"size": f"[{rows} x {length}]", "bounds": regime, **times})
    return results


def render(results: list[dict[str, float]]) -> str:
    header = ["size", "bounds", "transform", "time (us)", "/ entmax.sparsemax", "/ torch.softmax"]
    rows = []
    for r in results:
        for name in ("sparsemax", "csoftmax", "csparsemax", "entmax.sparsemax"):
            rows.append([
                r["size"], r["bounds"], name, f"{r[name] * 1e6:.0f}",
                f"{r[name] / r['entmax.sparsemax']:.2f}x", f"{r[name] / r['torch.softmax']:.1f}x",
            ])
    return markdown_table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-report", action="store_true", help="print only")
    args = parser.parse_args()
    torch.set_num_threads(2)
    allocator = steady_allocator()
    table = render(run(args.repeats))
    print(table)
    if not args.no_report:
        regimes = "\n".join(f"- `{name}`: {text}" for name, text in REGIMES.items())
        body = (
            "Forward + backward of each transform on float32 inputs, scores ~ N(0, 2), best of "
            f"{args.repeats} interleaved rounds after warm-up, all in one run. {allocator} "
            f"Upper-bound regimes:\n\n{regimes}"
            "\n\n(sparsemax, entmax.sparsemax and torch.softmax ignore the bounds.) Targets: "
            "sparsemax <= 1.0x entmax.sparsemax; csoftmax and csparsemax <= 1.5x "
            "entmax.sparsemax.\n\n" + table
        )
        write_report(REPORT, "Attention transforms: speed against peers",
                     "python -m bench.transforms", body)


if __name__ == "__main__":
    main()
