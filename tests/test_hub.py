"""Hub data (datamodules/hub.py), offline: each family's DataModule reads a tiny local copy in
the layout and features of the hub's parquet exports, through a local folder or through its hub
name (``datasets.load_dataset`` redirected to that folder), to ``setup()`` and one batch; and
the three ways a hub name fails (script-based, unknown, unreachable / offline) say which."""

from __future__ import annotations

from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")
from datasets import ClassLabel, Dataset, Features, Sequence, Translation, Value  # noqa: E402

from lit_structattn.datamodules import hub  # noqa: E402
from lit_structattn.datamodules.conll_ner import CoNLLNERDataModule  # noqa: E402
from lit_structattn.datamodules.hub import (  # noqa: E402
    PARQUET_EXPORT,
    HubUnavailableError,
    ScriptDatasetError,
    UnknownHubDatasetError,
    load_hub_dataset,
)
from lit_structattn.datamodules.ud_pos import UDPOSDataModule  # noqa: E402
from lit_structattn.datamodules.word_qe import WordQEDataModule  # noqa: E402

HUB_SPLITS = ("train", "validation", "test")
NER_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
UPOS = ["NOUN", "PUNCT", "ADP", "NUM", "SYM", "SCONJ", "ADJ", "PART", "DET", "CCONJ", "PROPN",
        "PRON", "X", "_", "ADV", "INTJ", "VERB", "AUX"]  # the hub's order, "_" = multiword token


@pytest.fixture(autouse=True)
def offline_cache(monkeypatch, tmp_path):
    """No network, no offline variables, and a private ``datasets`` cache."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.setattr(hub, "_check_hub_reachable", lambda: None)


def write_export(root: Path, config: str, features: Features, rows: dict[str, list[dict]]) -> Path:
    """``root/config/<split>/0000.parquet`` per split, as the hub's parquet converter writes."""
    for split, split_rows in rows.items():
        folder = root / config / split
        folder.mkdir(parents=True)
        columns = {name: [row[name] for row in split_rows] for name in features}
        Dataset.from_dict(columns, features=features).to_parquet(str(folder / "0000.parquet"))
    return root


def serve_hub_from(monkeypatch, root: Path, repo: str) -> list[dict]:
    """Make ``datasets.load_dataset(repo, ...)`` read the export under ``root``; returns the
    keyword arguments of every call."""
    real_load = datasets.load_dataset
    calls = []

    def load(path, name=None, **kwargs):
        assert path == repo and name is None
        calls.append(kwargs)
        return real_load(str(root), data_dir=kwargs["data_dir"], split=kwargs["split"])

    monkeypatch.setattr(datasets, "load_dataset", load)
    return calls


def source_for(mode: str, monkeypatch, root: Path, repo: str) -> tuple[str, list[dict]]:
    """The ``hub_name`` to pass: the local folder, or the hub name served from it."""
    if mode == "local":
        return str(root), []
    return repo, serve_hub_from(monkeypatch, root, repo)


def one_batch(module) -> dict:
    """``setup()`` and the first training batch (every split here is a whole number of
    batches, so any batch is full)."""
    module.setup("fit")
    return next(iter(module.train_dataloader()))


def ner_rows(n: int) -> list[dict]:
    return [{"id": str(i), "tokens": ["EU", "rejects", "German", "call", str(i)],
             "ner_tags": [3, 0, 7, 0, 0]} for i in range(n)]


@pytest.mark.parametrize("mode", ["local", "hub"])
def test_conll_ner_hub_branch(monkeypatch, tmp_path, mode):
    features = Features({"id": Value("string"), "tokens": Sequence(Value("string")),
                         "ner_tags": Sequence(ClassLabel(names=NER_TAGS))})
    root = write_export(tmp_path / "export", "conll2003", features,
                        {split: ner_rows(4) for split in HUB_SPLITS})
    name, calls = source_for(mode, monkeypatch, root, "eriktks/conll2003")
    module = CoNLLNERDataModule(hub_name=name, batch_size=2)
    batch = one_batch(module)
    assert batch["words"].shape == (2, 5)
    assert {"B-ORG", "B-MISC", "O"} <= set(module.tag_names)
    assert module.split_sizes == {"train": (4, 20), "val": (4, 20), "test": (4, 20)}
    if mode == "hub":
        assert calls and all(c["revision"] == PARQUET_EXPORT and c["data_dir"] is None
                             for c in calls)


@pytest.mark.parametrize("mode", ["local", "hub"])
def test_ud_pos_hub_branch(monkeypatch, tmp_path, mode):
    features = Features({"idx": Value("string"), "tokens": Sequence(Value("string")),
                         "upos": Sequence(ClassLabel(names=UPOS))})
    rows = [{"idx": "s1", "tokens": ["I", "don't", "do", "n't", "know", "."],
             "upos": [11, 13, 17, 7, 16, 1]}] * 4
    root = write_export(tmp_path / "export", "en_ewt", features,
                        {split: rows for split in HUB_SPLITS})
    name, calls = source_for(mode, monkeypatch, root,
                             "universal-dependencies/universal_dependencies")
    module = UDPOSDataModule(hub_name=name, hub_config="en_ewt", batch_size=2)
    batch = one_batch(module)
    assert batch["words"].shape == (2, 5)  # the multiword token "don't" (tag "_") is dropped
    assert set(module.tag_names) == {"<pad>", "PRON", "AUX", "PART", "VERB", "PUNCT"}
    if mode == "hub":
        assert all(c["revision"] == PARQUET_EXPORT and c["data_dir"] == "en_ewt" for c in calls)


@pytest.mark.parametrize("mode", ["local", "hub"])
def test_word_qe_hub_branch(monkeypatch, tmp_path, mode):
    features = Features({
        "translation": Translation(languages=["en", "de"]),
        "src_tags": Sequence(ClassLabel(names=["BAD", "OK"])),
        "mt_tags": Sequence(ClassLabel(names=["BAD", "OK"])),
        "pe": Value("string"), "hter": Value("float32"),
        "alignments": Sequence(Sequence(Value("int32"))),
    })
    row = {"translation": {"en": "the house is small", "de": "das Haus ist klein"},
           "src_tags": [1, 1, 0, 1], "mt_tags": [1, 1, 1, 0, 1, 1, 1, 1, 1],  # 2N+1, gaps
           "pe": "das Haus ist klein", "hter": 0.25,
           "alignments": [[0, 0], [1, 1], [2, 2], [3, 3]]}
    no_tags = dict(row, src_tags=[], mt_tags=[])  # the hub's test split has no tags
    root = write_export(tmp_path / "export", "en-de", features,
                        {"train": [row] * 4, "validation": [row] * 2, "test": [no_tags] * 2})
    name, calls = source_for(mode, monkeypatch, root, "wmt/wmt20_mlqe_task2")
    module = WordQEDataModule(hub_name=name, hub_config="en-de", batch_size=2)
    with pytest.warns(UserWarning, match="test split serves the validation data"):
        batch = one_batch(module)
    assert module.test_is_val and batch["tags"].shape == (2, 4)
    tag_of = dict(zip(module.tag_names, range(len(module.tag_names)), strict=True))
    assert batch["tags"][0].tolist() == [tag_of[t] for t in ("OK", "BAD", "OK", "OK")]
    assert batch["source"].shape == (2, 4)
    if mode == "hub":
        assert all(c["revision"] == PARQUET_EXPORT and c["data_dir"] == "en-de" for c in calls)


@pytest.mark.parametrize("mode", ["local", "hub"])
def test_translation_hub_branch(monkeypatch, tmp_path, mode):
    pytest.importorskip("sentencepiece")
    pytest.importorskip("sacremoses")
    from lit_structattn.datamodules.translation import TranslationDataModule

    features = Features({"translation": Translation(languages=["de", "en"])})
    rows = [{"translation": {"de": f"Der Hund {i} läuft.", "en": f"The dog {i} runs."}}
            for i in range(30)]
    root = write_export(tmp_path / "export", "iwslt2017-de-en", features,
                        {"train": rows, "validation": rows[:3], "test": rows[3:5]})
    name, calls = source_for(mode, monkeypatch, root, "IWSLT/iwslt2017")
    module = TranslationDataModule(hub_name=name, hub_config="iwslt2017-de-en", bpe_size=40,
                                   batch_size=4, cache_dir=str(tmp_path / "bpe"))
    batch = one_batch(module)
    assert batch["src"].shape[0] == 4
    assert module.datasets["val"].pairs[0] == ("Der Hund 0 läuft.", "The dog 0 runs.")
    if mode == "hub":
        assert all(c["revision"] == PARQUET_EXPORT and c["data_dir"] == "iwslt2017-de-en"
                   for c in calls)


# ----------------------------------------------------------------------------- failures


def failing_load(monkeypatch, error: Exception) -> None:
    """``datasets.load_dataset`` raises ``error``, as it does without network access."""
    def load(*args, **kwargs):
        raise error

    monkeypatch.setattr(datasets, "load_dataset", load)


def test_a_script_name_says_so_and_names_its_parquet_copy(monkeypatch):
    # datasets >= 4, datasets/load.py: dataset_module_factory on a repository with a script
    failing_load(monkeypatch, RuntimeError(
        "Dataset scripts are no longer supported, but found conll2003.py"))
    with pytest.raises(ScriptDatasetError) as error:
        CoNLLNERDataModule(hub_name="conll2003").setup()
    message = str(error.value)
    assert message.startswith("'conll2003' is a loading-script dataset, which datasets >= 4 "
                              "cannot load")
    assert "use 'eriktks/conll2003'" in message and "data_dir=" in message
    assert "unreachable" not in message


def test_a_script_name_without_a_copy_says_none_is_known(monkeypatch):
    failing_load(monkeypatch, RuntimeError(
        "Dataset scripts are no longer supported, but found old_corpus.py"))
    with pytest.raises(ScriptDatasetError, match="no parquet copy of it is known here; use "
                       "local files: data_dir=<x>"):
        load_hub_dataset("someone/old_corpus", None, "train", "data_dir=<x>")


def test_an_unknown_name_says_so(monkeypatch):
    from datasets.exceptions import DatasetNotFoundError

    failing_load(monkeypatch, DatasetNotFoundError(
        "Dataset 'nobody/nothing' doesn't exist on the Hub or cannot be accessed."))
    with pytest.raises(UnknownHubDatasetError, match="the hub has no such dataset.*"
                       "eriktks/conll2003.*data_dir="):
        UDPOSDataModule(hub_name="nobody/nothing").setup()


def test_an_unreachable_hub_says_so(monkeypatch):
    failing_load(monkeypatch, ConnectionError(
        "Couldn't reach 'eriktks/conll2003' on the Hub (ConnectError)"))
    with pytest.raises(HubUnavailableError, match="the hub is unreachable.*data_dir=") as error:
        CoNLLNERDataModule(hub_name="eriktks/conll2003").setup()
    assert type(error.value) is HubUnavailableError


def test_offline_mode_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    failing_load(monkeypatch, ConnectionError(
        "Couldn't reach the Hugging Face Hub for dataset 'IWSLT/iwslt2017': offline"))
    with pytest.raises(HubUnavailableError, match="offline mode is on.*not in the local cache"):
        load_hub_dataset("IWSLT/iwslt2017", "iwslt2017-de-en", "train", "data_dir=<x>")


def test_a_probe_that_fails_says_unreachable_before_loading(monkeypatch):
    monkeypatch.setattr(hub, "_check_hub_reachable", lambda: "https://hub is unreachable (x)")
    failing_load(monkeypatch, AssertionError("load_dataset must not be called"))
    with pytest.raises(HubUnavailableError, match="unreachable.*data_dir=<x>"):
        load_hub_dataset("eriktks/conll2003", None, "train", "data_dir=<x>")


def test_other_names_go_to_load_dataset_unchanged(monkeypatch):
    calls = []
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda *args, **kwargs: calls.append((args, kwargs)) or "rows")
    assert load_hub_dataset("stanfordnlp/snli", "plain_text", "train", "") == "rows"
    assert calls == [(("stanfordnlp/snli", "plain_text"), {"split": "train"})]
