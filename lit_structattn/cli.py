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

import lightning as L
from lightning.pytorch.cli import LightningCLI


class StructAttnCLI(LightningCLI):
    """LightningCLI that keeps the configuration the user gave when ``--ckpt_path`` is set.

    Lightning's CLI replaces the model's arguments by the checkpoint's hyper-parameters, which
    silently ignores what the command line says (``--model.init_args.test_beam 1`` at test
    time, say). Here the given configuration is used; a checkpoint whose weights do not fit it
    is refused with the differing hyper-parameters named (see
    :class:`~lit_structattn.tasks.base.Task`).
    """

    def _parse_ckpt_path(self) -> None:
        return


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
    if args and args[0] == "reproduce":
        from .reproduce import main as reproduce

        reproduce(args[1:])
        return
    build_cli(args)


if __name__ == "__main__":
    main()
