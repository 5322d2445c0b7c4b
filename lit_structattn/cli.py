"""The ``structattn`` command: LightningCLI over every task and DataModule of the project.

    structattn fit --config configs/demo/needle.yaml
    structattn test --config configs/demo/needle.yaml --ckpt_path last
    structattn fit --print_config --config configs/demo/needle.yaml
    structattn reproduce tree_transduction --budget cpu --seeds 3

Models and data are chosen in the config by ``class_path`` (e.g.
``lit_structattn.tasks.SequenceClassifier`` and ``datamodules.NeedleDataModule``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.cli import LightningCLI

from .allocator import steady_allocator


class StructAttnCLI(LightningCLI):
    """LightningCLI with three changes to ``--ckpt_path``.

    * ``last`` and ``best`` name the newest ``last.ckpt`` under ``trainer.default_root_dir``
      and the best checkpoint recorded in it, in any process (Lightning resolves them only
      within the process that trained): ``fit --ckpt_path last`` resumes an interrupted run.
    * A resumed fit keeps its checkpoints beside the one it resumes from
      (:func:`keep_checkpoint_folder`), so its best epoch before the interruption still counts.
    * The configuration the user gave is kept. Lightning's CLI replaces the model's arguments
      by the checkpoint's hyper-parameters, silently ignoring the command line
      (``--model.init_args.test_beam 1`` at test time, say); here a checkpoint whose weights do
      not fit the configuration is refused with the differing hyper-parameters named (see
      :class:`~lit_structattn.tasks.base.Task`).
    """

    def _parse_ckpt_path(self) -> None:  # replaces LightningCLI's hyper-parameter override
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        if config.get("ckpt_path") in ("last", "best"):
            root = config.trainer.default_root_dir or "."
            config.ckpt_path = resolve_checkpoint(config.ckpt_path, Path(root))

    def before_fit(self) -> None:
        checkpoint = self.config["fit"].get("ckpt_path")
        if checkpoint and Path(checkpoint).is_file():
            keep_checkpoint_folder(self.trainer, Path(checkpoint))


def keep_checkpoint_folder(trainer: L.Trainer, resume_from: Path) -> None:
    """Let the checkpoint callbacks of a fit resumed from ``resume_from`` write beside it.

    A resumed fit logs to a new ``version_*`` folder; checkpoint callbacks that follow the
    logger would move there too, and Lightning then drops their restored record of the best
    checkpoints (it keeps it only when the folder is unchanged), so the best epoch before the
    interruption would no longer compete in the model selection. Callbacks given their own
    ``dirpath`` are left alone.
    """
    for callback in trainer.checkpoint_callbacks:
        if callback.dirpath is None:
            callback.dirpath = str(resume_from.parent)


def resolve_checkpoint(alias: str, root: Path) -> str:
    """The path that ``last`` or ``best`` stands for under the run folder ``root``.

    Raises:
        ValueError: no ``last.ckpt`` under ``root``, or (``best``) the newest one records no
            best checkpoint that still exists.
    """
    found = sorted(root.rglob("last.ckpt"), key=lambda path: path.stat().st_mtime)
    if not found:
        raise ValueError(
            f"--ckpt_path {alias}: no last.ckpt under {root.resolve()}; give the run's folder "
            "as --trainer.default_root_dir (or a checkpoint file as --ckpt_path)"
        )
    if alias == "last":
        return str(found[-1])
    states = torch.load(found[-1], map_location="cpu", weights_only=False).get("callbacks", {})
    best = [  # from the checkpoint callbacks that monitor a metric
        s.get("best_model_path") for k, s in states.items()
        if k.startswith("ModelCheckpoint") and "'monitor': None" not in k
    ]
    best = [path for path in best if path and Path(path).is_file()]
    if not best:
        raise ValueError(f"--ckpt_path best: {found[-1]} records no best checkpoint that exists")
    return best[0]


def build_cli(args: list[str] | None = None, run: bool = True) -> LightningCLI:
    """The project's LightningCLI: any LightningModule and DataModule chosen by ``class_path``."""
    return StructAttnCLI(
        L.LightningModule,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        args=args,
        run=run,
    )


def main(args: list[str] | None = None) -> None:
    """Entry point of ``structattn fit|validate|test|predict|reproduce``."""
    args = sys.argv[1:] if args is None else args
    steady_allocator()  # freed tensors stay in the heap: no page faults on every CPU step
    if args and args[0] == "reproduce":
        from .reproduce import main as reproduce

        reproduce(args[1:])
        return
    build_cli(args)


if __name__ == "__main__":
    main()
