"""Tagging DataModules (Martins & Kreutzer 2017): UD POS, CoNLL NER, word-level QE.

Real data is read through ``data_root()`` (``$STRUCTATTN_DATA`` or ``../shared/data``); a test
whose dataset folder is absent is skipped. Expected split sizes come from each folder's SOURCE.md.
"""

from __future__ import annotations

import gzip
import sys
import time
from collections import Counter

import pytest
import torch

from lit_structattn.common.constants import PAD, UNK
from lit_structattn.datamodules.conll_ner import CoNLLNERDataModule, iob1_to_iob2, read_conll_ner
from lit_structattn.datamodules.files import (
    DATA_ENV_VAR,
    MalformedLine,
    atomic_path,
    data_root,
    open_text,
    require_files,
)
from lit_structattn.datamodules.hub import HubUnavailableError
from lit_structattn.datamodules.tagging import (
    TaggedSentence,
    affixes,
    build_affix_vocab,
    capitalization,
)
from lit_structattn.datamodules.ud_pos import UDPOSDataModule, read_conllu
from lit_structattn.datamodules.vocabulary import Vocabulary
from lit_structattn.datamodules.word_qe import WordQEDataModule, read_word_qe

UNK_ID = 1  # <unk> of a word vocabulary: (<pad>, <unk>, ...)

# (sentences, words) per split, from the SOURCE.md files
UD_SIZES = {"train": (12544, 204577), "val": (2001, 25147), "test": (2077, 25094)}
EN_SIZES = {"train": (14041, 203621), "val": (3250, 51362), "test": (3453, 46435)}
ES_SIZES = {"train": (8323, 264715), "val": (1915, 52923), "test": (1517, 51533)}
EN_ENTITIES = {  # LOC, MISC, ORG, PER
    "train": (7140, 3438, 6321, 6600), "val": (1837, 922, 1341, 1842),
    "test": (1668, 702, 1661, 1617),
}
ES_ENTITIES = {
    "train": (4914, 2173, 7390, 4321), "val": (985, 445, 1700, 1222),
    "test": (1084, 340, 1400, 735),
}
QE_SIZES = {"train": (100, 1389, 421), "val": (50, 673, 195)}  # sentences, OK, BAD


def _folder_or_skip(name: str):
    folder = data_root() / name
    if not folder.is_dir() or not any(folder.iterdir()):
        pytest.skip(f"dataset folder {folder} is absent")
    return folder


def _setup(module):
    module.setup()
    return module


@pytest.fixture(scope="module")
def ud():
    _folder_or_skip("ud_english_ewt")
    return _setup(UDPOSDataModule(batch_size=64))


@pytest.fixture(scope="module")
def ner_en():
    _folder_or_skip("conll2003_en")
    return _setup(CoNLLNERDataModule(language="en"))


@pytest.fixture(scope="module")
def ner_es():
    _folder_or_skip("conll2002_es")
    return _setup(CoNLLNERDataModule(language="es"))


@pytest.fixture(scope="module")
def qe():
    _folder_or_skip("wmt_qe_word_en_de_sample")
    with pytest.warns(UserWarning, match="test split serves the validation data"):
        return _setup(WordQEDataModule(batch_size=16))


# ----------------------------------------------------------------------------- real split sizes


@pytest.mark.parametrize(("name", "expected"), [("ud", UD_SIZES), ("ner_en", EN_SIZES),
                                                ("ner_es", ES_SIZES)])
def test_split_sizes_match_source_md(request, name, expected):
    module = request.getfixturevalue(name)
    assert module.split_sizes == expected
    assert module.dropped_train > 0
    train = module.datasets["train"]
    assert len(train) + module.dropped_train == expected["train"][0]
    for split in ("val", "test"):
        dataset = module.datasets[split]
        assert (len(dataset), sum(dataset.lengths)) == expected[split]


def test_ud_tags_and_skipped_lines(ud):
    assert ud.tag_vocab.tokens[0] == "<pad>"
    assert len(ud.tag_vocab) == 18  # <pad> + the 17 UPOS tags
    # word counts above equal the integer-ID lines: the 2,614 / 359 / 354 multiword-token lines
    # and 37 / 4 / 2 empty nodes of SOURCE.md were skipped.
    first = ud.datasets["train"].sentences[0]
    assert first.words[:3] == ("Al", "-", "Zaman") and first.tags[:3] == ("PROPN", "PUNCT", "PROPN")


@pytest.mark.parametrize(("name", "expected"), [("ner_en", EN_ENTITIES), ("ner_es", ES_ENTITIES)])
def test_ner_docstart_skipped_and_entities_in_iob2(request, name, expected):
    module = request.getfixturevalue(name)
    for split, counts in expected.items():
        sentences = module.datasets[split].sentences
        assert not any("-DOCSTART-" in s.words for s in sentences)
        # the train split lost its long sentences: count its entities on the file itself
        if split == "train":
            path = module.data_folder() / module.expected_files()[0]
            sentences = read_conll_ner(path)
        chunks = Counter(t[2:] for s in sentences for t in s.tags if t.startswith("B-"))
        assert tuple(chunks[k] for k in ("LOC", "MISC", "ORG", "PER")) == counts
        for s in sentences:  # IOB2: every I-X follows B-X or I-X
            for previous, tag in zip(("O", *s.tags), s.tags, strict=False):
                assert not tag.startswith("I-") or previous[2:] == tag[2:]


def test_spanish_encoding_is_utf8(ner_es):
    folder = ner_es.data_folder()
    for name in ner_es.expected_files():
        data = (folder / name).read_bytes()
        (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")
    assert "España" in ner_es.vocab


def test_fifty_word_cutoff_applies_to_train_only(ud, ner_es):
    for module in (ud, ner_es):
        assert max(module.datasets["train"].lengths) <= 50
        assert max(module.datasets["val"].lengths) > 50
        assert max(module.datasets["test"].lengths) > 50


def test_bucketed_batches_cover_every_example_once(ud):
    for split, shuffle in (("train", True), ("val", False)):
        loader = ud._loader(split, shuffle=shuffle)
        seen = [i for batch in loader for i in batch["index"].tolist()]
        assert sorted(seen) == list(range(len(ud.datasets[split])))
    lengths = [b["lengths"] for b in ud.val_dataloader()]
    # evaluation batches come shortest first
    assert all(int(a.max()) <= int(b.min()) for a, b in zip(lengths, lengths[1:], strict=False))


def test_batch_shapes_and_padding(ner_en):
    batch = next(iter(ner_en.train_dataloader()))
    B, T = batch["words"].shape
    assert B == 32 and T == int(batch["lengths"].max())
    assert batch["prefixes"].shape == batch["suffixes"].shape == (B, T, 4)
    assert batch["tags"].shape == (B, T) and batch["lengths"].shape == (B,)
    assert all(v.dtype == torch.long for v in batch.values())
    mask = torch.arange(T)[None, :] < batch["lengths"][:, None]
    for key in ("words", "tags", "caps"):
        assert (batch[key][~mask] == 0).all() and (batch[key][mask] > 0).all()
    assert (batch["prefixes"][~mask] == 0).all() and (batch["suffixes"][~mask] == 0).all()
    # the 1-character affixes exist for every real word; n-grams longer than the word are pad
    assert (batch["prefixes"][..., 0][mask] > 0).all()
    dataset = ner_en.datasets["train"]
    for b, index in enumerate(batch["index"].tolist()):
        words = dataset.sentences[index].words
        assert ner_en.vocab.decode(batch["words"][b, : len(words)]) == list(words)
        shorter = torch.tensor([[len(w) < n for n in range(1, 5)] for w in words])
        assert torch.equal(batch["suffixes"][b, : len(words)] == 0, shorter)
        assert batch["caps"][b, : len(words)].tolist() == [capitalization(w) for w in words]
        tags = ner_en.tag_vocab.decode(batch["tags"][b, : len(words)])
        assert tags == list(dataset.sentences[index].tags)


def test_qe_alignments_and_tags(qe):
    assert qe.split_sizes["train"][0] == QE_SIZES["train"][0]
    assert qe.test_is_val and len(qe.datasets["test"]) == len(qe.datasets["val"])
    assert qe.tag_vocab.tokens == ["<pad>", "BAD", "OK"]
    for split in ("train", "val"):
        ok_bad = Counter(t for s in qe.datasets[split].sentences for t in s.tags)
        assert (len(qe.datasets[split]), ok_bad["OK"], ok_bad["BAD"]) == QE_SIZES[split]
    first = qe.datasets["train"].sentences[0]  # line 1: "0-0 1-0 2-1 2-3 ..."
    assert first.alignment[:4] == ((0, 0), (1, 0), (2, 1), (2, 3))
    loader = qe._loader("train", shuffle=False)
    links = 0
    for batch in loader:
        B, T = batch["words"].shape
        A = batch["aligned"].shape[2]
        assert batch["aligned"].shape == (B, T, A) and batch["source"].shape[0] == B
        links += int((batch["aligned"] > 0).sum())
        for b, index in enumerate(batch["index"].tolist()):
            sentence = qe.datasets["train"].sentences[index]
            for j in range(len(sentence.words)):
                expected = [qe.source_vocab.id(sentence.source[i])
                            for i, jj in sentence.alignment if jj == j]
                row = batch["aligned"][b, j].tolist()
                assert row == expected + [0] * (A - len(expected))
            assert (batch["aligned"][b, len(sentence.words):] == 0).all()
    assert links == sum(len(s.alignment) for s in qe.datasets["train"].sentences)


# ----------------------------------------------------------------------------- small files


CONLLU = """# sent_id = 1
# text = Don't stop.
1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tDo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
3\tstop\tstop\tVERB\tVB\t_\t0\troot\t_\t_
3.1\tgo\tgo\tVERB\tVB\t_\t_\t_\t2:conj\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = 2
1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_
"""


def test_conllu_skips_ranges_empty_nodes_and_comments(tmp_path):
    path = tmp_path / "tiny.conllu.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(CONLLU)
    assert read_conllu(path) == [
        TaggedSentence(("Do", "n't", "stop", "."), ("AUX", "PART", "VERB", "PUNCT")),
        TaggedSentence(("Hi",), ("INTJ",)),
    ]


def test_conllu_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.conllu"
    path.write_text(CONLLU.replace("2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_", "2\tn't\tPART"))
    with pytest.raises(MalformedLine, match=r"bad\.conllu:5: expected 10 tab-separated columns"):
        read_conllu(path)


def test_iob1_to_iob2_on_a_file(tmp_path):
    assert iob1_to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "B-ORG"]) == [
        "B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "B-ORG"]
    path = tmp_path / "eng.train"
    path.write_text(
        "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\nGerman JJ I-NP I-MISC\ncall NN I-NP O\n\n"
        "-DOCSTART- -X- O O\n\n"
        "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\nJohn NNP I-NP B-PER\n"
        "-DOCSTART- -X- -X- O\n"
        "BRUSSELS NNP I-NP I-LOC\n"
    )
    sentences = read_conll_ner(path)
    assert [s.words for s in sentences] == [
        ("EU", "rejects", "German", "call"), ("Peter", "Blackburn", "John"), ("BRUSSELS",)]
    assert [s.tags for s in sentences] == [
        ("B-ORG", "O", "B-MISC", "O"), ("B-PER", "I-PER", "B-PER"), ("B-LOC",)]


@pytest.mark.parametrize(("line", "problem"), [
    ("rejects\n", "expected a word and a tag"),
    ("rejects VBZ I-VP X-PER\n", "invalid tag 'X-PER'"),
    ("rejects VBZ I-VP I-\n", r"invalid tag 'I-' \(no entity type"),
    ("rejects O\n", "expected 4 columns"),
])
def test_ner_malformed_lines(tmp_path, line, problem):
    path = tmp_path / "esp.train"
    path.write_text("EU NNP I-NP I-ORG\n\nGerman JJ I-NP I-MISC\n" + line)
    with pytest.raises(MalformedLine, match=rf"esp\.train:4: {problem}"):
        read_conll_ner(path)


def test_latin1_files_read_when_the_encoding_is_named(tmp_path):
    path = tmp_path / "esp.train"
    path.write_bytes("España NP B-LOC\nmañana NC O\n".encode("latin-1"))
    assert read_conll_ner(path, encoding="latin-1")[0].words == ("España", "mañana")
    with pytest.raises(MalformedLine, match=r"esp\.train:1: not valid utf-8: byte 0xf1 at byte "
                       r"offset 4 .*encoding: latin-1"):
        read_conll_ner(path)  # UTF-8 by default, no guessing


def _write_qe(folder, prefix, src, mt, tags, align):
    for ext, lines in (("src", src), ("mt", mt), ("tags", tags), ("align", align)):
        (folder / f"{prefix}.{ext}").write_text("".join(line + "\n" for line in lines))


@pytest.mark.parametrize(("tags", "align", "where", "problem"), [
    ("OK BAD", "0-0", "tags:2", "2 tags for 3 MT words"),
    ("OK BAD GOOD", "0-0", "tags:2", "invalid tag 'GOOD'"),
    ("OK OK OK", "0-0 1:1", "align:2", "invalid alignment '1:1'"),
    ("OK OK OK", "0-0 2-1", "align:2", r"alignment 2-1 out of range \(2 source words"),
    ("OK OK OK", "0-3", "align:2", "alignment 0-3 out of range"),
])
def test_qe_malformed_lines(tmp_path, tags, align, where, problem):
    _write_qe(tmp_path, "train", ["a b", "c d"], ["x y", "z w v"], ["OK OK", tags], ["0-0", align])
    with pytest.raises(MalformedLine, match=rf"train\.{where}: {problem}"):
        read_word_qe(tmp_path / "train")


def test_small_modules_cutoff_affixes_and_unaligned_words(tmp_path):
    _write_qe(tmp_path, "train", ["a b", "c d e f"], ["ab abcde", "x y z w"],
              ["OK BAD", "OK OK OK OK"], ["0-1 1-1", "0-0"])
    _write_qe(tmp_path, "dev", ["a q r s t"], ["abcdef y z w v"], ["BAD OK OK OK OK"], ["4-0 0-0"])
    module = WordQEDataModule(str(tmp_path), test_prefix="dev", max_train_length=3, batch_size=4)
    module.setup()
    assert module.dropped_train == 1 and len(module.datasets["train"]) == 1
    assert len(module.datasets["val"]) == 1 and module.datasets["val"].lengths == [5]
    assert not module.test_is_val  # test_prefix="dev" was explicit
    affix = module.affix_vocab
    item = module.datasets["train"][0]  # "ab abcde": the 2-letter word has no 3- or 4-grams
    assert item.prefixes[0] == [affix.id("a"), affix.id("ab"), 0, 0]
    assert item.suffixes[0] == [affix.id("b"), affix.id("ab"), 0, 0]
    assert item.prefixes[1] == [affix.id(p) for p in ("a", "ab", "abc", "abcd")]
    assert item.suffixes[1] == [affix.id(s) for s in ("e", "de", "cde", "bcde")]
    val = module.datasets["val"][0]  # "abcdef" is unknown, its prefixes known, "ef" unknown
    assert val.words[0] == UNK_ID and val.prefixes[0] == item.prefixes[1]
    assert val.suffixes[0][1] == UNK_ID
    batch = next(iter(module.train_dataloader()))
    source = module.source_vocab
    assert batch["aligned"].tolist() == [[[0, 0], [source.id("a"), source.id("b")]]]
    batch = next(iter(module.val_dataloader()))  # source words of dev unknown but "a"
    assert batch["aligned"][0, 0].tolist() == [source.id("a"), UNK_ID]
    assert (batch["aligned"][0, 1:] == 0).all()
    assert batch["source"].shape == (1, 5) and batch["source_lengths"].tolist() == [5]


def test_sizes_for_the_model_set_the_data_up(tmp_path):
    """What the CLI links into the tagger and its task: asked for before setup, they run it."""
    _write_qe(tmp_path, "train", ["a b", "c d"], ["x y", "z w"], ["OK BAD", "OK OK"],
              ["0-1", "1-0"])
    module = WordQEDataModule(str(tmp_path), val_prefix="train", test_prefix="train")
    assert module.vocab is None
    assert module.tag_names == ["<pad>", "BAD", "OK"] and module.num_tags == 3
    assert module.vocab_size == len(module.vocab) == 2 + 4
    assert module.affix_vocab_size == len(module.affix_vocab)
    assert module.source_vocab_size == len(module.source_vocab) == 2 + 4
    # only QE has source words: the other tagging data has no such size (the link is skipped)
    assert not hasattr(UDPOSDataModule, "source_vocab_size")
    assert not hasattr(CoNLLNERDataModule, "source_vocab_size")


@pytest.mark.parametrize(("word", "expected"), [
    ("paris", 1), ("1990", 1), (",", 1), ("Paris", 2), ("Ärzte", 2), ("NATO", 3), ("A", 3),
    ("U.S.", 3), ("McDonald", 4), ("iPhone", 4), ("Paris-Match", 4),
])
def test_capitalization_classes(word, expected):
    assert capitalization(word) == expected


def test_affix_helpers_and_vocab():
    assert affixes("ab") == (["a", "ab", None, None], ["b", "ab", None, None])
    vocab = build_affix_vocab(["ab", "ab", "b"], min_count=2)
    # counts: "ab" 2 prefixes + 2 suffixes, "b" 1 prefix + 3 suffixes, "a" 2 prefixes
    assert vocab.tokens == ["<pad>", "<unk>", "ab", "b", "a"]
    words = Vocabulary.build(["x", "y", "x"], min_count=2)
    assert words.tokens == ["<pad>", "<unk>", "x"] and words.id("y") == UNK_ID
    tags = Vocabulary(["O", "B-PER"], specials=(PAD,))
    assert tags.id("B-PER") == 2
    with pytest.raises(KeyError):
        tags.id("I-PER")


# ----------------------------------------------------------------------------- files and errors


def test_data_root_and_open_text(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path))
    assert data_root() == tmp_path
    monkeypatch.delenv(DATA_ENV_VAR)
    assert data_root().parts[-2:] == ("shared", "data")
    with gzip.open(tmp_path / "a.gz", "wt", encoding="utf-8") as f:
        f.write("ä\r\nb\n")
    with open_text(tmp_path / "a.gz") as f:
        assert f.read() == "ä\nb\n"


def test_atomic_path_replaces_the_file_only_when_the_write_ends(tmp_path):
    target = tmp_path / "cache" / "derived.txt"
    with atomic_path(target) as partial:
        partial.write_text("new")
        assert not target.exists()  # a reader meanwhile finds no file, not half of one
    assert target.read_text() == "new"
    with pytest.raises(RuntimeError), atomic_path(target) as partial:
        partial.write_text("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "new" and sorted(target.parent.iterdir()) == [target]


@pytest.mark.parametrize("module_class", [UDPOSDataModule, CoNLLNERDataModule, WordQEDataModule])
def test_missing_or_empty_data_dir_lists_expected_files(tmp_path, module_class):
    hint = module_class(data_dir="x").source_hint
    expected = module_class(data_dir="x").expected_files()
    with pytest.raises(FileNotFoundError, match="does not exist") as missing:
        module_class(data_dir=str(tmp_path / "nowhere")).setup()
    with pytest.raises(FileNotFoundError, match="is empty") as empty:
        module_class(data_dir=str(tmp_path)).setup()
    (tmp_path / expected[0]).write_text("")
    with pytest.raises(FileNotFoundError, match=f"lacks {expected[1]}") as lacking:
        module_class(data_dir=str(tmp_path)).setup()
    for error in (missing, empty, lacking):
        assert all(name in str(error.value) for name in expected)
        assert hint and hint in str(error.value)
    with pytest.raises(ValueError, match="expected a folder with"):
        require_files(None, expected, "")


@pytest.mark.parametrize(("module_class", "hub"), [
    (UDPOSDataModule, ("universal_dependencies", "en_ewt")),
    (CoNLLNERDataModule, ("conll2002", "es")),
    (WordQEDataModule, ("wmt/wmt20_mlqe_task2", "en-de")),
])
def test_hub_fails_fast_offline(monkeypatch, module_class, hub):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    if "datasets" in sys.modules:  # imported before the variables were set: tell it too
        import datasets.config
        import huggingface_hub.constants

        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    module = module_class(hub_name=hub[0], hub_config=hub[1])
    start = time.perf_counter()
    with pytest.raises(HubUnavailableError, match="offline mode is on") as error:
        module.setup()
    assert time.perf_counter() - start < 20
    assert "data_dir=" in str(error.value) and hub[0] in str(error.value)


def test_hub_rows_convert_to_sentences():
    # the conversion alone, on rows shaped like the hub's (tags as strings: no ClassLabel names)
    ner = CoNLLNERDataModule(hub_name="conll2003")
    rows = [{"tokens": ["EU", "rejects", "German"], "ner_tags": ["I-ORG", "O", "I-MISC"]},
            {"tokens": [], "ner_tags": []}]
    assert ner.from_hub(rows, None) == [
        TaggedSentence(("EU", "rejects", "German"), ("B-ORG", "O", "B-MISC"))]
    qe = WordQEDataModule(hub_name="wmt/wmt20_mlqe_task2", hub_config="en-de")
    rows = [{"translation": {"en": "a b", "de": "x y"}, "mt_tags": ["OK", "BAD", "OK", "OK", "OK"],
             "alignments": [[1, 0], [0, 0]]}]
    assert qe.from_hub(rows, None) == [
        TaggedSentence(("x", "y"), ("BAD", "OK"), ("a", "b"), ((0, 0), (1, 0)))]


def test_hub_unreachable_fails_before_retrying(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HTTPS_PROXY", "https_proxy",
                 "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://127.0.0.1:9")  # nothing listens on port 9
    start = time.perf_counter()
    with pytest.raises(HubUnavailableError, match="unreachable.*data_dir="):
        CoNLLNERDataModule(hub_name="conll2003").setup()
    assert time.perf_counter() - start < 10


def test_one_vocabulary_lays_out_the_specials_once():
    words = Vocabulary(["a"])
    assert words.tokens == ["<pad>", UNK, "a"] and words.unk_id == UNK_ID
    sequences = Vocabulary(["a", "b"], specials=("<pad>", "<bos>", "<eos>", UNK))
    assert (sequences.pad_id, sequences.bos_id, sequences.eos_id, sequences.unk_id) == (0, 1, 2, 3)
    assert sequences.decode([1, 4, 3, 0, 2, 5]) == ["a", UNK]  # stops at <eos>, skips pad/bos
    assert sequences.decode(torch.tensor([4, 5])) == ["a", "b"]
    with pytest.raises(ValueError, match="specials"):
        Vocabulary(specials=("<bos>", "<pad>"))
