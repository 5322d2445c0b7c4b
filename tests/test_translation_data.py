"""The translation DataModule: reading line-aligned files, the cached joint BPE model, batches,
detokenization and bad input; on a generated corpus, and on Multi30k when it is present."""

from __future__ import annotations

import gzip
import random

import pytest
import torch

from datamodules.files import MalformedLine, data_root
from datamodules.translation import BOS_ID, EOS_ID, PAD_ID, SINK_ID, TranslationDataModule

NOUNS = {"Hund": "dog", "Katze": "cat", "Mann": "man", "Frau": "woman", "Kind": "child"}
VERBS = {"läuft": "runs", "schläft": "sleeps", "spielt": "plays", "isst": "eats"}


def write_corpus(folder, pairs_per_split=(300, 40, 40), gz=True, seed=0):
    """A tiny German-English corpus of 'Der X Y im Park.' sentences in ``folder`` (created)."""
    folder.mkdir(exist_ok=True)
    rng = random.Random(seed)
    for prefix, count in zip(("train", "val", "test"), pairs_per_split, strict=True):
        de, en = [], []
        for _ in range(count):
            noun, verb = rng.choice(list(NOUNS)), rng.choice(list(VERBS))
            repeat = rng.randint(1, 3)
            de.append(f"Der {noun} {verb} " + "und " .join(["im Park"] * repeat) + ".")
            en.append(f"The {NOUNS[noun]} {VERBS[verb]} " + "and ".join(["in the park"] * repeat)
                      + ".")
        for lang, lines in (("de", de), ("en", en)):
            text = "\n".join(lines) + "\n"
            if gz:
                with gzip.open(folder / f"{prefix}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.write(text)
            else:
                (folder / f"{prefix}.{lang}").write_text(text, encoding="utf-8")


def make_module(folder, cache, **kwargs):
    defaults = dict(data_dir=str(folder), prefixes=("train", "val", "test"), bpe_size=60,
                    batch_size=16, cache_dir=str(cache))
    return TranslationDataModule(**{**defaults, **kwargs})


def ready_module(folder, cache, **kwargs):
    """:func:`make_module` after :meth:`setup`."""
    dm = make_module(folder, cache, **kwargs)
    dm.setup()
    return dm


@pytest.mark.parametrize("gz", [True, False])
def test_generated_corpus_batches_and_round_trip(tmp_path, gz):
    corpus = tmp_path / "corpus"
    write_corpus(corpus, gz=gz)
    dm = ready_module(corpus, tmp_path / "cache")
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 300, "val": 40, "test": 40}
    batch = next(iter(dm.train_dataloader()))
    rows = len(batch["src"])
    assert rows == 16 and batch["tgt_in"].shape == batch["tgt_out"].shape
    assert (batch["tgt_in"][:, 0] == BOS_ID).all()
    ends = batch["tgt_lengths"] - 1
    assert (batch["tgt_out"][torch.arange(rows), ends] == EOS_ID).all()
    positions = torch.arange(batch["src"].shape[1])
    assert (batch["src"][positions[None] >= batch["src_lengths"][:, None]] == PAD_ID).all()
    dataset = dm.datasets["test"]
    for (src, tgt, _), (de, en) in zip(dataset.items, dataset.pairs, strict=True):
        assert dm.detokenize(tgt) == en
        assert dm.subwords.decode(src, "de") == de
    assert dm.detokenize([*dataset.items[0][1], EOS_ID, 7, 7]) == dataset.pairs[0][1]


def test_sink_token_ends_every_source(tmp_path):
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    dm = ready_module(corpus, tmp_path / "cache", sink=True)
    assert dm.subwords.processor.id_to_piece(SINK_ID) == "<sink>"
    batch = next(iter(dm.val_dataloader()))
    ends = batch["src"][torch.arange(len(batch["src"])), batch["src_lengths"] - 1]
    assert (ends == SINK_ID).all()
    for src, _, index in dm.datasets["val"].items:
        assert src.count(SINK_ID) == 1
        assert dm.subwords.decode(src, "de") == dm.datasets["val"].pairs[index][0]


def test_bpe_model_is_trained_once_and_cached(tmp_path):
    corpus, cache = tmp_path / "corpus", tmp_path / "cache"
    write_corpus(corpus)
    ready_module(corpus, cache)
    (model,) = cache.glob("*.model")
    stamp = model.stat().st_mtime_ns
    dm = ready_module(corpus, cache)
    assert dm.subwords.model_file == model and model.stat().st_mtime_ns == stamp
    make_module(corpus, cache, bpe_size=70).setup()  # another size is another model
    assert len(list(cache.glob("*.model"))) == 2


def test_max_length_drops_long_training_pairs_only(tmp_path):
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    full = ready_module(corpus, tmp_path / "cache", max_length=None)
    longest = max(max(len(s), len(t)) for s, t, _ in full.datasets["train"].items)
    cut = ready_module(corpus, tmp_path / "cache", max_length=longest - 1)
    assert 0 < cut.dropped_train == 300 - len(cut.datasets["train"])
    assert len(cut.datasets["test"]) == len(full.datasets["test"]) == 40


def test_misaligned_and_missing_files(tmp_path):
    corpus = tmp_path / "corpus"
    write_corpus(corpus, gz=False)
    original = (corpus / "val.en").read_text()
    lines = original.splitlines()
    (corpus / "val.en").write_text("\n".join(lines[:-2]) + "\n")
    with pytest.raises(MalformedLine, match=r"val\.en:39: missing: val\.de has 40 lines"):
        make_module(corpus, tmp_path / "cache").setup()
    lines[4] = ""
    (corpus / "val.en").write_text("\n".join(lines) + "\n")
    with pytest.raises(MalformedLine, match=r"val\.en:5: empty line opposite"):
        make_module(corpus, tmp_path / "cache").setup()
    (corpus / "val.en").write_text(original)
    (corpus / "test.de").unlink()
    with pytest.raises(FileNotFoundError, match=r"lacks test\.de\[\.gz\]; expected train\."):
        make_module(corpus, tmp_path / "cache").setup()


def test_bad_arguments():
    with pytest.raises(ValueError, match="bpe_size"):
        TranslationDataModule(bpe_size=0)
    with pytest.raises(ValueError, match="max_length"):
        TranslationDataModule(max_length=0)
    with pytest.raises(ValueError, match="prefixes"):
        TranslationDataModule(prefixes=("train", "val"))


MULTI30K = data_root() / "multi30k_en_de"


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="../shared/data/multi30k_en_de is absent")
def test_multi30k_splits_and_detokenization(tmp_path):
    dm = TranslationDataModule(cache_dir=str(tmp_path), bpe_size=8000, max_length=None)
    dm.setup()
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 29000, "val": 1014,
                                                           "test": 1000}
    assert len(dm.subwords) == 8000
    test = dm.datasets["test"]
    same = sum(dm.detokenize(t) == en for (_, t, _), (_, en) in zip(test.items, test.pairs,
                                                                     strict=True))
    assert same >= 0.99 * len(test)  # Moses detokenization restores almost every reference
