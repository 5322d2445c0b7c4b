"""Small helpers shared by the benchmarks: best-of-k wall time after warm-up, a markdown table
writer, and the tasks of the reproduction configs (so that a benchmark times the model the
reproductions train). Absolute times on shared machines are noise; report ratios measured
in the same run."""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def step_bench_parser(doc: str, steps: int) -> argparse.ArgumentParser:
    """The command line of a training-step benchmark whose module docstring is ``doc``:
    ``--steps`` (default ``steps``), ``--threads`` (default 1) and ``--no-report``; a caller
    adds its own options before parsing."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-report", action="store_true", help="print only")
    return parser


def start_step_bench(args: argparse.Namespace) -> str:
    """Set up the process for timing: the steady allocator, ``args.threads`` threads, seed 0;
    returns the allocator's description for the report."""
    from lit_structattn.run.allocator import steady_allocator

    allocator = steady_allocator()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return allocator


def config_task(configs: Sequence[str], *args: str, **model: object):
    """The task that ``structattn fit --config configs/<config> ... <args>`` builds, with the
    arguments ``model`` of its ``model`` (e.g. ``attention="sigmoid"``, or a part's option by its
    dotted name, ``**{"encoder.source_attention": "simple"}``): its sizes linked from the
    configured data as in a run; no logger, callbacks or checkpoints."""
    from lit_structattn.run.lightning_cli import build_cli

    stack = [a for config in configs for a in ("--config", str(CONFIGS / config))]
    chosen = [a for name, value in model.items() for a in (
        f"--model.init_args.model.init_args.{name}",
        value if isinstance(value, str) else json.dumps(value))]
    quiet = ["--trainer.logger", "false", "--trainer.callbacks", "null",
             "--trainer.enable_checkpointing", "false"]
    return build_cli([*stack, *args, *chosen, *quiet], run=False).model


def synced(step: Callable[[], object], device: str | torch.device) -> Callable[[], None]:
    """``step`` followed, on a CUDA device, by a wait for the device to finish it (kernels run
    asynchronously: without the wait a timer measures only their launch)."""
    if torch.device(device).type != "cuda":
        return step

    def run() -> None:
        step()
        torch.cuda.synchronize(device)

    return run


def cuda_peak_mb(step: Callable[[], object], device: str | torch.device) -> float:
    """Peak CUDA memory (MiB) allocated during ``step()`` above what was allocated before."""
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def best_time(step: Callable[[], object], repeats: int = 20, warmup: int = 3) -> float:
    """Best wall time in seconds of ``step()`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        step()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return best


def best_times(steps: dict[str, Callable[[], object]], repeats: int, warmup: int = 3
               ) -> dict[str, float]:
    """Best wall time in seconds of each step over ``repeats`` interleaved rounds (one call of
    every step per round), so that a noisy spell on a shared machine hits all steps alike."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def training_step_times(
    batches: Sequence[object], losses: dict[str, Callable[[object], torch.Tensor]],
    optimizers: dict[str, torch.optim.Optimizer], warmup: int = 3, device: str = "cpu",
) -> dict[str, list[float]]:
    """Seconds per training step (loss, backward, update) of every candidate on every batch
    (on a CUDA ``device``, up to the device finishing the step).

    The candidates take turns batch by batch, so that load on a shared machine hits all of them
    alike; the first ``warmup`` batches are run once more before timing starts.
    """
    times: dict[str, list[float]] = {name: [] for name in losses}
    for index, batch in enumerate([*batches[:warmup], *batches]):
        for name, loss_of in losses.items():
            start = time.perf_counter()
            loss = loss_of(batch)
            optimizers[name].zero_grad()
            loss.backward()
            optimizers[name].step()
            if torch.device(device).type == "cuda":
                torch.cuda.synchronize(device)
            if index >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def optimizer_of(task) -> torch.optim.Optimizer:
    """The optimizer of a LightningModule's ``configure_optimizers`` (which may return it alone
    or in a dict with its learning-rate schedule)."""
    configured = task.configure_optimizers()
    return configured["optimizer"] if isinstance(configured, dict) else configured


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line() -> str:
    """One line naming the software and threads the numbers were measured with."""
    return (
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"Python {platform.python_version()}, {platform.machine()}"
    )


def write_report(path: Path, title: str, command: str, body: str) -> None:
    """Write a markdown report with the command that produced it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# {title}\n\nProduced by `{command}` on {time.strftime('%Y-%m-%d')} "
        f"({machine_line()}).\n\n{body}\n"
    )
