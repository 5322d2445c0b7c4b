"""Quiet runs: what a run prints is what a researcher reads (the run folder, one line per epoch,
the result), not the libraries' chatter.

Lightning announces on every run that a seed was set, which accelerators exist, an advertisement
for its cloud logger and the modules' parameter counts; some third-party warnings fire on every
run although nothing is wrong with it. :func:`quiet_output` turns them off at their source:
Lightning's informational lines through the levels of the ``lightning.pytorch`` and
``lightning.fabric`` loggers, and the warnings by one filter each in
:data:`NOT_THE_USERS_CONCERN`, each with the reason it is not the user's concern; warnings not
listed there still show. The model summary is the Trainer's ``enable_model_summary``, off by
default unless verbose (:func:`~.lightning_cli.build_cli`). ``structattn ... --verbose`` (or
``STRUCTATTN_VERBOSE=1``, :data:`VERBOSE_ENV`) keeps everything, as Lightning prints it.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The environment variable that keeps Lightning's messages (``structattn --verbose`` sets it,
#: for this process and those it starts, e.g. the processes of a DDP run).
VERBOSE_ENV = "STRUCTATTN_VERBOSE"

#: The loggers whose INFO lines are Lightning's chatter ("Seed set to 0", "GPU available: ...",
#: "TPU available: ...", the litlogger tip, "Restoring states from ...").
LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")


class OutsideLightning(logging.Filter):
    """Passes the records of Lightning's ``rank_zero_info`` logger that code outside Lightning
    logged (this project's notes: translations written, BLEU, the fertility predictor's
    training), and warnings; drops Lightning's own INFO lines. ``rank_zero_info`` records the
    file of its caller, Lightning's or ours."""

    def __init__(self) -> None:
        super().__init__()
        import lightning

        self.lightning_folder = str(Path(lightning.__file__).parent)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or not record.pathname.startswith(
            self.lightning_folder)


#: ``(module, message, category, why)`` of every third-party warning filtered out: the module
#: the warning is reported from (a regular expression of its ``__name__``), the beginning of its
#: message (a regular expression), its category, and why the user need not see it.
NOT_THE_USERS_CONCERN = (
    ("lightning.pytorch.utilities._pytree", r"`isinstance\(treespec, LeafSpec\)` is deprecated",
     FutureWarning,
     "Lightning's own use of a torch API that torch 2.10+ deprecates; Lightning's to update, "
     "on every fit and test"),
    ("lightning.pytorch.trainer.connectors.checkpoint_connector",
     r'`\.\w+\(ckpt_path="best"\)` is called with Trainer configured with multiple '
     r"`ModelCheckpoint`", UserWarning,
     "every config keeps the best checkpoint by val/score first and last.ckpt second "
     "(configs/callbacks.yaml): the first one is the best, as meant, before every test"),
    ("lightning.pytorch.loops.fit_loop", r"The number of training batches \(\d+\) is smaller "
     r"than the logging interval", Warning,
     "short epochs (the ci and demo budgets, small data) log no step in TensorBoard's "
     "train/loss; the epoch line prints the epoch's mean training loss"),
)


#: The same for warnings that concern only a fit, ignored while a run evaluates (``structattn
#: test|validate|predict``, :func:`evaluation_warnings_off`).
NOT_AN_EVALUATIONS_CONCERN = (
    ("lightning.pytorch.callbacks.model_checkpoint", r"The dirpath has changed from",
     UserWarning,
     "a test of a checkpoint logs to a new version folder, so the checkpoint callbacks do not "
     "take back the fit's record of its best checkpoints: a test writes no checkpoint"),
)


@contextmanager
def evaluation_warnings_off(verbose: bool = False) -> Iterator[None]:
    """Within the block, the warnings of :data:`NOT_AN_EVALUATIONS_CONCERN` are ignored
    (unless ``verbose``)."""
    with warnings.catch_warnings():
        for module, message, category, _why in () if verbose else NOT_AN_EVALUATIONS_CONCERN:
            warnings.filterwarnings("ignore", message=message, category=category, module=module)
        yield


def quiet_output(verbose: bool = False) -> None:
    """Lightning's informational lines off (on with ``verbose``), and the warnings of
    :data:`NOT_THE_USERS_CONCERN` ignored unless ``verbose``. Call it before the Trainer is
    built; it changes this process's logging and warning filters.

    The loggers of :data:`LIGHTNING_LOGGERS` keep warnings only; the logger of
    ``rank_zero_info``, which this project uses too, keeps INFO lines but drops Lightning's
    (:class:`OutsideLightning`)."""
    import lightning.pytorch  # noqa: F401  (sets its loggers' level when imported)
    from lightning_utilities.core import rank_zero  # imported by Lightning: no cost

    for name in LIGHTNING_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    shared = rank_zero.log  # the logger of rank_zero_info, Lightning's and ours
    for old in [f for f in shared.filters if isinstance(f, OutsideLightning)]:
        shared.removeFilter(old)
    shared.setLevel(logging.INFO)
    if verbose:
        return
    shared.addFilter(OutsideLightning())
    for module, message, category, _why in NOT_THE_USERS_CONCERN:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


def verbose_wanted() -> bool:
    """Whether :data:`VERBOSE_ENV` asks for Lightning's messages (set and not ``0``)."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")
