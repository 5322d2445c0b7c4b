"""Is the demo's result robust? The `demo` budget of the tree-transduction table (what `make demo`
runs) over seeds 0-2, with 2 torch threads per run (one run at a time, as `make demo` runs on 2
cores) and with 1 thread per run (the two rows side by side), through `structattn reproduce`.
Writes reports/demo_robustness.md: every run's per-depth scores, wall times and the verdicts on
the paper's claims (structured above simple at depths 3-5) for each thread count.

    python -m bench.demo_robustness [--seeds 3] [--root runs/demo_robustness]

Finished runs are not repeated (rerun to resume). Maintainers then file the 2-thread runs in
the ledger: `structattn reproduce tree_transduction --budget demo --seeds 3 --rows simple
structured --root runs/demo_robustness/threads2 --cached-only --ledger`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from lit_structattn.reproduce.claims import verdicts
from lit_structattn.reproduce.report import claims_table
from lit_structattn.reproduce.tables import TABLES

TABLE = TABLES["tree_transduction"]
ROWS = ("simple", "structured")
REPORT = Path(__file__).resolve().parent.parent / "reports" / "demo_robustness.md"


def reproduce(root: Path, seeds: int, threads: int, rows: tuple[str, ...]) -> subprocess.Popen:
    """``structattn reproduce`` of ``rows`` at the demo budget on ``threads`` threads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log = open(root / f"{'_'.join(rows)}.log", "a")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, "-m", "lit_structattn.cli", "reproduce", TABLE.name, "--budget", "demo",
         "--seeds", str(seeds), "--rows", *rows, "--root", str(root),
         "--report", str(root / f"{'_'.join(rows)}.md")],
        env=env, stdout=log, stderr=subprocess.STDOUT)


def run_all(root: Path, seeds: int) -> None:
    """2 threads: both rows in one process; 1 thread: one process per row, side by side."""
    for threads, groups in ((2, (ROWS,)), (1, tuple((row,) for row in ROWS))):
        folder = root / f"threads{threads}"
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        processes = [reproduce(folder, seeds, threads, rows) for rows in groups]
        for process in processes:
            if process.wait() != 0:
                sys.exit(f"a reproduce process failed: see the logs in {folder}")
        print(f"{threads} thread(s): {time.perf_counter() - start:.0f} s", flush=True)


def results(folder: Path, seeds: int) -> dict[str, list[dict]]:
    return {row: [json.loads((folder / TABLE.name / "demo" / row / f"seed{seed}" /
                              "result.json").read_text()) for seed in range(seeds)]
            for row in ROWS}


def report(root: Path, seeds: int) -> str:
    labels = [label for _, label in TABLE.metrics]
    lines = [
        "# Is the demo's result robust? Tree transduction at the `demo` budget, seeds and threads",
        "",
        f"Produced by `python -m bench.demo_robustness --seeds {seeds}` on "
        f"{time.strftime('%Y-%m-%d')} (torch {torch.__version__}, a shared 2-core machine). "
        f"**Budget `demo`:** {TABLE.budgets['demo'][1]}. Each run trains from scratch, then "
        "tests its best checkpoint by validation on the 1K test formulas. With 2 threads the "
        "runs went one at a time (as `make demo`); with 1 thread the two rows ran side by "
        "side. Cells: average length to failure (%) per depth.", "",
        f"**Data:** {TABLE.note}", "",
    ]
    for threads in (2, 1):
        runs = results(root / f"threads{threads}", seeds)
        lines += [f"## {threads} thread{'s' if threads > 1 else ''} per run", "",
                  "| row | seed | " + " | ".join(labels) + " | wall time |",
                  "|" + "---|" * (len(labels) + 3)]
        for row in ROWS:
            for run in runs[row]:
                cells = [f"{TABLE.scale * run['metrics'][key]:.1f}" for key, _ in TABLE.metrics]
                lines.append(f"| {row} | {run['seed']} | " + " | ".join(cells)
                             + f" | {run['wall_seconds'] / 60:.1f} min |")
        demo = sum(r["wall_seconds"] for row in ROWS for r in runs[row] if r["seed"] == 0)
        what = ("what `make demo` runs" if threads == 2
                else "side by side, each on one core; `make demo` runs them with 2 threads")
        lines += ["", *claims_table(verdicts(TABLE, runs)),
                  f"Seed 0 of both rows ({what}): {demo / 60:.1f} min of training and testing "
                  "together.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--root", type=Path, default=Path("runs/demo_robustness"))
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args()
    run_all(args.root, args.seeds)
    args.report.write_text(report(args.root, args.seeds))
    print(args.report.read_text())


if __name__ == "__main__":
    main()
