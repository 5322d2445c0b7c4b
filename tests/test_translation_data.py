"""The translation DataModule: reading line-aligned files, the cached joint BPE model, batches,
detokenization and bad input; on a generated corpus, and on Multi30k when it is present."""

from __future__ import annotations

import sys

import pytest
import torch

from lit_structattn.common.constants import BOS_ID, EOS_ID, PAD_ID
from lit_structattn.datamodules.files import MalformedLine, data_root
from lit_structattn.datamodules.subwords import SINK_ID, UNK_ID, Subwords
from lit_structattn.datamodules.translation import TranslationDataModule

from .translation_corpus import write_corpus


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
    assert len(next(iter(dm.val_dataloader()))["src"]) == 16
    wide = ready_module(corpus, tmp_path / "cache", eval_batch_size=25)
    assert [len(b["src"]) for b in wide.test_dataloader()] == [25, 15]
    assert len(next(iter(wide.train_dataloader()))["src"]) == 16
    assert wide.vocab is wide.subwords
    assert (batch["tgt_in"][:, 0] == BOS_ID).all()
    ends = batch["tgt_lengths"] - 1
    assert (batch["tgt_out"][torch.arange(rows), ends] == EOS_ID).all()
    positions = torch.arange(batch["src"].shape[1])
    assert (batch["src"][positions[None] >= batch["src_lengths"][:, None]] == PAD_ID).all()
    dataset = dm.datasets["test"]
    for (src, tgt, _, _), (de, en) in zip(dataset.items, dataset.pairs, strict=True):
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
    for src, _, index, _ in dm.datasets["val"].items:
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


def test_prepare_data_fills_the_cache_that_the_other_ranks_read(tmp_path, monkeypatch):
    """Under DDP, Lightning runs ``prepare_data`` in one process before every rank's ``setup``:
    it writes the BPE model and links whole (no scratch file left; no model: the data trains
    none), and a rank's ``setup`` then computes nothing again."""
    corpus, cache = tmp_path / "corpus", tmp_path / "cache"
    write_corpus(corpus)
    first = make_module(corpus, cache, fertility_strategy="predicted")
    first.prepare_data()
    datasets = dict(first.datasets)
    first.setup("fit")  # the process that prepared the data does not build the splits again
    assert first.datasets == datasets
    assert sorted(path.suffix for path in cache.iterdir()) == [".links", ".model", ".vocab"]

    def trains(*args, **kwargs):
        raise AssertionError("setup after prepare_data must read the cache")

    monkeypatch.setattr(Subwords, "train", trains)
    monkeypatch.setattr("lit_structattn.datamodules.alignment.align", trains)
    rank = ready_module(corpus, cache, fertility_strategy="predicted")
    assert rank.datasets["test"].items == first.datasets["test"].items
    assert rank.training_links == first.training_links


def test_character_sources_spell_the_subwords(tmp_path):
    """``source_units="characters"``: the source is the characters of its subwords (single-
    character pieces of the same vocabulary, ``▁`` at word starts), the target stays subwords,
    and ``max_source_length`` filters the (longer) character sources of the training pairs."""
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    words = ready_module(corpus, tmp_path / "cache", sink=True)
    chars = ready_module(corpus, tmp_path / "cache", sink=True, source_units="characters",
                         max_source_length=200)
    assert chars.subwords.model_file == words.subwords.model_file
    piece = chars.subwords.processor.id_to_piece
    for (src, tgt, _, _), (sub, word_tgt, _, _) in zip(chars.datasets["test"].items,
                                                        words.datasets["test"].items,
                                                        strict=True):
        assert tgt == word_tgt and src[-1] == SINK_ID
        assert all(len(piece(i)) == 1 for i in src[:-1])
        assert "".join(piece(i) for i in src[:-1]) == "".join(piece(i) for i in sub[:-1])
        assert len(src) > len(sub)
    longest = max(len(s) for s, _, _, _ in chars.datasets["train"].items)
    cut = ready_module(corpus, tmp_path / "cache", source_units="characters",
                       max_source_length=longest - 2)
    assert 0 < cut.dropped_train
    with pytest.raises(ValueError, match="valid: subwords, characters"):
        TranslationDataModule(source_units="bytes")
    with pytest.raises(ValueError, match="needs subword sources"):
        TranslationDataModule(source_units="characters", fertility_strategy="guided")


def test_word_targets_round_trip_and_unknown_words(tmp_path):
    """``target_units="words"``: targets are ids of the most frequent training Moses tokens,
    rarer ones ``<unk>``; in-vocabulary references detokenize back to themselves."""
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    dm = ready_module(corpus, tmp_path / "cache", target_units="words", word_vocab_size=500,
                      source_units="characters", max_source_length=300)
    words = dm.subwords.target_words
    assert dm.subwords.target_size == len(words) < 500  # the tiny corpus has few words
    for _, tgt, index, _ in dm.datasets["test"].items:
        assert UNK_ID not in tgt
        assert dm.detokenize(tgt) == dm.datasets["test"].pairs[index][1]
    assert dm.subwords.target_pieces(dm.subwords.encode_target("The dog runs.")) == [
        "The", "dog", "runs", "."]
    small = ready_module(corpus, tmp_path / "cache", target_units="words", word_vocab_size=8)
    assert len(small.subwords.target_words) == 8
    # the most frequent tokens: "in" and "the" of every "in the park", ties in order of appearance
    assert small.subwords.target_words.tokens[4:6] == ["in", "the"]
    assert UNK_ID in small.datasets["train"].items[0][1]
    with pytest.raises(ValueError, match="valid: subwords, words"):
        TranslationDataModule(target_units="characters")
    with pytest.raises(ValueError, match="needs subword sources and targets"):
        TranslationDataModule(target_units="words", fertility_strategy="predicted")


def test_max_length_drops_long_training_pairs_only(tmp_path):
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    full = ready_module(corpus, tmp_path / "cache", max_length=None)
    longest = max(max(len(s), len(t)) for s, t, _, _ in full.datasets["train"].items)
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
    with pytest.raises(ValueError, match="valid: constant, guided, predicted"):
        TranslationDataModule(fertility_strategy="actual")


def test_guided_fertilities_follow_the_aligner_and_are_cached(tmp_path, monkeypatch):
    """GUIDED: per source subword type, the most target subwords one token was linked to; the
    links are computed once; the sink gets a placeholder (the model makes it unbounded)."""
    corpus, cache = tmp_path / "corpus", tmp_path / "cache"
    write_corpus(corpus)
    dm = ready_module(corpus, cache, fertility_strategy="guided", sink=True)
    (links_file,) = cache.glob("*.links")
    links = [{tuple(map(int, link.split("-"))) for link in line.split()}
             for line in links_file.read_text().splitlines()]
    assert len(links) == 300 and sum(map(len, links)) > 300 * 5  # a real alignment
    most: dict[str, int] = {}
    for (src, _, _, _), sentence in zip(dm.datasets["train"].items, links, strict=True):
        pieces = dm.subwords.pieces(src[:-1])
        for i, piece in enumerate(pieces):
            count = sum(1 for a, _ in sentence if a == i)
            most[piece] = max(most.get(piece, 1), count)
    for src, _, _, fertility in dm.datasets["test"].items:
        assert len(fertility) == len(src) and fertility[-1] == 1.0
        assert fertility[:-1] == [float(most.get(p, 1)) for p in dm.subwords.pieces(src[:-1])]
    batch = next(iter(dm.val_dataloader()))
    first = dm.datasets["val"].items[int(batch["index"][0])]
    assert batch["fertility"].shape == batch["src"].shape
    assert batch["fertility"][0, : len(first[3])].tolist() == first[3]
    assert (batch["fertility"][batch["src"] == PAD_ID] == 0).all()

    def no_aligner(*args, **kwargs):
        raise AssertionError("the links are cached")

    monkeypatch.setattr("lit_structattn.datamodules.alignment.align", no_aligner)
    again = ready_module(corpus, cache, fertility_strategy="guided", sink=True)
    assert again.datasets["test"].items == dm.datasets["test"].items


def test_predicted_fertilities_are_given_back_by_the_application(tmp_path):
    """``predicted``: the data provides the training sources and their links, refuses batches
    until the fertilities are given, and gives the sink its placeholder."""
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    dm = ready_module(corpus, tmp_path / "cache", fertility_strategy="predicted", sink=True)
    assert dm.awaits_fertilities
    with pytest.raises(RuntimeError, match="fertilities are not given yet"):
        dm.train_dataloader()
    sources, links = dm.fertility_training_data()
    assert sources == [src[:-1] for src, _, _, _ in dm.datasets["train"].items]
    assert len(links) == len(sources) == 300 and all(links)
    given = {split: [[2.5] * len(s) for s in dm.source_ids(split)] for split in dm.datasets}
    with pytest.raises(ValueError, match="split 'test' needs one fertility per source"):
        dm.set_fertilities({**given, "test": given["test"][1:]})
    assert dm.awaits_fertilities  # a refused set changes nothing
    dm.set_fertilities(given)
    assert not dm.awaits_fertilities
    batch = next(iter(dm.val_dataloader()))
    ends = batch["src_lengths"] - 1
    assert (batch["fertility"][torch.arange(len(ends)), ends] == 1.0).all()  # the sink
    words = (batch["src"] != PAD_ID) & (batch["src"] != SINK_ID)
    assert ((batch["fertility"] == 2.5) == words).all()
    guided = ready_module(corpus, tmp_path / "cache", fertility_strategy="guided")
    with pytest.raises(RuntimeError, match="needs fertility_strategy='predicted'"):
        guided.fertility_training_data()
    with pytest.raises(RuntimeError, match="needs fertility_strategy='predicted'"):
        guided.set_fertilities(given)


MULTI30K = data_root() / "multi30k_en_de"


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="../shared/data/multi30k_en_de is absent")
def test_multi30k_splits_and_detokenization(tmp_path):
    dm = TranslationDataModule(cache_dir=str(tmp_path), bpe_size=8000, max_length=None)
    dm.setup()
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 29000, "val": 1014,
                                                           "test": 1000}
    assert len(dm.subwords) == 8000
    test = dm.datasets["test"]
    same = sum(dm.detokenize(t) == en for (_, t, _, _), (_, en) in zip(test.items, test.pairs,
                                                                     strict=True))
    assert same >= 0.99 * len(test)  # Moses detokenization restores almost every reference


def test_hub_rows_become_pairs(monkeypatch, tmp_path):
    """Both hub layouts (a ``translation`` dict, one column per language) give text pairs."""
    rows = {"train": [{"translation": {"de": f"Der Hund {i} läuft.", "en": f"The dog {i} runs."}}
                      for i in range(30)],
            "validation": [{"de": "Die Katze schläft.", "en": "The cat sleeps."}],
            "test": [{"de": " Ein Kind. ", "en": "A child."}, {"de": "", "en": "x"}]}
    monkeypatch.setattr("lit_structattn.datamodules.translation.load_hub_dataset",
                        lambda name, config, split, hint: rows[split])
    dm = TranslationDataModule(hub_name="some/corpus", bpe_size=40, cache_dir=str(tmp_path))
    dm.setup()
    assert dm.datasets["test"].pairs == [("Ein Kind.", "A child.")]
    assert dm.datasets["val"].pairs == [("Die Katze schläft.", "The cat sleeps.")]
    assert len(dm.datasets["train"]) == 30 and len(list(tmp_path.glob("*.model"))) == 1


@pytest.mark.parametrize(("missing", "strategy"), [("sentencepiece", "constant"),
                                                   ("sacremoses", "constant"),
                                                   ("eflomal", "guided")])
def test_a_missing_translation_extra_is_named(monkeypatch, missing, strategy):
    """Translation's tokenizers and aligner come with the ``translation`` extra: without one,
    the DataModule says which extra to install before it reads any data."""
    monkeypatch.setitem(sys.modules, missing, None)  # import fails as if not installed
    with pytest.raises(ImportError, match=rf"{missing} is not installed: it comes with the "
                       r"'translation' extra, pip install 'lit_structattn\[translation\]'"):
        TranslationDataModule(data_dir="/nonexistent", fertility_strategy=strategy)
