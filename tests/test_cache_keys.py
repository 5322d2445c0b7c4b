"""Caches keyed by everything they depend on, read as data (issue 44, item 2): the NLI
supervised parser (the treebank's bytes and every training option), eflomal's links and the
fertility predictor (the filtered training split, the aligner's iterations, the epochs); a
links file of the wrong length and a cache file that holds code or another key are refused.
All on tiny generated data (a three-file treebank, a generated parallel corpus)."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest
import torch

from lit_structattn.datamodules.alignment import cached_links
from lit_structattn.datamodules.files import MalformedLine
from lit_structattn.datamodules.translation import TranslationDataModule
from lit_structattn.prepare import parser as parser_training
from lit_structattn.prepare.fertility import (
    give_predicted_fertilities,
    load_fertility_predictor,
    predictor_file,
    predictor_key,
)
from lit_structattn.prepare.parser import (
    EWT_FILES,
    build_parser,
    cached_parser,
    parser_path,
    parser_settings,
    prepare_parser,
)

from .translation_corpus import write_corpus

SENTENCES = [  # (words, heads)
    (["the", "dog", "sees", "a", "cat"], [2, 3, 0, 5, 3]),
    (["a", "cat", "sees", "the", "dog"], [2, 3, 0, 5, 3]),
    (["the", "dog", "sleeps"], [2, 3, 0]),
]


def write_treebank(root: Path, verb: str = "sees") -> Path:
    """A tiny UD English-EWT (gzip CoNLL-U train, dev and test of :data:`SENTENCES`, ``verb``
    for ``sees``) in ``root/ud_english_ewt``; returns ``root``, a data root."""
    folder = root / "ud_english_ewt"
    folder.mkdir(parents=True)
    lines = []
    for words, heads in SENTENCES:
        for i, (word, head) in enumerate(zip(words, heads, strict=True), start=1):
            form = verb if word == "sees" else word
            lines.append(f"{i}\t{form}\t{form}\tX\t_\t_\t{head}\tdep\t_\t_")
        lines.append("")
    for name in EWT_FILES.values():
        with gzip.open(folder / name, "wt", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
    return root


def cache_parser(record: dict, settings: dict) -> Path:
    """Store ``record`` (``state_dict``, ``vocab``, ``uas``) as the cached parser of
    ``settings`` (:func:`~lit_structattn.prepare.parser.parser_settings`), as
    :func:`~lit_structattn.prepare.parser.prepare_parser` would; returns its file."""
    path = parser_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({**record, "key": settings}, path)
    return path


class WritesMarker:
    """Pickled, it makes ``torch.load(weights_only=False)`` create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def treebank(tmp_path, monkeypatch) -> Path:
    """A tiny treebank as the data root and an empty cache, both in ``tmp_path``."""
    monkeypatch.setenv("STRUCTATTN_CACHE", str(tmp_path / "cache"))
    root = write_treebank(tmp_path / "data")
    monkeypatch.setenv("STRUCTATTN_DATA", str(root))
    return root


# ----------------------------------------------------------------------------- the parser


def test_parser_cache_is_keyed_by_the_treebank_content_and_every_option(treebank, tmp_path,
                                                                         monkeypatch):
    settings = parser_settings(1, 6, 4)
    path = parser_path(settings)
    assert path == parser_path(parser_settings(1, 6, 4))  # the same inputs: the same file
    assert path.name.startswith("ewt_e1_d6_h4_s0_") and len(path.stem.split("_")[-1]) == 12
    others = {parser_path(parser_settings(1, 6, 4, **{name: value}))
              for name, value in [("seed", 1), ("batch_size", 16), ("lr", 0.02),
                                  ("dropout", 0.1), ("max_length", 20)]}
    others |= {parser_path(parser_settings(2, 6, 4)), parser_path(parser_settings(1, 8, 4)),
               parser_path(parser_settings(1, 6, 5))}
    assert path not in others and len(others) == 8
    copy = tmp_path / "elsewhere"  # the same files in another data folder: the same parser
    shutil.copytree(treebank, copy)
    monkeypatch.setenv("STRUCTATTN_DATA", str(copy))
    assert parser_path(parser_settings(1, 6, 4)) == path
    monkeypatch.setenv("STRUCTATTN_DATA", str(write_treebank(tmp_path / "changed", "likes")))
    assert parser_path(parser_settings(1, 6, 4)) != path  # one word changed: another parser


def test_a_changed_treebank_trains_a_new_parser(treebank, tmp_path, monkeypatch):
    """Really trained (one epoch on three sentences): the record reads back as plain data and
    builds the parser; the same treebank reuses it, a changed one trains again."""
    trained = []
    train = parser_training.train_parser

    def counted(settings, log=print):
        trained.append(settings["treebank"])
        return train(settings, log=lambda message: None)

    monkeypatch.setattr(parser_training, "train_parser", counted)
    first = prepare_parser(parser_settings(1, 6, 4), log=lambda message: None)
    parser, vocab = build_parser(cached_parser(parser_settings(1, 6, 4)))
    assert parser.embedding.embedding_dim == 6 and "dog" in vocab.tokens
    assert prepare_parser(parser_settings(1, 6, 4)) == first and len(trained) == 1
    monkeypatch.setenv("STRUCTATTN_DATA", str(write_treebank(tmp_path / "changed", "likes")))
    second = prepare_parser(parser_settings(1, 6, 4), log=lambda message: None)
    assert second != first and second.is_file() and len(set(trained)) == 2
    vocab = cached_parser(parser_settings(1, 6, 4))["vocab"]
    assert "likes" in vocab and "sees" not in vocab


def test_a_parser_cache_that_holds_code_is_refused_and_runs_nothing(treebank, tmp_path):
    settings = parser_settings(1, 6, 4)
    marker = tmp_path / "marker"
    path = cache_parser({"state_dict": {}, "vocab": ["<pad>"], "uas": WritesMarker(marker)},
                        settings)
    with pytest.raises(ValueError) as refused:
        cached_parser(settings)
    message = str(refused.value)
    assert message.startswith(f"{path}: refused") and "posix.system" in message
    assert message.endswith("delete it to recompute it")
    assert "\n" not in message
    assert not marker.exists()


def test_fit_with_a_parser_cache_that_holds_code_exits_2_with_one_line(treebank, tmp_path,
                                                                       capsys):
    from lit_structattn.cli import command as cli
    from tests.test_nli_cli import tiny

    marker = tmp_path / "marker"
    path = cache_parser({"state_dict": {}, "vocab": ["<pad>"], "uas": WritesMarker(marker)},
                        parser_settings(1, 6, 4))
    with pytest.raises(SystemExit) as exited:
        cli.main(["fit", *tiny(tmp_path, "pretrained_structured", "--trainer.logger", "false",
                               "--trainer.callbacks", "null",
                               "--trainer.enable_checkpointing", "false")])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"structattn: error: {path}: refused: the checkpoint holds Python objects" in error
    assert "Traceback" not in error
    assert not marker.exists()


def test_a_parser_cache_with_another_key_is_refused(treebank):
    settings = parser_settings(1, 6, 4)
    path = parser_path(settings)
    cache_parser({"state_dict": {}, "vocab": ["<pad>"], "uas": {}}, parser_settings(1, 6, 4, 1))
    parser_path(parser_settings(1, 6, 4, 1)).replace(path)  # another parser under this name
    with pytest.raises(ValueError, match="computed from other data or settings"):
        cached_parser(settings)
    torch.save({"state_dict": {}, "vocab": [], "uas": {}}, path)  # no key at all
    with pytest.raises(ValueError, match=f"{path}: refused.*its key is None"):
        cached_parser(settings)


def test_a_parser_cache_that_is_not_a_torch_file_is_one_line(treebank):
    settings = parser_settings(1, 6, 4)
    path = parser_path(settings)
    path.parent.mkdir(parents=True)
    path.write_text("hello")
    with pytest.raises(ValueError, match=f"{path}: not a checkpoint") as refused:
        cached_parser(settings)
    assert "\n" not in str(refused.value)


# ----------------------------------------------------------------------------- links


def test_a_links_file_of_the_wrong_length_is_an_error_not_a_cut(tmp_path):
    pairs = [(["a", "b"], ["x"]), (["c"], ["y", "z"])]
    path = tmp_path / "it5.links"
    path.write_text("0-0 1-0\n0-0 0-1\n")
    assert cached_links(path, pairs) == [{(0, 0), (1, 0)}, {(0, 0), (0, 1)}]
    path.write_text("0-0 1-0\n0-0 0-1\n0-0\n")
    with pytest.raises(ValueError, match=f"{path}: 3 lines of links for 2 sentence pairs"):
        cached_links(path, pairs)
    path.write_text("0-0 1-0\n")
    with pytest.raises(ValueError, match=f"{path}: 1 lines of links for 2 sentence pairs"):
        cached_links(path, pairs)
    path.write_text("0-0 1-0\n0-0 zero-1\n")
    with pytest.raises(MalformedLine, match=f"{path}:2: expected links 'i-j'"):
        cached_links(path, pairs)


def translation_data(corpus: Path, cache: Path, **options) -> TranslationDataModule:
    """The set-up translation data of ``corpus`` (BPE model in ``cache``)."""
    data = TranslationDataModule(data_dir=str(corpus), prefixes=("train", "val", "test"),
                                 bpe_size=60, cache_dir=str(cache), **options)
    data.setup()
    return data


def source_lengths(data: TranslationDataModule) -> list[int]:
    """The subword count of every training source (no sink), as the length filter sees it."""
    return sorted(len(s) for s in data.source_ids("train"))


def test_derived_files_follow_the_filtered_training_split(tmp_path):
    """max_length, max_source_length, sink and the data each change the training split the
    links and the predictor are computed on, hence their file; the same inputs (the same
    files in another folder included) give the same file."""
    corpus, cache = tmp_path / "corpus", tmp_path / "cache"
    write_corpus(corpus, (60, 5, 5))
    full = translation_data(corpus, cache, max_length=None)
    file = full.derived_file("itNone.links")
    assert file == translation_data(corpus, cache, max_length=None).derived_file("itNone.links")
    assert file.name.startswith(f"{full.subwords.model_file.stem}.train-")
    lengths = source_lengths(full)
    middle = lengths[len(lengths) // 2]
    assert lengths[0] < middle < lengths[-1]
    cut = translation_data(corpus, cache, max_length=None, max_source_length=middle)
    with_sink = translation_data(corpus, cache, max_length=None, max_source_length=middle,
                                 sink=True)  # the sink counts: sources of `middle` dropped
    shorter = translation_data(corpus, cache, max_length=middle)
    assert len({file, *(d.derived_file("itNone.links") for d in (cut, with_sink, shorter))}) == 4
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    assert translation_data(copy, cache, max_length=None).derived_file("itNone.links") == file
    write_corpus(tmp_path / "other", (60, 5, 5), seed=1)
    other = translation_data(tmp_path / "other", cache, max_length=None)
    assert other.derived_file("itNone.links") != file


def test_guided_links_are_aligned_again_for_another_max_source_length(tmp_path):
    corpus, cache = tmp_path / "corpus", tmp_path / "cache"
    write_corpus(corpus, (60, 5, 5))
    full = translation_data(corpus, cache, max_length=None, fertility_strategy="guided")
    lengths = source_lengths(full)
    cut = translation_data(corpus, cache, max_length=None, max_source_length=lengths[30],
                           fertility_strategy="guided")
    assert len(cut.training_links) < len(full.training_links) == 60
    assert sorted(len(path.read_text().splitlines()) for path in cache.glob("*.links")) == [
        len(cut.training_links), 60]


def test_the_predictor_cache_is_keyed_and_read_as_data(tmp_path, monkeypatch):
    """The predictor's file follows the epochs and the split; a file with another key, or one
    that holds code, is refused (and the code does not run)."""
    monkeypatch.setattr("lit_structattn.prepare.fertility.fit_fertility_predictor",
                        lambda *args, **kwargs: pytest.fail("a refused cache must not retrain"))
    corpus, cache = tmp_path / "corpus", tmp_path / "cache"
    write_corpus(corpus, (60, 5, 5))
    data = translation_data(corpus, cache, max_length=None, fertility_strategy="predicted",
                            sink=True)
    cut = translation_data(corpus, cache, max_length=None, fertility_strategy="predicted",
                           max_source_length=source_lengths(data)[30], sink=True)
    path = predictor_file(data, 1)
    assert len({path, predictor_file(data, 2), predictor_file(cut, 1)}) == 3
    torch.save({"key": predictor_key(cut, 1), "weights": {}}, path)
    with pytest.raises(ValueError, match=f"{path}: refused, it was computed from other data"):
        give_predicted_fertilities(data, epochs=1)
    marker = tmp_path / "marker"
    torch.save({"key": predictor_key(data, 1), "weights": WritesMarker(marker)}, path)
    with pytest.raises(ValueError, match=f"{path}: refused: .* Python objects"):
        load_fertility_predictor(data, 1)
    assert not marker.exists()
