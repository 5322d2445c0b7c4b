"""The PREDICTED fertilities of Malaviya et al. (2018, §4): the application trains the fertility
predictor (:class:`~lit_structattn.models.fertility.FertilityPredictor`) on what a
:class:`~lit_structattn.datamodules.translation.TranslationDataModule` provides, and gives its
predictions back to the data; the data trains no model.

Two steps, as Lightning's hooks run them under DDP (``TranslationTask`` calls both):

- :func:`train_fertility_predictor` (``prepare_data``, one process per node): train on the
  training sources and their eflomal links (:meth:`TranslationDataModule.fertility_training_data`,
  the aligned count of every source subword, capped at ``K - 1``) unless the cache holds a
  predictor, and store it at :func:`predictor_file`, beside the data's BPE model and links,
  keyed by what it is computed from (the BPE model, the digest of the filtered training split,
  the aligner's iterations and the epochs: in its name and in the file, checked when read;
  predictors cached under the older ``<bpe model>.max<L>.`` names are trained again).
- :func:`give_predicted_fertilities` (``setup``, every process): load the cached predictor
  (training it first if it is missing) and hand every split's expected fertility + 1 to the
  data (:meth:`TranslationDataModule.set_fertilities`), with the predictor as plain values
  (:func:`predictor_state`): the data's text codec carries it into every checkpoint, and the
  task rebuilds it (:func:`predictor_from_state`) to give raw sentences their fertilities.

Neither step touches the global random state (training follows its own seed, loading builds the
predictor under ``torch.random.fork_rng``): a run that trains the predictor and one that finds
it in the cache go on identically.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch.utilities import rank_zero_info

from ..datamodules.files import atomic_path
from ..datamodules.translation import TranslationDataModule
from ..models.fertility import (
    FertilityPredictor,
    fertility_targets,
    fit_fertility_predictor,
    predict_fertilities,
)
from ..run.cache_records import load_record


def predictor_file(data: TranslationDataModule, epochs: int) -> Path:
    """The cache file of the predictor trained for ``epochs`` on ``data``'s filtered training
    split and links (``data`` set up): ``<bpe model>.train-<digest>.it<aligner
    iterations>.ep<epochs>.predictor`` (:meth:`TranslationDataModule.derived_file`)."""
    return data.derived_file(f"it{data.hparams.aligner_iterations}.ep{epochs}.predictor")


def predictor_key(data: TranslationDataModule, epochs: int) -> dict:
    """What the predictor of ``data`` (set up) and ``epochs`` is computed from, stored in its
    cache file and checked when read: the training split's digest (of the BPE model and the
    filtered pairs), the aligner's iterations and the epochs."""
    return {"training": data.training_digest, "aligner_iterations":
            data.hparams.aligner_iterations, "epochs": epochs}


def train_fertility_predictor(data: TranslationDataModule, epochs: int, log=rank_zero_info
                              ) -> Path:
    """The cached predictor's file, training it first if the cache has none (its state dict
    and :func:`predictor_key`, written whole with
    :func:`~lit_structattn.datamodules.files.atomic_path`). ``data`` must be set up.

    Returns:
        :func:`predictor_file` of ``data`` and ``epochs``.
    """
    path = predictor_file(data, epochs)
    if not path.is_file():
        log(f"training the fertility predictor ({epochs} epochs) -> {path}")
        sources, links = data.fertility_training_data()
        targets = fertility_targets(links, [len(source) for source in sources])
        model = fit_fertility_predictor(sources, targets, len(data.subwords), epochs=epochs)
        with atomic_path(path) as partial:
            torch.save({"key": predictor_key(data, epochs), "weights": model.state_dict()},
                       partial)
    return path


def load_fertility_predictor(data: TranslationDataModule, epochs: int) -> FertilityPredictor:
    """The predictor cached for ``data`` (set up) and ``epochs`` (in eval mode), read as plain
    data and built without drawing from the global random state.

    Raises:
        ValueError: the file holds more than plain values, or not :func:`predictor_key`
            (:func:`~lit_structattn.run.cache_records.load_record`).
    """
    record = load_record(predictor_file(data, epochs), predictor_key(data, epochs))
    return predictor_from_state({"sizes": {"vocab_size": len(data.subwords)},
                                 "weights": record["weights"]})


def predictor_state(model: FertilityPredictor) -> dict:
    """``model`` as plain values, what a text codec keeps in a checkpoint: ``sizes`` (the
    constructor's arguments) and ``weights`` (its state dict)."""
    lstm = model.rnn.lstm
    sizes = {"vocab_size": model.embed.num_embeddings, "embed_dim": model.embed.embedding_dim,
             "hidden_dim": lstm.hidden_size, "num_layers": lstm.num_layers,
             "dropout": model.dropout.p, "classes": model.output.out_features}
    return {"sizes": sizes, "weights": dict(model.state_dict())}


def predictor_from_state(state: dict) -> FertilityPredictor:
    """The predictor of a :func:`predictor_state` (sizes left out take their defaults), in eval
    mode, built without drawing from the global random state."""
    with torch.random.fork_rng(devices=[]):
        model = FertilityPredictor(**state["sizes"])
    model.load_state_dict(state["weights"])
    return model.eval()


def give_predicted_fertilities(data: TranslationDataModule, epochs: int) -> None:
    """Set ``data``'s predicted fertilities (``data`` set up, ``fertility_strategy=
    "predicted"``): per split, the predictor's expected fertility + 1 of every source subword
    (a list per pair, as long as its source without the sink); the predictor goes with them,
    for the data's text codec (raw sentences get their fertilities from it)."""
    train_fertility_predictor(data, epochs)
    model = load_fertility_predictor(data, epochs)
    data.set_fertilities({split: predict_fertilities(model, data.source_ids(split))
                          for split in data.datasets}, predictor=predictor_state(model))
