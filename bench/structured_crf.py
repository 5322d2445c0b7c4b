"""Benchmark: marginals of our LinearChainCRF / DependencyCRF against torch-struct 0.5.

One step = build the distribution from leaf potentials, take the marginals, multiply them by
fixed random weights, sum, and backpropagate to the potentials (what an attention layer trained
through the marginals does). Same float32 inputs for both libraries, 2 threads, best of k after
warm-up, the two libraries interleaved run by run so that load on a shared machine hits both.
Before timing, each case asserts that both libraries give the same marginals.

Peak memory: in a fresh subprocess per (case, library), after one warm-up step, the increase of
the process's peak resident set size (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``)
during one more step over the resident size just before it. glibc is told to hand freed memory
back to the OS (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) so memory cached from
the warm-up does not hide the step's own. It counts everything the step touches (autograd graph,
saved tensors, temporaries) at page granularity; allocations below 64 KiB that glibc recycles
from its arenas are not seen.

    python -m bench.structured_crf [--repeats 20] [--no-memory] [--device cuda]
        [--cases chain-c2 chain-decoder ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch_struct

from bench.timing import best_times, cuda_peak_mb, markdown_table, synced
from lit_structattn.structured.dependency import DependencyCRF
from lit_structattn.structured.linear_chain import LinearChainCRF

ROOT = Path(__file__).resolve().parent.parent
# The method paragraphs of the module docstring, for the report.
DESCRIPTION = "\n\n".join(__doc__.split("\n\n")[1:3]).strip()
Step = Callable[[], object]


@dataclass(frozen=True)
class Case:
    """One benchmark row: ``kind`` is ``chain`` (B, T, C) or ``tree`` (B, N, multiroot)."""

    name: str
    kind: str
    sizes: tuple[int, ...]
    multiroot: bool = True

    def label(self) -> str:
        if self.kind == "chain":
            return "LinearChainCRF B={} T={} C={}".format(*self.sizes)
        roots = "multi-root" if self.multiroot else "single-root"
        return "DependencyCRF B={} N={} ".format(*self.sizes) + roots


CASES = {
    case.name: case
    for case in [
        Case("chain-c2", "chain", (32, 100, 2)),
        Case("chain-c25", "chain", (32, 100, 25)),
        Case("tree-multi", "tree", (16, 40), multiroot=True),
        Case("tree-single", "tree", (16, 40), multiroot=False),
        # segmentation attention at the models' sizes: 64 sentences x 50 decoder steps, each a
        # binary chain over a source of 50
        Case("chain-decoder", "chain", (3200, 50, 2)),
    ]
}
DEFAULT_CASES = ("chain-c2", "chain-c25", "tree-multi", "tree-single")


# ---------------------------------------------------------------------- linear chain


def chain_inputs(batch: int, steps: int, labels: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "unary": torch.randn(batch, steps, labels, generator=generator),
        "transition": torch.randn(labels, labels, generator=generator),
        "weights": torch.randn(batch, steps, labels, generator=generator),
    }


def ours_chain(unary: torch.Tensor, transition: torch.Tensor) -> torch.Tensor:
    """``[B, T, C]`` node marginals."""
    return LinearChainCRF(unary, transition).marginals


def torch_struct_chain(unary: torch.Tensor, transition: torch.Tensor) -> torch.Tensor:
    """``[B, T, C]`` node marginals from torch-struct, whose potentials are ``[B, T-1, C, C]``
    indexed (edge t, label at t+1, label at t) with the unaries folded in."""
    potentials = transition.t()[None, None] + unary[:, 1:, :, None]
    first = potentials[:, :1] + unary[:, :1, None, :]
    potentials = torch.cat([first, potentials[:, 1:]], 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch-struct's missing arg_constraints warning
        edges = torch_struct.LinearChainCRF(potentials).marginals
    return torch.cat([edges[:, :1].sum(-2), edges.sum(-1)], 1)


# ---------------------------------------------------------------------- dependency trees


def tree_inputs(batch: int, words: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "arcs": torch.randn(batch, words + 1, words + 1, generator=generator),
        "weights": torch.randn(batch, words + 1, words + 1, generator=generator),
    }


def ours_tree(arcs: torch.Tensor, multiroot: bool) -> torch.Tensor:
    return DependencyCRF(arcs, multiroot=multiroot).marginals


def torch_struct_tree(arcs: torch.Tensor, multiroot: bool) -> torch.Tensor:
    """Our ``[B, N+1, N+1]`` layout from torch-struct's ``[B, N, N]`` one (``[head, child]``
    over words, root scores on the diagonal). torch-struct keeps ``multiroot`` on a shared class
    object, so the marginals are read before any other distribution is built."""
    words = arcs.shape[-1] - 1
    eye = torch.eye(words, dtype=torch.bool)
    potentials = torch.where(eye, arcs[:, :1, 1:], arcs[:, 1:, 1:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        marginals = torch_struct.DependencyCRF(potentials, multiroot=multiroot).marginals
    root = marginals.diagonal(0, 1, 2)[:, None, :]
    between = torch.where(eye, 0.0, marginals)
    return torch.cat([torch.cat([root.new_zeros(root.shape[0], 1, 1), root], 2),
                      torch.cat([between.new_zeros(between.shape[0], words, 1), between], 2)], 1)


# ---------------------------------------------------------------------- steps and checks


def make_steps(case: Case, device: str = "cpu") -> dict[str, Step]:
    """One forward + backward closure per library on the case's inputs (fresh leaves) on
    ``device`` (waiting for a CUDA device to finish, :func:`~bench.timing.synced`)."""
    if case.kind == "chain":
        data = {k: v.to(device) for k, v in chain_inputs(*case.sizes).items()}
        functions = {"ours": ours_chain, "torch-struct": torch_struct_chain}

        def chain_step(fn) -> Step:
            def step() -> None:
                unary = data["unary"].detach().requires_grad_()
                transition = data["transition"].detach().requires_grad_()
                (fn(unary, transition) * data["weights"]).sum().backward()

            return step

        return {name: synced(chain_step(fn), device) for name, fn in functions.items()}
    data = {k: v.to(device) for k, v in tree_inputs(*case.sizes).items()}
    functions = {"ours": ours_tree, "torch-struct": torch_struct_tree}

    def tree_step(fn) -> Step:
        def step() -> None:
            arcs = data["arcs"].detach().requires_grad_()  # torch-struct needs grad here
            (fn(arcs, case.multiroot) * data["weights"]).sum().backward()

        return step

    return {name: synced(tree_step(fn), device) for name, fn in functions.items()}


def marginals_difference(case: Case, device: str = "cpu") -> float:
    """Largest absolute difference between the two libraries' marginals (asserted small)."""
    if case.kind == "chain":
        data = chain_inputs(*case.sizes)
        args = (data["unary"].to(device).requires_grad_(),
                data["transition"].to(device).requires_grad_())
        ours, theirs = ours_chain(*args), torch_struct_chain(*args)
    else:
        arcs = tree_inputs(*case.sizes)["arcs"].to(device).requires_grad_()
        ours, theirs = ours_tree(arcs, case.multiroot), torch_struct_tree(arcs, case.multiroot)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    return float((ours - theirs).detach().abs().max())


# ---------------------------------------------------------------------- memory probe


def peak_memory_mb(case: str, library: str) -> float | None:
    """Peak resident-memory increase (MiB) of one step, measured in a fresh subprocess (see the
    module docstring); None where ``/proc/self/clear_refs`` is unavailable."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "bench.structured_crf", "--probe", case, library]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            check=True)
    value = result.stdout.strip().splitlines()[-1]
    return None if value == "n/a" else float(value)


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _probe(case: str, library: str) -> None:
    """Subprocess entry point: print the step's peak resident-memory increase in MiB."""
    torch.set_num_threads(2)
    step = make_steps(CASES[case])[library]
    step()
    try:
        before = _status_kb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    except OSError:
        print("n/a")
        return
    step()
    print(f"{(_status_kb('VmHWM') - before) / 1024:.1f}")


# ---------------------------------------------------------------------- report


def run(repeats: int, memory: bool = True, device: str = "cpu",
        cases: tuple[str, ...] = DEFAULT_CASES) -> list[dict[str, object]]:
    """Time (and optionally measure the memory of) every case named in ``cases`` on
    ``device``; one dict per case. On a CUDA device the memory is the peak CUDA allocation of
    one step."""
    results = []
    on_cuda = torch.device(device).type == "cuda"
    for case in (CASES[name] for name in cases):
        difference = marginals_difference(case, device)
        steps = make_steps(case, device)
        times = best_times(steps, repeats)
        row: dict[str, object] = {
            "case": case.label(),
            "ours_s": times["ours"],
            "torch_struct_s": times["torch-struct"],
            "ratio": times["ours"] / times["torch-struct"],
            "max_abs_diff": difference,
        }
        if memory and on_cuda:
            row["ours_mb"] = cuda_peak_mb(steps["ours"], device)
            row["torch_struct_mb"] = cuda_peak_mb(steps["torch-struct"], device)
        elif memory:
            row["ours_mb"] = peak_memory_mb(case.name, "ours")
            row["torch_struct_mb"] = peak_memory_mb(case.name, "torch-struct")
        results.append(row)
    return results


def render(results: list[dict[str, object]]) -> str:
    header = ["case", "ours (ms)", "torch-struct (ms)", "ours / torch-struct", "max |diff|"]
    memory = "ours_mb" in results[0]
    if memory:
        header += ["ours peak (MiB)", "torch-struct peak (MiB)"]
    rows = []
    for r in results:
        row = [r["case"], f"{r['ours_s'] * 1e3:.1f}", f"{r['torch_struct_s'] * 1e3:.1f}",
               f"{r['ratio']:.2f}x", f"{r['max_abs_diff']:.1e}"]
        if memory:
            row += [_mb(r["ours_mb"]), _mb(r["torch_struct_mb"])]
        rows.append(row)
    return markdown_table(header, rows)


def _mb(value: object) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    parser.add_argument("--probe", nargs=2, metavar=("CASE", "LIBRARY"), help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(DEFAULT_CASES))
    args = parser.parse_args()
    if args.probe:
        _probe(*args.probe)
        return
    torch.set_num_threads(2)
    print(render(run(args.repeats, memory=not args.no_memory, device=args.device,
                     cases=tuple(args.cases))))


if __name__ == "__main__":
    main()
