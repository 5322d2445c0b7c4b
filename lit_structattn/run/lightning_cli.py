"""The project's LightningCLI (:class:`StructAttnCLI`, :func:`build_cli`): any LightningModule
and DataModule chosen by ``class_path``, options by full name only, ``--ckpt_path last|best``
resolved from the run folder, checkpoints written whole and fits that stop cleanly on
SIGINT/SIGTERM. The ``structattn`` command around it is :mod:`lit_structattn.cli`."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import lightning as L
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .allocator import steady_allocator, steady_allocator_wanted
from .checkpoints import AtomicCheckpointIO, read_checkpoint, resolve_checkpoint
from .folders import RunFolderLock, claim_version_folders
from .interruption import ResumableFit
from .progress import RunHeadlines, progress_bar
from .quiet import evaluation_warnings_off, quiet_output, verbose_wanted
from .training_guards import FiniteLoss

#: The arguments of a task's ``model`` that come from the data. A DataModule with an attribute
#: of that name gives the value: the CLI links ``data.<name>`` to ``model.init_args.model.
#: init_args.<name>`` when it instantiates the classes (the DataModule first), and the value is
#: saved with the model's configuration in its checkpoints. One name, one meaning, in every
#: family that takes it.
DATA_SIZES = (
    "src_vocab", "tgt_vocab", "joint_vocab", "sink",  # encoder-decoders
    "vocab_size", "num_classes",  # the attention-pooling classifier
    "num_tags", "affix_vocab_size", "source_vocab_size",  # the easy-first tagger (+ vocab_size)
    "memory_size",  # the memory networks (with vocab_size)
    "vector_dim",  # decomposable attention (with vocab_size, num_classes)
)

#: The arguments of a task itself (not of its model) that come from the data: the CLI links
#: ``data.<name>`` to ``model.init_args.<name>`` in the same way, and the task keeps the value in
#: its hyper-parameters. The tagging task's metrics and per-tag loss weights name the tags.
TASK_DATA = ("tag_names",)

REPRODUCE_HELP = ("Train, test and report the rows of a paper's table over seeds (budgets ci, "
                  "demo, cpu, paper; see structattn reproduce --help).")
EXPERIMENTS_HELP = ("List the experiments (every table row, by name) or show one; run one with "
                    "structattn fit --experiment NAME.")


def package_version() -> str:
    """The installed version of ``lit_structattn`` (``unknown`` when it is not installed)."""
    try:
        return version("lit_structattn")
    except PackageNotFoundError:
        return "unknown"


class StructAttnCLI(LightningCLI):
    """LightningCLI whose parsers take options by their full name only, raise their errors to
    :func:`main` (which words them) and list ``--version``, ``--debug``, ``--verbose``,
    ``reproduce`` and ``experiments``, and these changes:

    * ``last`` and ``best`` name the newest ``last.ckpt`` under ``trainer.default_root_dir``
      and the best checkpoint recorded in it, in any process (Lightning resolves them only
      within the process that trained): ``fit --ckpt_path last`` resumes an interrupted run.
    * A checkpoint file is read as data first (:func:`~.checkpoints.read_checkpoint`): one
      that holds other Python objects, or is not a checkpoint, is refused in one line.
    * A resumed fit keeps its checkpoints beside the one it resumes from
      (:func:`keep_checkpoint_folder`), so its best epoch before the interruption still counts.
    * A run never writes into another run's folder: each logger of a trainer takes its own
      ``version_<n>`` folder, and a run without one locks ``default_root_dir``
      (:mod:`~.folders`).
    * Every trainer writes its checkpoints whole (:class:`~.checkpoints.AtomicCheckpointIO`)
      and stops at a training step with a checkpoint on SIGINT/SIGTERM, from which a resumed
      fit continues as the uninterrupted one would (:class:`~.interruption.ResumableFit`).
    * A fit ends at its first NaN or infinite training loss, naming the step
      (:class:`~.training_guards.FiniteLoss`).
    * A run says its folder when a stage starts and prints a line per epoch; progress is
      Lightning's bar in a terminal, plain lines at a steady rate elsewhere (:mod:`~.progress`).
    * The configuration the user gave is kept. Lightning's CLI replaces the model's arguments
      by the checkpoint's hyper-parameters, silently ignoring the command line
      (``--model.init_args.test_beam 1`` at test time, say); here a checkpoint whose weights do
      not fit the configuration is refused with the differing hyper-parameters named (see
      :class:`~lit_structattn.tasks.base.Task`).
    """

    def init_parser(self, **kwargs) -> LightningArgumentParser:
        """Every parser (main and subcommands) takes options only by their full name:
        ``--trainer.max_epoch`` is an error, not ``--trainer.max_epochs``."""
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("exit_on_error", False)  # errors reach main(), which words them
        return super().init_parser(**kwargs)

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict, subparser_kwargs: dict):
        """Lightning's parser, with ``--version``, ``--debug``, ``reproduce`` and ``experiments``
        in its help (handled by :func:`main` before it parses)."""
        main_kwargs.setdefault("prog", "structattn")
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        self.parser.add_argument("--version", action="version",
                                 version=f"structattn {package_version()}")
        self.parser.add_argument("--debug", action="store_true",
                                 help="show the traceback of an error (also STRUCTATTN_DEBUG=1)")
        self.parser.add_argument("--verbose", action="store_true",
                                 help="show Lightning's messages, its warnings and the model "
                                 "summary (also STRUCTATTN_VERBOSE=1)")
        if add_subcommands:
            for name, text in (("reproduce", REPRODUCE_HELP),
                               ("experiments", EXPERIMENTS_HELP)):
                self.parser._subcommands_action.add_subcommand(
                    name, ArgumentParser(description=text), help=text)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Link the sizes a task's model takes from the data (:data:`DATA_SIZES`) and what
        the task itself takes from it (:data:`TASK_DATA`)."""
        for name in DATA_SIZES:
            parser.link_arguments(f"data.{name}", f"model.init_args.model.init_args.{name}",
                                  apply_on="instantiate")
        for name in TASK_DATA:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}",
                                  apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        """Parses ``args`` without Lightning's warning about ``args`` given beside
        ``sys.argv``: :func:`main` hands over the command line it read (without ``--debug``)
        and the reproduction runner a run's own arguments, so both are always meant."""
        if isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    def _instantiate_trainer(self, config: dict, callbacks: list) -> L.Trainer:
        callbacks = [RunFolderLock(), *callbacks, ResumableFit(), FiniteLoss(), RunHeadlines()]
        configured = config.get("callbacks") or []
        chosen = [*(configured if isinstance(configured, list) else [configured]), *callbacks]
        if config.get("enable_progress_bar") is not False and not any(
                isinstance(callback, ProgressBar) for callback in chosen):
            callbacks.append(progress_bar())  # plain lines where stdout is not a terminal
        trainer = super()._instantiate_trainer(config, callbacks)
        claim_version_folders(trainer)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # not one the user chose
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if steady_allocator_wanted(isinstance(trainer.accelerator, CPUAccelerator)):
            steady_allocator()  # freed tensors stay in the heap: no page faults every step
        return trainer

    def _run_subcommand(self, subcommand: str) -> None:
        """The subcommand; a test, validation or prediction without the warnings that concern
        only a fit (:data:`~.quiet.NOT_AN_EVALUATIONS_CONCERN`)."""
        if subcommand == "fit":
            super()._run_subcommand(subcommand)
            return
        with evaluation_warnings_off(verbose_wanted()):  # test, validate, predict
            super()._run_subcommand(subcommand)

    def _parse_ckpt_path(self) -> None:  # replaces LightningCLI's hyper-parameter override
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        if config.get("ckpt_path") in ("last", "best"):
            root = config.trainer.default_root_dir or "."
            config.ckpt_path = resolve_checkpoint(config.ckpt_path, Path(root))
        if config.get("ckpt_path") and Path(config.ckpt_path).is_file():
            read_checkpoint(config.ckpt_path)  # data only, or refused in one line

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


def build_cli(args: list[str] | None = None, run: bool = True) -> LightningCLI:
    """The project's LightningCLI: any LightningModule and DataModule chosen by ``class_path``,
    quiet unless ``STRUCTATTN_VERBOSE`` is set (:mod:`.quiet`): then Lightning's messages and
    its model summary show."""
    verbose = verbose_wanted()
    quiet_output(verbose)
    return StructAttnCLI(
        L.LightningModule,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={"enable_model_summary": verbose},
        args=args,
        run=run,
    )
