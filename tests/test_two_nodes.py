"""Lightning's DDP over two machines, played on this one: two ``torchrun --nnodes 2
--nproc_per_node 1`` launches (node ranks 0 and 1, gloo on the CPU, ``--trainer.num_nodes 2``)
fit the needle demo together, as ``structattn fit`` would on two hosts (README, "Many GPUs, many
machines"). The run writes one run folder and one checkpoint (the second node claims no
``version_<n>`` folder of its own, :mod:`lit_structattn.run.folders`), and the validation
metrics the two nodes logged are those of one process validating that checkpoint."""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_ddp_evaluation import NEEDLE, ROOT, evaluated_metrics


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def node(rank: int, port: int, root: Path, log: Path) -> subprocess.Popen:
    """Node ``rank`` of a two-node ``structattn fit`` of the needle demo, writing under
    ``root``; its output goes to ``log``."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
        "--node_rank", str(rank), "--master_addr", "127.0.0.1", "--master_port", str(port),
        "-m", "lit_structattn.cli", "fit", *NEEDLE, "--trainer.num_nodes", "2",
        "--trainer.devices", "1", "--trainer.accelerator", "cpu", "--trainer.strategy", "ddp",
        "--trainer.max_epochs", "1", "--trainer.callbacks", "[]",
        "--trainer.default_root_dir", str(root),
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(root), "--trainer.enable_progress_bar", "false"]
    return subprocess.Popen(command, cwd=root.parent, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_two_nodes_fit_like_one_process(tmp_path):
    root, port = tmp_path / "fit", free_port()
    logs = [tmp_path / f"node{rank}.log" for rank in (0, 1)]
    nodes = [node(rank, port, root, log) for rank, log in enumerate(logs)]
    try:
        codes = [process.wait(timeout=600) for process in nodes]
    finally:
        for process in nodes:
            process.kill()
    assert codes == [0, 0], "\n".join(log.read_text()[-3000:] for log in logs)

    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]
    (checkpoint,) = root.rglob("*.ckpt")
    with (root / "lightning_logs" / "version_0" / "metrics.csv").open() as lines:
        (fitted,) = [{key: float(value) for key, value in row.items() if value}
                     for row in csv.DictReader(lines) if row.get("val/accuracy")]
    one = evaluated_metrics(NEEDLE, checkpoint, tmp_path / "one", 1)
    assert {"val/accuracy", "val/loss"} <= set(one)
    for key in ("val/accuracy", "val/loss"):
        assert fitted[key] == pytest.approx(one[key], rel=1e-6), (key, fitted, one)
