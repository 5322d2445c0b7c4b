"""What every LightningModule of the project shares: clear errors for a checkpoint that was
trained with another configuration and for a vocabulary size that does not fit the data."""

from __future__ import annotations

from typing import Any

import lightning as L


class Task(L.LightningModule):
    """Base of the project's LightningModules.

    Loading a checkpoint (``--ckpt_path`` in ``fit``/``test``/``predict``) whose weights do not
    fit the configured model raises a ``ValueError`` naming the hyper-parameters that differ,
    instead of PyTorch's list of mismatched tensor shapes.
    """

    def check_vocab_size(self) -> None:
        """``ValueError`` unless the model's ``vocab_size`` hyper-parameter equals the size of
        the DataModule's ``vocab`` (when the DataModule has one)."""
        vocab = getattr(getattr(self.trainer, "datamodule", None), "vocab", None)
        if vocab is not None and len(vocab) != self.hparams.vocab_size:
            raise ValueError(
                f"model.vocab_size={self.hparams.vocab_size} but the data's vocabulary has "
                f"{len(vocab)} symbols; set --model.init_args.vocab_size {len(vocab)}"
            )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved, expected = checkpoint.get("state_dict", {}), self.state_dict()
        mismatched = sorted(
            set(saved) ^ set(expected)
            | {k for k in set(saved) & set(expected) if saved[k].shape != expected[k].shape}
        )
        if not mismatched:
            return
        before = checkpoint.get("hyper_parameters", {})
        now = dict(self.hparams)
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
