"""Bad data is refused with the file (and line) named (issue 29): an empty file in any split of
any reader, a bAbI question that lost its tabs, a byte that is not valid in the file's encoding
(no silent latin-1 re-read), and a CONSTANT fertility below 1 with the <SINK> token.

Everything runs on tiny files written to ``tmp_path``; the tests on broken copies of the shared
data read only their first lines and skip when the folder is absent.
"""

from __future__ import annotations

import gzip
import pickle

import pytest

from lit_structattn.datamodules.babi import BabiDataModule, read_babi
from lit_structattn.datamodules.conll_ner import CoNLLNERDataModule, read_conll_ner
from lit_structattn.datamodules.files import (
    EmptyDataFile,
    MalformedLine,
    check_encoding,
    data_root,
    open_text,
    require_records,
)
from lit_structattn.datamodules.morphology import read_inflections
from lit_structattn.datamodules.nli import read_sick, read_snli
from lit_structattn.datamodules.translation import read_parallel
from lit_structattn.datamodules.ud_pos import UDPOSDataModule, read_conllu, read_conllu_trees
from lit_structattn.datamodules.word_qe import read_word_qe
from lit_structattn.models.seq2seq import Seq2Seq

NER_LINES = "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\nMálaga NNP I-NP I-LOC\n"
STORY = "1 Mary moved to the bathroom.\n2 Where is Mary? \tbathroom\t1\n"


def _ner_folder(tmp_path, train=NER_LINES, val=NER_LINES, test=NER_LINES):
    for name, text in (("eng.train", train), ("eng.testa", val), ("eng.testb", test)):
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


# ----------------------------------------------------------------------------- empty files


def test_require_records_names_the_file(tmp_path):
    assert require_records([1], tmp_path / "a.txt", "rows") == [1]
    with pytest.raises(EmptyDataFile, match=r"a\.txt: no rows \(the file is empty"):
        require_records([], tmp_path / "a.txt", "rows")
    error = EmptyDataFile(tmp_path / "a.txt", "rows", "why")
    assert str(pickle.loads(pickle.dumps(error))) == str(error)
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("blank", ["", "\n\n", "-DOCSTART- -X- O O\n\n"])
def test_empty_ner_validation_file_is_an_error_naming_it(tmp_path, blank):
    data = CoNLLNERDataModule(data_dir=str(_ner_folder(tmp_path, val=blank)))
    with pytest.raises(EmptyDataFile, match=r"eng\.testa: no sentences"):
        data.setup("fit")


def test_empty_ner_training_file_is_blamed_not_max_train_length(tmp_path):
    data = CoNLLNERDataModule(data_dir=str(_ner_folder(tmp_path, train="")))
    with pytest.raises(EmptyDataFile, match=r"eng\.train: no sentences") as error:
        data.setup("fit")
    assert "max_train_length" not in str(error.value)


def test_empty_conllu_file_through_the_ud_datamodule(tmp_path):
    with gzip.open(tmp_path / "en_ewt-ud-train.conllu.gz", "wt", encoding="utf-8") as f:
        f.write("# sent_id = 1\n\n")  # a comment only
    for name in ("en_ewt-ud-dev.conllu.gz", "en_ewt-ud-test.conllu.gz"):
        with gzip.open(tmp_path / name, "wt", encoding="utf-8") as f:
            f.write("1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(EmptyDataFile, match=r"en_ewt-ud-train\.conllu\.gz: no sentences"):
        UDPOSDataModule(data_dir=str(tmp_path)).setup("fit")


def _read_empty(kind, tmp_path):
    """Call the ``kind`` reader on empty files; returns the file the error must name."""
    empty = tmp_path / f"empty.{kind}"
    empty.write_text("")
    if kind == "conllu":
        read_conllu(empty)
    elif kind == "trees":
        read_conllu_trees(empty)
    elif kind == "ner":
        read_conll_ner(empty)
    elif kind == "qe":
        for ext in ("src", "mt", "tags", "align"):
            (tmp_path / f"dev.{ext}").write_text("")
        empty = tmp_path / "dev.mt"
        read_word_qe(tmp_path / "dev")
    elif kind == "babi":
        read_babi(empty, task=1)
    elif kind == "snli":
        empty.write_text('{"sentence1": "a", "sentence2": "b", "gold_label": "-"}\n')
        read_snli(empty)
    elif kind == "parallel":
        (tmp_path / "empty.de").write_text("\n\n")
        empty.write_text("\n\n")
        read_parallel(empty, tmp_path / "empty.de")
    elif kind == "inflections":
        read_inflections(empty)
    return empty


@pytest.mark.parametrize("kind", ["conllu", "trees", "ner", "qe", "babi", "snli", "parallel",
                                  "inflections"])
def test_every_reader_refuses_an_empty_file(tmp_path, kind):
    with pytest.raises(EmptyDataFile) as error:
        _read_empty(kind, tmp_path)
    path = error.value.path
    assert path.parent == tmp_path and str(path) in str(error.value)


def test_sick_split_without_pairs_names_the_file(tmp_path):
    header = "\t".join(["pair_ID", "sentence_A", "sentence_B", "entailment_label", *"abcdefg",
                        "SemEval_set"])
    rows = [f"{i}\tA man runs\tA man moves\tENTAILMENT" + "\t_" * 7 + f"\t{s}"
            for i, s in ((1, "TRAIN"), (2, "TEST"))]
    path = tmp_path / "SICK.txt"
    path.write_text("\n".join([header, *rows]) + "\n")
    with pytest.raises(EmptyDataFile, match=r"SICK\.txt: no val pairs \(no line with "
                       r"SemEval_set TRIAL\)"):
        read_sick(path)


def test_empty_babi_training_file_is_an_error_naming_it(tmp_path):
    (tmp_path / "qa1_single-supporting-fact_train.txt").write_text("")
    (tmp_path / "qa1_single-supporting-fact_test.txt").write_text(STORY)
    with pytest.raises(EmptyDataFile, match=r"qa1_single-supporting-fact_train\.txt: no "
                       r"questions"):
        BabiDataModule(data_dir=str(tmp_path), task=1).setup("fit")


def test_babi_held_out_validation_that_rounds_to_nothing(tmp_path):
    (tmp_path / "qa1_single-supporting-fact_train.txt").write_text(STORY * 2)
    (tmp_path / "qa1_single-supporting-fact_test.txt").write_text(STORY)
    with pytest.raises(EmptyDataFile, match=r"qa1_single-supporting-fact_train\.txt: no "
                       r"validation questions \(val_fraction=0\.1 of 2 training questions"):
        BabiDataModule(data_dir=str(tmp_path), task=1).setup("fit")


# ----------------------------------------------------------------------------- bAbI lines


@pytest.mark.parametrize("question", ["2 Where is Mary? bathroom 1", "2 Where is Mary?"])
def test_babi_question_without_tabs_is_malformed_not_a_memory(tmp_path, question):
    path = tmp_path / "qa1_single-supporting-fact_train.txt"
    path.write_text(f"1 Mary moved to the bathroom.\n{question}\n3 Where is Mary? \tbathroom\t1\n")
    with pytest.raises(MalformedLine, match=rf"{path.name}:2: a question \('\?'\) without its "
                       "tab-separated answer") as error:
        read_babi(path, task=1)
    assert error.value.line == 2 and error.value.path == path


def test_babi_copy_of_the_shared_data_with_a_question_without_tabs(tmp_path):
    source = data_root() / "babi_v1.2_en" / "qa1_single-supporting-fact_train.txt"
    if not source.is_file():
        pytest.skip(f"{source} is absent")
    with open_text(source) as f:
        lines = [next(f) for _ in range(30)]
    number = next(i for i, line in enumerate(lines, start=1) if "\t" in line)
    lines[number - 1] = lines[number - 1].replace("\t", " ")
    broken = tmp_path / source.name
    broken.write_text("".join(lines))
    with pytest.raises(MalformedLine, match=rf"{source.name}:{number}: a question"):
        read_babi(broken, task=1)


# ----------------------------------------------------------------------------- encodings


def test_one_bad_byte_in_a_utf8_file_names_file_line_and_offset(tmp_path):
    path = tmp_path / "eng.train"
    data = NER_LINES.encode("utf-8")
    path.write_bytes(data)
    assert read_conll_ner(path)[1].words[0] == "Málaga"  # UTF-8, not re-read as MÃ¡laga
    offset = data.index("á".encode())  # its first byte becomes one UTF-8 never uses
    path.write_bytes(data[:offset] + b"\xff" + data[offset + 1:])
    with pytest.raises(MalformedLine, match=rf"eng\.train:4: not valid utf-8: byte 0xff at byte "
                       rf"offset {offset} .*encoding: latin-1") as error:
        read_conll_ner(path)
    assert error.value.line == 4
    words = read_conll_ner(path, encoding="latin-1")[1].words  # named explicitly: read as such
    assert words[0] == "M\xff\xa1laga"


def test_bad_byte_in_a_gzip_file_names_the_uncompressed_offset(tmp_path):
    path = tmp_path / "train.en.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"a b\nc \xe9 d\n")
    with pytest.raises(MalformedLine, match=r"train\.en\.gz:2: not valid utf-8: byte 0xe9 at "
                       r"uncompressed byte offset 6"):
        with open_text(path) as f:
            f.read()


def test_whole_file_fallback_is_gone_and_encodings_are_checked_early(tmp_path):
    with pytest.raises(ValueError, match="encoding='auto'.*no longer supported"):
        CoNLLNERDataModule(data_dir=str(tmp_path), encoding="auto")
    with pytest.raises(ValueError, match="unknown encoding 'utf-9'"):
        UDPOSDataModule(data_dir=str(tmp_path), encoding="utf-9")
    assert check_encoding("latin-1") == "latin-1"
    error = MalformedLine(tmp_path / "x", 3, "not valid utf-8")
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_copy_of_the_shared_spanish_ner_with_one_bad_byte(tmp_path):
    source = data_root() / "conll2002_es"
    if not (source / "esp.train").is_file():
        pytest.skip(f"{source} is absent")
    with open(source / "esp.train", "rb") as f:
        lines = [f.readline() for _ in range(400)]
    number = next(i for i, line in enumerate(lines, start=1) if max(line) > 127)
    assert read_conll_ner(source / "esp.testa")  # the shared copy is UTF-8, the default
    bad = lines[number - 1]
    position = next(i for i, byte in enumerate(bad) if byte > 127)
    lines[number - 1] = bad[:position] + b"\xff" + bad[position + 1:]
    offset = sum(map(len, lines[: number - 1])) + position
    for split in ("esp.train", "esp.testa", "esp.testb"):
        (tmp_path / split).write_bytes(b"".join(lines))
    data = CoNLLNERDataModule(data_dir=str(tmp_path), language="es")
    with pytest.raises(MalformedLine, match=rf"esp\.train:{number}: not valid utf-8: byte 0xff "
                       rf"at byte offset {offset} "):
        data.setup("fit")


# ----------------------------------------------------------------------------- fertility


@pytest.mark.parametrize("fertility", [0.01, 0.5])
def test_constant_fertility_below_one_with_the_sink_is_refused(fertility):
    with pytest.raises(ValueError, match=rf"fertility={fertility} with csparsemax attention "
                       r"and the <SINK> token.*Use a CONSTANT fertility >= 1"):
        Seq2Seq(20, 20, embed_dim=8, hidden_dim=8, attention="csparsemax", sink=True,
                fertility=fertility)


def test_constant_fertility_of_one_or_more_and_unconstrained_attention_are_accepted():
    small = {"src_vocab": 20, "tgt_vocab": 20, "embed_dim": 8, "hidden_dim": 8}
    Seq2Seq(**small, attention="csparsemax", sink=True, fertility=1.0)
    Seq2Seq(**small, attention="softmax", fertility=0.01)  # unused without constraints
