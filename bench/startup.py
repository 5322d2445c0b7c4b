"""Benchmark: how long ``structattn`` takes to answer the commands a newcomer types first,
against importing torch and Lightning, in the same run.

Each command runs as its own process (``python -m lit_structattn.cli ...``, what the installed
``structattn`` script runs), from an empty folder; the commands take turns round by round, so
load on a shared machine hits all of them alike, and the table gives the best of the rounds
after one warm-up round (files in the OS cache), in seconds and as a ratio to ``python -c
"import torch, lightning"``. ``--version``, ``--help``, ``experiments`` and ``predict --help``
answer without importing torch (target: under 1 s); ``fit --help`` is LightningCLI's help,
which cannot be printed before torch and Lightning are imported.

    python -m bench.startup [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.timing import markdown_table, write_report

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "reports" / "bench_startup.md"
CLI = [sys.executable, "-m", "lit_structattn.cli"]
BASELINE = "import torch, lightning"
#: what is timed: a label and its command line
COMMANDS = {
    "python (interpreter start)": [sys.executable, "-c", "pass"],
    f"python -c {BASELINE!r}": [sys.executable, "-c", BASELINE],
    "structattn --version": [*CLI, "--version"],
    "structattn --help": [*CLI, "--help"],
    "structattn experiments": [*CLI, "experiments"],
    "structattn predict --help": [*CLI, "predict", "--help"],
    "structattn fit --help": [*CLI, "fit", "--help"],
}
FAST = ("structattn --version", "structattn --help", "structattn experiments",
        "structattn predict --help")
TARGET_S = 1.0


def seconds(command: list[str], folder: Path) -> float:
    """Wall time of ``command`` run to its end in ``folder`` (its output discarded); a command
    that fails stops the benchmark."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run(command, cwd=folder, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def best_seconds(rounds: int) -> dict[str, float]:
    """Best wall time of every command of :data:`COMMANDS` over ``rounds`` interleaved rounds,
    after one warm-up round."""
    best = dict.fromkeys(COMMANDS, float("inf"))
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(rounds + 1):
            for label, command in COMMANDS.items():
                took = seconds(command, Path(folder))
                if round_:
                    best[label] = min(best[label], took)
    return best


def report_body(best: dict[str, float], rounds: int) -> str:
    """The report: the table, the verdict on the fast commands, and what ``fit --help``
    costs."""
    baseline = best[f"python -c {BASELINE!r}"]
    rows = [(f"`{label}`", f"{took:.2f}", f"{took / baseline:.2f}x",
             ("yes" if took < TARGET_S else "**no**") if label in FAST else "")
            for label, took in best.items()]
    slow = [label for label in FAST if best[label] >= TARGET_S]
    verdict = (f"Every fast command answered in under {TARGET_S:.0f} s." if not slow else
               f"Over {TARGET_S:.0f} s: {', '.join(slow)}.")
    fit_help = best["structattn fit --help"]
    return "\n\n".join([
        __doc__.split("\n\n")[1].replace("\n", " "),
        markdown_table(["command", f"best of {rounds} (s)", "vs import torch, lightning",
                        f"under {TARGET_S:.0f} s"], rows),
        verdict,
        f"`structattn fit --help` takes {fit_help:.2f} s ({fit_help / baseline:.2f}x the time "
        "of importing torch and Lightning): LightningCLI builds its parser before it can print "
        "help, which needs Lightning (the Trainer's signature, the LightningModule and "
        "LightningDataModule types, the project's links from data to model) and hence torch; "
        "the rest is jsonargparse reading the Trainer's and the callbacks' signatures and "
        "docstrings into its help. The command adds after it the options of "
        "the chosen config's DataModule (`--config CFG --help`), or how to list them.",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default: 5)")
    args = parser.parse_args()
    best = best_seconds(args.rounds)
    write_report(REPORT, "Start-up: structattn's first commands vs importing torch",
                 f"python -m bench.startup --rounds {args.rounds}",
                 report_body(best, args.rounds))
    print(REPORT.read_text())


if __name__ == "__main__":
    main()
