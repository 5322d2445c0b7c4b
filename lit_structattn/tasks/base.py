"""What every LightningModule of the project shares: its optimizer and schedule given as
callables (``class_path`` in a config), clear errors for a checkpoint that was trained with
another configuration and for a vocabulary size that does not fit the data."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import lightning as L
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable

# A task given its model as an object (``model: class_path ...``) records the model's
# configuration in its hyper-parameters (LightningCLI's instantiator does), which is what
# ``load_from_checkpoint`` rebuilds it from; Lightning's advice to leave the module out does not
# apply.
warnings.filterwarnings("ignore", message=r"Attribute '\w+' is an instance of `nn.Module`")


class Task(L.LightningModule):
    """Base of the project's LightningModules.

    Loading a checkpoint (``--ckpt_path`` in ``fit``/``test``/``predict``) whose weights do not
    fit the configured model raises a ``ValueError`` naming the hyper-parameters that differ,
    instead of PyTorch's list of mismatched tensor shapes.

    Args:
        optimizer: builds the optimizer from the trained parameters, e.g. ``torch.optim.Adam``
            or, in a config, ``{class_path: torch.optim.Adam, init_args: {lr: 0.002}}``.
        lr_scheduler: builds the learning-rate schedule (stepped every epoch) from the
            optimizer, e.g. :class:`~lit_structattn.schedules.DecayFrom`; None: a constant rate.
    """

    def __init__(self, optimizer: OptimizerCallable,
                 lr_scheduler: LRSchedulerCallable | None = None) -> None:
        super().__init__()
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler

    def configure_optimizers(self):
        optimizer = self.optimizer([p for p in self.parameters() if p.requires_grad])
        if self.lr_scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.lr_scheduler(optimizer)}

    def check_vocab_size(self, size: int, name: str = "vocab_size") -> None:
        """``ValueError`` unless the model's vocabulary ``size`` (its argument ``name``) equals
        the size of the DataModule's ``vocab`` (when the DataModule has one)."""
        vocab = getattr(getattr(self.trainer, "datamodule", None), "vocab", None)
        if vocab is not None and len(vocab) != size:
            raise ValueError(
                f"the model's {name} is {size} but the data's vocabulary has {len(vocab)} "
                "symbols: a checkpoint or configuration made for other data"
            )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved, expected = checkpoint.get("state_dict", {}), self.state_dict()
        mismatched = sorted(
            set(saved) ^ set(expected)
            | {k for k in set(saved) & set(expected) if saved[k].shape != expected[k].shape}
        )
        if not mismatched:
            return
        before = flat_hyperparameters(checkpoint.get("hyper_parameters", {}))
        now = flat_hyperparameters(self.hparams)
        differing = [
            f"{key}: {before.get(key, '<unset>')!r} in the checkpoint, {now.get(key, '<unset>')!r} "
            "now"
            for key in sorted(set(before) | set(now))
            if before.get(key, "<unset>") != now.get(key, "<unset>")
        ]
        detail = "; ".join(differing) if differing else "no hyper-parameter differs"
        raise ValueError(
            "the checkpoint was trained with an incompatible configuration "
            f"({detail}). Mismatched weights: {', '.join(mismatched[:5])}"
            f"{' ...' if len(mismatched) > 5 else ''}. Use the config the checkpoint was "
            "trained with (its hparams.yaml / config.yaml sits beside the checkpoints)."
        )


def flat_hyperparameters(hparams: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``hparams`` with the objects a config gives by ``class_path`` / ``init_args`` (the model,
    the optimizer) spread into dotted keys: ``{"model.hidden_dim": 50, "model": "...Seq2Seq"}``."""
    flat: dict[str, Any] = {}
    for key, value in hparams.items():
        if hasattr(value, "as_dict"):  # a jsonargparse Namespace
            value = value.as_dict()
        if isinstance(value, Mapping) and "class_path" in value:
            flat[prefix + key] = value["class_path"]
            flat.update(flat_hyperparameters(value.get("init_args") or {}, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat
