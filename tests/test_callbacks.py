"""The TensorBoard callbacks on a toy module: AttentionFigures shows the same median-length
validation examples every epoch (the first batch, with a warning, for data without a collated
validation set), HparamsMetric puts the best monitored value in the HParams view; and the
figures' titles and labels stay inside the figure."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
from torch.utils.data import DataLoader

from lit_structattn.datamodules.batching import EncodedItems, pad_rows
from lit_structattn.figures.callbacks import AttentionFigures, HparamsMetric, median_examples
from lit_structattn.figures.plots import AttentionMap, plot_figure, plot_parse, plot_raindrop

LENGTHS = [1, 9, 2, 7, 3, 5, 1, 4, 6, 2, 8]  # the median, 4, at index 7


class Sentences(EncodedItems):
    """Items ``(ids, index)`` of the given lengths."""

    def __init__(self, lengths: list[int]) -> None:
        self.items = [(list(range(1, n + 1)), i) for i, n in enumerate(lengths)]


def collate(items: list[tuple]) -> dict[str, torch.Tensor]:
    ids, index = zip(*items, strict=True)
    return {"ids": torch.tensor(pad_rows(ids, max(map(len, ids)))),
            "lengths": torch.tensor([len(row) for row in ids]), "index": torch.tensor(index)}


class Data(L.LightningDataModule):
    """Validation batches of 3, shortest first (as the project's DataModules serve them)."""

    collate = staticmethod(collate)

    def setup(self, stage: str) -> None:
        self.datasets = {"train": Sentences(LENGTHS), "val": Sentences(LENGTHS)}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.datasets["train"], batch_size=4, collate_fn=collate)

    def val_dataloader(self) -> DataLoader:
        order = sorted(range(len(LENGTHS)), key=LENGTHS.__getitem__)
        return DataLoader(self.datasets["val"], batch_sampler=[order[i : i + 3]
                                                               for i in range(0, 11, 3)],
                          collate_fn=collate)


class LoaderOnlyData(L.LightningDataModule):
    """Data without ``datasets`` or ``collate``: only loaders."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(Sentences(LENGTHS), batch_size=4, collate_fn=collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(Sentences(LENGTHS), batch_size=3, collate_fn=collate)


class Toy(L.LightningModule):
    """A module that records the batches it draws figures of."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))
        self.shown: list[list[int]] = []

    def training_step(self, batch, batch_idx):
        return (self.weight * batch["lengths"]).float().pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", (self.weight * batch["lengths"]).float().pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def attention_figures(self, batch, vocab, limit):
        self.shown.append(batch["index"][:limit].tolist())
        return [(f"attention/example_{b}", AttentionMap("toy", torch.eye(n), ["w"] * n,
                                                        ["w"] * n))
                for b, n in enumerate(batch["lengths"][:limit].tolist())]


def fit(tmp_path, data: L.LightningDataModule, epochs: int = 2) -> Toy:
    model = Toy()
    trainer = L.Trainer(
        max_epochs=epochs, accelerator="cpu", logger=TensorBoardLogger(tmp_path),
        callbacks=[ModelCheckpoint(monitor="val/loss"), HparamsMetric(), AttentionFigures(2)],
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
    trainer.fit(model, datamodule=data)
    return model


def events(tmp_path) -> EventAccumulator:
    (path,) = tmp_path.rglob("events.out.tfevents.*")
    return EventAccumulator(str(path)).Reload()


def test_median_examples():
    assert median_examples(LENGTHS, 1) == [7]
    assert [LENGTHS[i] for i in median_examples(LENGTHS, 3)] == [3, 4, 5]
    assert median_examples([2, 1], 5) == [1, 0]


def test_figures_show_the_same_median_examples_every_epoch(tmp_path):
    model = fit(tmp_path, Data(), epochs=3)
    assert model.shown == [[4, 7]] * 3  # lengths 3 and 4; not the shortest (0 and 6)
    images = events(tmp_path).Tags()["images"]
    assert {"attention/example_0", "attention/example_1"} <= set(images)


def test_data_without_a_validation_set_shows_the_first_batch(tmp_path):
    with pytest.warns(UserWarning, match="first validation batch"):
        model = fit(tmp_path, LoaderOnlyData())
    assert model.shown == [[0, 1]] * 2


def test_hparams_view_shows_the_best_monitored_value(tmp_path):
    fit(tmp_path, Data())
    logged = events(tmp_path)
    assert "hp_metric" not in logged.Tags()["scalars"]
    best = [event.value for event in logged.Scalars("best/val/loss")]
    val = [event.value for event in logged.Scalars("val/loss")]
    assert len(best) == 2 and best == pytest.approx([min(val[:1]), min(val)])
    content = logged.SummaryMetadata("_hparams_/experiment").plugin_data.content
    experiment = HParamsPluginData.FromString(content).experiment
    assert [info.name.tag for info in experiment.metric_infos] == ["best/val/loss"]


def inside(figure, *artists) -> bool:
    """Whether the drawn extent of every one of ``artists`` lies within ``figure``."""
    figure.canvas.draw()
    frame = figure.bbox
    return all(frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1
               and frame.y0 - 1 <= box.y0 and box.y1 <= frame.y1 + 1
               for box in (artist.get_window_extent() for artist in artists))


LONG_TITLE = "where did the football go before the kitchen? " * 4


@pytest.mark.parametrize("kind", ["heatmap", "raindrop", "parse"])
@pytest.mark.parametrize("words", [1, 8, 150])
def test_titles_and_labels_fit_in_the_figure(kind, words):
    tokens = [f"word{i}" if i % 5 else "a-rather-long-token-" * 3 for i in range(words)]
    if kind == "heatmap":
        figure = plot_figure(AttentionMap(LONG_TITLE, torch.rand(words, words), tokens, tokens))
    elif kind == "raindrop":
        figure = plot_raindrop(tokens, torch.rand(10, words), LONG_TITLE)
    else:
        figure = plot_parse(["$", *tokens], [0] * (words + 1), LONG_TITLE)
    axes = figure.axes[0]
    assert inside(figure, axes.title)
    assert axes.title.get_text().count("\n") < 2
    width, height = figure.get_size_inches()
    assert width <= 14 and height <= 12
    if kind == "heatmap":
        assert inside(figure, *axes.get_yticklabels())
