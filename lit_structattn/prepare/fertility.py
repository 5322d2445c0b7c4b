"""The PREDICTED fertilities of Malaviya et al. (2018, §4): the application trains the fertility
predictor (:class:`~lit_structattn.models.fertility.FertilityPredictor`) on what a
:class:`~lit_structattn.datamodules.translation.TranslationDataModule` provides, and gives its
predictions back to the data; the data trains no model. The targets are the aligned count of
every source token (:func:`fertility_targets`), the training is the side models' loop
(:func:`fit_fertility_predictor`, :func:`~lit_structattn.prepare.loop.fit`) and the predictions
are the expected class + 1 (:func:`predict_fertilities`).

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

from collections import Counter
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from ..datamodules.batching import pad_rows
from ..datamodules.files import atomic_path
from ..datamodules.translation import TranslationDataModule
from ..models.fertility import FertilityPredictor
from ..run.cache_records import load_record
from .loop import fit


def fertility_targets(
    links: Sequence[Iterable[tuple[int, int]]], source_lengths: Sequence[int], classes: int = 10
) -> list[list[int]]:
    """Per source token, the number of target words it is linked to, capped at ``classes - 1``
    (source-to-target links per sentence, e.g. from
    :func:`lit_structattn.datamodules.alignment.align`). ``ValueError`` if ``links`` and
    ``source_lengths`` differ in length."""
    if len(links) != len(source_lengths):
        raise ValueError(f"{len(links)} link sets but {len(source_lengths)} source lengths")
    targets = []
    for sentence_links, length in zip(links, source_lengths, strict=True):
        counts = Counter(i for i, _ in sentence_links)
        targets.append([min(counts.get(i, 0), classes - 1) for i in range(length)])
    return targets


def fit_fertility_predictor(
    sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], vocab_size: int,
    epochs: int = 5, batch_size: int = 64, lr: float = 1e-3, seed: int = 0, **sizes: int,
) -> FertilityPredictor:
    """Train a :class:`~lit_structattn.models.fertility.FertilityPredictor` (Adam, gradient norm
    5) on source id sequences and their aligner fertility classes (:func:`fertility_targets`)
    through the side models' loop (:func:`~lit_structattn.prepare.loop.fit`: batches of similar
    length in random order, a progress bar); ``sizes`` go to the predictor (``embed_dim``,
    ``hidden_dim``, ...). Returns the model in eval mode. ``ValueError`` if a source and its
    targets differ in length (or the lists do).

    Everything random (initialization, batch order, dropout) follows ``seed`` alone and the
    global random state is left as it was: a run that trains the predictor and one that finds
    it cached continue identically."""
    if len(sources) != len(targets) or any(
            len(s) != len(t) for s, t in zip(sources, targets, strict=True)):
        raise ValueError("every source needs one fertility target per token")
    return fit(lambda: FertilityPredictor(vocab_size, **sizes),
               list(zip(sources, targets, strict=True)),
               lengths=[len(source) for source in sources], collate=_training_batch,
               epochs=epochs, batch_size=batch_size, optimizer=partial(torch.optim.Adam, lr=lr),
               clip_norm=5.0, seed=seed, description="fertility predictor")


def padded_ids(rows: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor]:
    """``rows`` of ids as ``padded [B, S]`` (0 = padding, ``S`` the longest row) and
    ``lengths [B]``."""
    lengths = [len(row) for row in rows]
    return (torch.tensor(pad_rows(rows, max(lengths)), dtype=torch.long),
            torch.tensor(lengths))


def _training_batch(pairs: list[tuple[Sequence[int], Sequence[int]]]) -> dict[str, Tensor]:
    """``(source, targets)`` pairs -> the arguments of ``FertilityPredictor.loss``: ``src``
    ``[B, S]``, ``lengths [B]``, ``targets [B, S]``."""
    sources, targets = zip(*pairs, strict=True)
    src, lengths = padded_ids(sources)
    return {"src": src, "lengths": lengths, "targets": padded_ids(targets)[0]}


def predict_fertilities(
    model: FertilityPredictor, sources: Sequence[Sequence[int]], slack: float = 1.0,
    batch_size: int = 256,
) -> list[list[float]]:
    """The expected fertility plus ``slack`` of every token of every source (input order,
    batches of ``batch_size`` consecutive sources)."""
    result: list[list[float]] = []
    for start in range(0, len(sources), batch_size):
        src, lengths = padded_ids(sources[start : start + batch_size])
        expected = model.expected(src, lengths, slack).tolist()
        result.extend(row[:length] for row, length in zip(expected, lengths.tolist(),
                                                           strict=True))
    return result


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
