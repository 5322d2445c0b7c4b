"""The GPU check of one machine: the ``cuda`` tests, the benchmarks against their peers on the
GPU, seconds per training step in mixed precision and seconds per epoch, gathered in
``reports/bench_gpu.md``.

Every step runs in its own process (its own process group, killed whole at the step's time
limit), so that one failing or running over does not stop the others; the report is written
again after every step, the steps not yet reached listed as such, so a check stopped early
leaves what it did. The steps, most important first:

1. ``tests``: ``pytest -m cuda``: transforms and CRFs agree with the CPU (float32, float16,
   bfloat16, autocast); in the full check also every model family fitting in fp32, 16-mixed and
   bf16-mixed, and DDP over the GPUs there are;
2. ``benches``: ``bench.transforms`` (forward + backward against ``torch.softmax``,
   ``entmax.sparsemax`` and ``entmax.entmax15``: on CUDA sparsemax, csparsemax, csoftmax,
   entmax15 and centmax15 run their Triton kernels) and ``bench.structured_crf`` (marginals
   against torch-struct), as ratios; in the full check also ``bench.structured``,
   ``bench.joint_attention``, and the transforms and the chain-CRF marginals with the compiled
   kernels off (``STRUCTATTN_COMPILED=0``: the torch paths), so the gain of the Triton kernels
   shows;
3. ``training``: 20 training steps of one row of each model family (:data:`FAMILIES`) in
   ``bf16-mixed`` and ``16-mixed``, the first also in ``32-true``, all in one process
   (``bench.epoch_seconds --named``);
4. ``epochs``: ``bench.epoch_seconds``: seconds per epoch and the hours of a whole table.

Plans:

- the full check (default): no time limits; the benchmarks write their own
  ``reports/bench_*_cuda.md`` too;
- ``--quick``: fits a lent GPU's 15 minutes (its start included): the time limits add up to at
  most :data:`QUICK_SECONDS`; the transforms at [2048, 1024] and at the models' [3200, 50]
  (64 sentences x 50 decoder steps), the CRF cases with the chain at that size too, and
  seconds per epoch of the first row of every table under the ``cpu`` budget (the configs as
  committed); the steps that time rows start none in the last :data:`ROW_SECONDS` of their
  limit;
- ``--dry-run``: the quick plan on the CPU at tiny sizes, each step for one iteration, so that
  the test suite checks that every command starts (``tests/test_bench_gpu.py``).

    python -m bench.gpu [--quick] [--dry-run] [--report reports/bench_gpu.md]
        [--parts tests benches training epochs] [--repeats 10] [--batches 10]

On a lent GPU machine (no internet; ``../shared/gpu/README.md``):
``bash .gpu/enter.sh python3 -m bench.gpu --quick``. Needs a CUDA GPU (but for ``--dry-run``),
and the datasets (``$STRUCTATTN_DATA``) for the training steps and epochs: a row whose data is
missing is reported as not timed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.epoch_seconds import WARMUP
from bench.timing import write_report

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "reports" / "bench_gpu.md"
PARTS = ("tests", "benches", "training", "epochs")
QUICK_SECONDS = 8 * 60
# One row of each model family, the most important first (csparsemax fertility attention in the
# decoder): the most structured row whose one-time work (fertility predictor, parser) is not
# needed, as the GPU machine starts with no cache.
FAMILIES = (
    "sparse_constrained_nmt/Table 2: csparsemax, CONSTANT f = 2",
    "tree_transduction/structured",
    "nli/structured (SICK)",
    "easy_first_ner/NEF-CRF-F, N=5 (en)",
    "babi_qa/task 02, Binary CRF",
    "joint_attention_morph/beam-joint (de-N)",
)
TRAINING_STEPS = 20
CUDA_TESTS = ("-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider")
# the modules of the cuda tests of the transforms and the CRFs against the CPU
TRANSFORM_AND_CRF_TESTS = ("tests/test_transform_*.py", "tests/test_*_triton.py",
                           "tests/test_cuda_structured.py")


@dataclass(frozen=True)
class Step:
    """One command of the check: ``python`` with the arguments ``command``, ``environment``
    added to this process's, stopped after ``limit_s`` seconds (None: no limit)."""

    part: str
    title: str
    command: tuple[str, ...]
    environment: dict[str, str] = field(default_factory=dict)
    limit_s: float | None = None

    def shown(self) -> str:
        """The command as a shell line (``python ...``, the environment first)."""
        setting = [f"{name}={value}" for name, value in self.environment.items()]
        return " ".join([*setting, shlex.join(["python", *self.command])])


@dataclass(frozen=True)
class Scale:
    """What the quick plan's steps run on and how much of it (see :func:`quick_plan`)."""

    device: str
    repeats: int
    sizes: tuple[str, ...]  # bench.transforms --sizes
    cases: tuple[str, ...]  # bench.structured_crf --cases
    memory: bool  # peak memory of the CRF cases (on the CPU: a subprocess per case)
    families: tuple[str, ...]  # TABLE/ROW of the training steps
    precisions: tuple[str, ...]
    training_budget: str
    training_steps: int
    tables: tuple[str, ...]  # of the seconds per epoch; () for every table
    epoch_budget: str
    epoch_batches: int


QUICK = Scale(device="cuda", repeats=10, sizes=("2048x1024", "3200x50"),
              cases=("chain-c2", "chain-c25", "chain-decoder", "tree-multi", "tree-single"),
              memory=True, families=FAMILIES, precisions=("bf16-mixed", "16-mixed"),
              training_budget="cpu", training_steps=TRAINING_STEPS, tables=(),
              epoch_budget="cpu", epoch_batches=4)
# one iteration of each: tree transduction's ci budget builds its data in seconds on the CPU,
# which has no 16-mixed
DRY_RUN = Scale(device="cpu", repeats=1, sizes=("8x16",), cases=("chain-c2",), memory=False,
                families=("tree_transduction/structured",), precisions=("bf16-mixed",),
                training_budget="ci", training_steps=1, tables=("tree_transduction",),
                epoch_budget="ci", epoch_batches=1)
# seconds of each quick step, in plan order
QUICK_LIMITS = (160, 55, 35, 150, 70)
# the longest one row may take to build and time on the GPU machine: the steps that time rows
# start none later than this before their limit, so that they end with their tables printed
ROW_SECONDS = 30


def transform_and_crf_tests() -> tuple[str, ...]:
    """:data:`TRANSFORM_AND_CRF_TESTS`, globs expanded (relative to the repository root)."""
    return tuple(str(path.relative_to(ROOT)) for pattern in TRANSFORM_AND_CRF_TESTS
                 for path in sorted(ROOT.glob(pattern)))


def training_step(device: str, families: tuple[str, ...], precisions: tuple[str, ...],
                  budget: str, steps: int, limit_s: float | None = None) -> Step:
    """``steps`` timed training steps (after the warm-up) of each of ``families`` in each of
    ``precisions``, the first also in ``32-true``, in one process."""
    return Step("training", "Training steps in mixed precision, one row of each model family",
                ("-m", "bench.epoch_seconds", "--device", device, "--budgets", budget,
                 "--named", *families, "--precisions", *precisions, "--fp32-first",
                 "--batches", str(WARMUP + steps), *rows_until(limit_s)), limit_s=limit_s)


def rows_until(limit_s: float | None) -> tuple[str, ...]:
    """The ``bench.epoch_seconds`` option that starts no row in the last :data:`ROW_SECONDS`
    of a step's limit."""
    return () if limit_s is None else ("--seconds", f"{limit_s - ROW_SECONDS:g}")


def quick_plan(scale: Scale) -> list[Step]:
    """The steps of ``--quick`` (``scale`` :data:`QUICK`) or ``--dry-run`` (:data:`DRY_RUN`),
    with :data:`QUICK_LIMITS`."""
    timing = ("--device", scale.device, "--repeats", str(scale.repeats))
    tables = ("--tables", *scale.tables) if scale.tables else ()
    tests, transforms, marginals, training, epochs = QUICK_LIMITS
    return [
        Step("tests", "`cuda` tests of the transforms and CRFs against the CPU",
             (*CUDA_TESTS, *transform_and_crf_tests()), limit_s=tests),
        Step("benches", "Transforms against torch.softmax, entmax.sparsemax and entmax.entmax15",
             ("-m", "bench.transforms", *timing, "--no-report", "--sizes", *scale.sizes),
             limit_s=transforms),
        Step("benches", "Chain and tree marginals against torch-struct",
             ("-m", "bench.structured_crf", *timing, "--cases", *scale.cases,
              *(() if scale.memory else ("--no-memory",))), limit_s=marginals),
        training_step(scale.device, scale.families, scale.precisions, scale.training_budget,
                      scale.training_steps, training),
        Step("epochs", "Seconds per epoch, the first row of each table",
             ("-m", "bench.epoch_seconds", "--device", scale.device, "--budgets",
              scale.epoch_budget, "--rows", "first", *tables, "--batches",
              str(WARMUP + scale.epoch_batches), *rows_until(epochs)), limit_s=epochs),
    ]


def full_plan(repeats: int, batches: int) -> list[Step]:
    """The steps of the full check (no time limits)."""
    on_gpu = ("--device", "cuda", "--repeats", str(repeats))
    return [
        Step("tests", "`cuda` tests", CUDA_TESTS),
        Step("benches", "Transforms", ("-m", "bench.transforms", *on_gpu, "--sizes", "512x64",
                                       "64x1024", *QUICK.sizes)),
        Step("benches", "Transforms with the compiled kernels off (the torch paths)",
             ("-m", "bench.transforms", *on_gpu, "--no-report", "--sizes", "512x64", "64x1024",
              *QUICK.sizes), {"STRUCTATTN_COMPILED": "0"}),
        Step("benches", "Structured inference and attention",
             ("-m", "bench.structured", *on_gpu)),
        Step("benches", "Chain and tree marginals with the compiled kernels off (torch path)",
             ("-m", "bench.structured_crf", *on_gpu, "--no-memory"),
             {"STRUCTATTN_COMPILED": "0"}),
        Step("benches", "Beam-joint against soft attention, training step",
             ("-m", "bench.joint_attention", "--device", "cuda")),
        training_step("cuda", FAMILIES, QUICK.precisions, "cpu", TRAINING_STEPS),
        Step("epochs", "Seconds per epoch", ("-m", "bench.epoch_seconds", "--device", "cuda",
                                             "--budgets", "cpu", "paper", "--batches",
                                             str(batches))),
    ]


def run_step(step: Step) -> tuple[str, str, float]:
    """Run one step from the repository root; returns its status (``passed``, ``FAILED (exit
    N)`` or ``TIMED OUT``), its printed tables (the markdown lines of its output; the tail of its
    output, fenced, when it did not pass or printed none) and seconds."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, *step.command], cwd=ROOT,
                               env={**os.environ, **step.environment}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=step.limit_s)
        status = "passed" if process.returncode == 0 else f"FAILED (exit {process.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # with its workers, which hold the pipes open
        stdout, stderr = process.communicate()
        status = "TIMED OUT"
    lines = stdout.splitlines()
    shown = [line for line in lines if line.startswith("|") or line == ""]
    output = "\n".join(shown).strip()
    if status != "passed" or not output:
        output = "```\n" + "\n".join((lines + stderr.splitlines())[-25:]) + "\n```"
    return status, output, time.perf_counter() - start


def section(step: Step, outcome: tuple[str, str, float] | None) -> str:
    """The report's section of ``step``, run (``outcome`` from :func:`run_step`) or not."""
    limit = "" if step.limit_s is None else f", limit {step.limit_s:.0f} s"
    head = f"## {step.title}\n\n`{step.shown()}`"
    if outcome is None:
        return f"{head}: not reached ({step.part}{limit})."
    status, output, seconds = outcome
    return f"{head}: {status} in {seconds:.0f} s ({step.part}{limit}).\n\n{output}"


def main() -> None:
    """The command line (see the module docstring); ``SystemExit`` where torch sees no GPU
    (but for ``--dry-run``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"the short check (at most {QUICK_SECONDS // 60} minutes)")
    parser.add_argument("--dry-run", action="store_true",
                        help="the quick check's steps once each on the CPU, at tiny sizes")
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--repeats", type=int, default=10, help="full check only")
    parser.add_argument("--batches", type=int, default=10, help="full check only")
    args = parser.parse_args()
    if args.dry_run:
        plan, on = quick_plan(DRY_RUN), "Dry run on the CPU (tiny sizes, one iteration each)"
    elif not torch.cuda.is_available():
        raise SystemExit("bench.gpu: torch sees no CUDA GPU here")
    else:
        plan = quick_plan(QUICK) if args.quick else full_plan(args.repeats, args.batches)
        on = (f"On `{torch.cuda.get_device_name(0)}` ({torch.cuda.device_count()} GPU(s)), "
              f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    plan = [step for step in plan if step.part in args.parts]
    kind = "quick check" if args.quick or args.dry_run else "full check"
    intro = f"{on}; the {kind}, steps most important first, each in its own process."
    outcomes: list[tuple[str, str, float] | None] = [None] * len(plan)
    command = shlex.join(["python", "-m", "bench.gpu", *sys.argv[1:]])

    def report() -> None:
        write_report(args.report, "The GPU check: cuda tests, benchmarks, training steps, "
                     "seconds per epoch", command,
                     "\n\n".join([intro, *map(section, plan, outcomes)]))

    report()  # every step listed, as not reached, before the first runs
    for index, step in enumerate(plan):
        print(f"bench.gpu: {step.title} ...", flush=True)
        outcomes[index] = run_step(step)
        print(f"bench.gpu: {step.title}: {outcomes[index][0]}", flush=True)
        report()
    print(f"bench.gpu: wrote {args.report}")


if __name__ == "__main__":
    main()
