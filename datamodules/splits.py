"""The dataloader hooks every DataModule of the project shares."""

from __future__ import annotations

import lightning as L
from torch.utils.data import DataLoader


class SplitDataModule(L.LightningDataModule):
    """A DataModule with ``train``/``val``/``test`` splits served by one method,
    :meth:`_loader`; ``predict`` reads the test split."""

    def _loader(self, split: str, shuffle: bool = False) -> DataLoader:
        """The DataLoader of ``split`` (shuffled for training)."""
        raise NotImplementedError

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test")
