"""Benchmark: forward+backward time of the attention transforms against their peers.

Ours: sparsemax, csoftmax, csparsemax (on CPU with the compiled solvers a user gets by default,
and with the torch solvers that every other device runs), entmax15, entmax by bisection
(alpha = 1.3) and centmax15. Peers: ``entmax.sparsemax`` (sort-based, the sparse transform a
user would otherwise pick), ``entmax.entmax15`` (the peer of entmax15 and centmax15),
``entmax.entmax_bisect`` (of our bisection) and ``torch.softmax`` (the floor). Same inputs, one
run, 2 threads, best of k interleaved rounds after warm-up; prints ratios and writes
``reports/bench_transforms.md`` (``reports/bench_transforms_<device>.md`` for another device).

    python -m bench.transforms [--repeats 30] [--device cuda] [--sizes 2048x1024 3200x50]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import entmax as entmax_package
import torch

from bench.timing import best_times, markdown_table, write_report
from lit_structattn.attention import (
    _compiled,
    centmax15,
    csoftmax,
    csparsemax,
    entmax,
    entmax15,
    sparsemax,
)
from lit_structattn.run.allocator import steady_allocator

SIZES = [(512, 64), (64, 1024)]
REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_transforms.md"


REGIMES = {
    "tight": "upper ~ U(0, 4/L), the first set to 1: sum about 3, most bounds bind",
    "fertility": "upper = 2 - cumulative attention of 3 earlier softmax steps, clamped at 0 "
    "(as in constrained NMT decoding with fertility 2)",
    "loose": "upper ~ U(0.05, 1.05), scaled to sum 1.5: a few bounds bind",
}


@contextlib.contextmanager
def torch_solvers() -> Iterator[None]:
    """The torch solvers of csoftmax/csparsemax inside the block, also on CPU."""
    usable = _compiled.usable
    _compiled.usable = lambda z: False
    try:
        yield
    finally:
        _compiled.usable = usable


def with_torch_solvers(transform):
    def run(z, u):
        with torch_solvers():
            return transform(z, u)

    return run


def make_inputs(
    rows: int, length: int, regime: str = "tight", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores ~ N(0, 2) and upper bounds of the given regime (see ``REGIMES``)."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, length, generator=generator) * 2
    if regime == "tight":
        upper = torch.rand(rows, length, generator=generator) * 4 / length
        upper[:, 0] = 1.0  # always feasible
    elif regime == "loose":
        upper = torch.rand(rows, length, generator=generator) + 0.05
        upper = upper * (1.5 / upper.sum(-1, keepdim=True))
    else:
        earlier = torch.randn(3, rows, length, generator=generator) * 4
        upper = (2 - torch.softmax(earlier, -1).sum(0)).clamp_min(0)
    return scores, upper


def fwd_bwd(transform, scores: torch.Tensor, weights: torch.Tensor):
    """A closure running ``transform`` forward and backward on a fresh leaf."""

    def step() -> None:
        z = scores.detach().requires_grad_()
        (transform(z) * weights).sum().backward()
        if z.is_cuda:
            torch.cuda.synchronize(z.device)

    return step


CONSTRAINED = {"csoftmax": csoftmax, "csparsemax": csparsemax}
ALPHA = 1.3  # the alpha of the bisection rows
#: The peer each transform is measured against (default ``entmax.sparsemax``).
PEERS = {"entmax15": "entmax.entmax15", "centmax15": "entmax.entmax15",
         f"entmax (alpha={ALPHA})": f"entmax.entmax_bisect (alpha={ALPHA})"}


def size(text: str) -> tuple[int, int]:
    """``"ROWSxLENGTH"`` (e.g. ``2048x1024``) as ``(rows, length)``."""
    rows, _, length = text.partition("x")
    return int(rows), int(length)


def run(repeats: int, device: str, sizes: list[tuple[int, int]] = SIZES
        ) -> list[dict[str, float]]:
    results = []
    for (rows, length), regime in itertools.product(sizes, REGIMES):
        scores, upper = (t.to(device) for t in make_inputs(rows, length, regime))
        weights = torch.randn_like(scores)
        candidates = {
            "torch.softmax": lambda z: torch.softmax(z, -1),
            "entmax.sparsemax": lambda z: entmax_package.sparsemax(z, -1),
            "entmax.entmax15": lambda z: entmax_package.entmax15(z, -1),
            f"entmax.entmax_bisect (alpha={ALPHA})":
                lambda z: entmax_package.entmax_bisect(z, ALPHA, -1),
            "sparsemax": lambda z: sparsemax(z),
            "entmax15": lambda z: entmax15(z),
            f"entmax (alpha={ALPHA})": lambda z: entmax(z, ALPHA),
            "centmax15": lambda z, u=upper: centmax15(z, u),
        }
        for name, transform in CONSTRAINED.items():
            candidates[name] = lambda z, f=transform, u=upper: f(z, u)
            if device == "cpu" and _compiled.available():
                torch_version = with_torch_solvers(transform)
                candidates[f"{name} (torch solver)"] = lambda z, f=torch_version, u=upper: f(z, u)
        torch.testing.assert_close(sparsemax(scores), entmax_package.sparsemax(scores, -1))
        torch.testing.assert_close(entmax15(scores), entmax_package.entmax15(scores, -1))
        torch.testing.assert_close(entmax(scores, ALPHA),
                                   entmax_package.entmax_bisect(scores, ALPHA, -1))
        steps = {name: fwd_bwd(fn, scores, weights) for name, fn in candidates.items()}
        times = best_times(steps, repeats)
        results.append({"size": f"[{rows} x {length}]", "bounds": regime, **times})
    return results


def render(results: list[dict[str, float]]) -> str:
    header = ["size", "bounds", "transform", "time (us)", "peer", "/ peer", "/ torch.softmax"]
    rows = []
    for r in results:
        peers = ["entmax.sparsemax", *dict.fromkeys(PEERS.values())]
        names = [n for n in r if n not in ("size", "bounds", "torch.softmax", *peers)]
        for name in [*names, *peers]:
            peer = PEERS.get(name, "entmax.sparsemax")
            rows.append([
                r["size"], r["bounds"], name, f"{r[name] * 1e6:.0f}", peer,
                f"{r[name] / r[peer]:.2f}x", f"{r[name] / r['torch.softmax']:.1f}x",
            ])
    return markdown_table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-report", action="store_true", help="print only")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--sizes", nargs="+", type=size, default=SIZES, metavar="ROWSxLENGTH",
                        help="default: " + " ".join(f"{r}x{n}" for r, n in SIZES))
    args = parser.parse_args()
    torch.set_num_threads(2)
    allocator = steady_allocator()
    table = render(run(args.repeats, args.device, args.sizes))
    device_name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") \
        else "cpu"
    print(table)
    if not args.no_report:
        regimes = "\n".join(f"- `{name}`: {text}" for name, text in REGIMES.items())
        body = (
            f"Forward + backward of each transform on float32 inputs on `{device_name}`, "
            f"scores ~ N(0, 2), best of {args.repeats} interleaved rounds after warm-up, all in "
            f"one run. {allocator} Upper-bound regimes:\n\n{regimes}"
            "\n\n(Only csoftmax, csparsemax and centmax15 take the bounds.) On CPU, "
            "csoftmax and csparsemax run their compiled float64 solvers (the default when numba "
            "is installed); the `(torch solver)` rows are the solvers every other device runs "
            "(`STRUCTATTN_COMPILED=0` on CPU). Each row's ratio is to its peer (the last rows "
            "are the peers). Targets: sparsemax <= 0.5x entmax.sparsemax; csoftmax <= 1.0x and "
            "csparsemax <= 1.2x entmax.sparsemax; entmax15 <= 0.7x entmax.entmax15, entmax by "
            "bisection <= 0.5x entmax.entmax_bisect, centmax15 <= 1.2x entmax.entmax15."
            "\n\n" + table
        )
        report = REPORT if args.device == "cpu" else \
            REPORT.with_name(f"bench_transforms_{args.device.replace(':', '')}.md")
        write_report(report, "Attention transforms: speed against peers",
                     f"python -m bench.transforms --device {args.device}", body)


if __name__ == "__main__":
    main()
