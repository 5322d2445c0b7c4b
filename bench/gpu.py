"""The GPU check of one machine: the ``cuda`` tests, the benchmarks against their peers on the
GPU, and the seconds per epoch of every table, gathered in ``reports/bench_gpu.md``.

Parts (all by default, each in its own process so that one failing does not stop the others):

- ``tests``: ``pytest -m cuda`` (every model family fits on CUDA in fp32, 16-mixed and
  bf16-mixed; transforms and CRFs agree with the CPU; DDP over the GPUs there are);
- ``benches``: ``bench.transforms``, ``bench.structured`` and ``bench.joint_attention`` with
  ``--device cuda`` (each also writes its own ``reports/bench_*_cuda.md``), and the chain-CRF
  marginals once more with the compiled kernels off (``STRUCTATTN_COMPILED=0``: the torch path
  against torch-struct), so the gain of the Triton kernels shows;
- ``epochs``: ``bench.epoch_seconds`` for the ``cpu`` and ``paper`` budgets.

    python -m bench.gpu [--parts tests benches epochs] [--repeats 10] [--batches 10]

Needs a CUDA GPU, and the datasets (``$STRUCTATTN_DATA``) for the epochs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.timing import write_report

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "reports" / "bench_gpu.md"
PARTS = ("tests", "benches", "epochs")


def commands(repeats: int, batches: int) -> dict[str, list[tuple[str, list[str], dict]]]:
    """Per part, the ``(title, command, extra environment)`` of each step."""
    python = [sys.executable, "-m"]
    return {
        "tests": [("`cuda` tests", [*python, "pytest", "-m", "cuda", "-q", "-p",
                                    "no:cacheprovider"], {})],
        "benches": [
            ("Transforms", [*python, "bench.transforms", "--device", "cuda", "--repeats",
                            str(repeats)], {}),
            ("Structured inference and attention", [*python, "bench.structured", "--device",
                                                    "cuda", "--repeats", str(repeats)], {}),
            ("Chain and tree marginals with the compiled kernels off (torch path)",
             [*python, "bench.structured_crf", "--device", "cuda", "--no-memory", "--repeats",
              str(repeats)], {"STRUCTATTN_COMPILED": "0"}),
            ("Beam-joint against soft attention, training step",
             [*python, "bench.joint_attention", "--device", "cuda"], {}),
        ],
        "epochs": [("Seconds per epoch", [*python, "bench.epoch_seconds", "--device", "cuda",
                                          "--budgets", "cpu", "paper", "--batches",
                                          str(batches)], {})],
    }


def run_step(command: list[str], environment: dict[str, str]) -> tuple[int, str, float]:
    """Run one step from the repository root; returns its exit code, its printed tables (the
    markdown lines of its output, or the tail of its output when it failed) and seconds."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **environment},
                          capture_output=True, text=True)
    lines = done.stdout.splitlines()
    shown = [line for line in lines if line.startswith("|") or line == ""]
    if done.returncode != 0 or not any(shown):
        shown = (lines + done.stderr.splitlines())[-25:]
    return done.returncode, "\n".join(shown).strip(), time.perf_counter() - start


def main() -> None:
    """The command line (see the module docstring); ``SystemExit`` where torch sees no GPU."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--batches", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench.gpu: torch sees no CUDA GPU here")
    sections = [f"On `{torch.cuda.get_device_name(0)}` ({torch.cuda.device_count()} GPU(s)), "
                f"torch {torch.__version__}, CUDA {torch.version.cuda}."]
    steps = commands(args.repeats, args.batches)
    for part in args.parts:
        for title, command, environment in steps[part]:
            print(f"bench.gpu: {title} ...", flush=True)
            code, output, seconds = run_step(command, environment)
            setting = " ".join(f"{k}={v}" for k, v in environment.items())
            shown = " ".join([setting, "python", *command[1:]]).strip()
            status = "passed" if code == 0 else f"FAILED (exit {code})"
            body = f"```\n{output}\n```" if code else output  # a failure's tail, verbatim
            sections.append(f"## {title}\n\n`{shown}`: {status} in {seconds:.0f} s.\n\n{body}")
            print(f"bench.gpu: {title}: {status}", flush=True)
    write_report(REPORT, "The GPU check: cuda tests, benchmarks, seconds per epoch",
                 " ".join(["python -m bench.gpu", *sys.argv[1:]]), "\n\n".join(sections))
    print(f"bench.gpu: wrote {REPORT}")


if __name__ == "__main__":
    main()
