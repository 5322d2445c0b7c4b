"""Bounded cost per input (issue 44, item 4): every family's DataModule takes ``max_tokens``
(and, where cutting makes sense, ``length_policy``); a longer example in a data file is refused
naming its ``file:line`` and the limit, or cut with one warning that counts the cuts; the text
codec keeps the limit in its saved state, so raw input to a trained model is refused naming
``<source>:<line>``; a codec saved without the limit loads with the family's default.

Everything runs on tiny files in ``tmp_path`` (or generated data); nothing is trained.
"""

from __future__ import annotations

import gzip

import pytest

from datamodules.conll_ner import CoNLLNERDataModule
from datamodules.files import MalformedLine
from datamodules.limits import LengthLimit
from datamodules.tagging import MAX_TOKENS, TaggingCodec
from datamodules.ud_pos import UDPOSDataModule
from datamodules.vocabulary import Vocabulary
from datamodules.word_qe import QECodec, WordQEDataModule
from lit_structattn.common.codec import RawInputError, codec_record, restore_codec


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def _refused(error, path, line, limit):
    """The error names ``path:line`` and the limit."""
    assert isinstance(error, MalformedLine)
    assert str(error).startswith(f"{path}:{line}: ")
    assert f"max_tokens={limit}" in str(error)


# ----------------------------------------------------------------------------- the shared piece


def test_length_limit_checks_its_arguments():
    with pytest.raises(ValueError, match="max_tokens must be an int >= 1"):
        LengthLimit(0)
    with pytest.raises(ValueError, match="unknown length_policy 'cut'; valid: error, truncate"):
        LengthLimit(5, "cut")


def test_length_limit_counts_the_cuts_in_one_warning(tmp_path):
    limit = LengthLimit(2, "truncate")
    assert limit.cut(([1, 2], "ab"), "x", "f", 1) == [[1, 2], "ab"]
    assert limit.cut(([1, 2, 3], "abc"), "x", "f", 4) == [[1, 2], "ab"]
    assert limit.cut(([1, 2, 3, 4],), "x", "f", 9) == [[1, 2]]
    with pytest.warns(UserWarning, match=r"f: 2 examples longer than max_tokens=2 words cut "
                                         r"to 2 \(the first at f:4\)"):
        limit.warn("f")
    with pytest.warns(UserWarning, match="1 example longer"):
        limit.cut(([1, 2, 3],), "x")
        limit.warn("<input>")


# ----------------------------------------------------------------------------- tagging


def _ner_folder(tmp_path, long_words):
    short = "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\n"
    long = "".join(f"w{i} NN I-NP O\n" for i in range(long_words))
    _write(tmp_path / "eng.train", f"-DOCSTART- -X- O O\n\n{short}\n{short}")
    _write(tmp_path / "eng.testa", f"{short}\n{long}\n{short}")  # the long one: line 4
    _write(tmp_path / "eng.testb", short)
    return tmp_path


def test_ner_refuses_a_long_validation_sentence_naming_file_line_and_limit(tmp_path):
    data = CoNLLNERDataModule(data_dir=str(_ner_folder(tmp_path, 6)), max_tokens=5)
    with pytest.raises(MalformedLine) as error:
        data.setup("fit")
    _refused(error.value, tmp_path / "eng.testa", 4, 5)
    assert "sentence of 6 words" in str(error.value)


def test_ner_truncates_with_a_warning_that_counts(tmp_path):
    data = CoNLLNERDataModule(data_dir=str(_ner_folder(tmp_path, 6)), max_tokens=5,
                              length_policy="truncate")
    with pytest.warns(UserWarning, match=r"eng\.testa: 1 example longer than max_tokens=5 "
                                         r"words cut to 5 \(the first at .*eng\.testa:4\)"):
        data.setup("fit")
    assert [len(s.words) for s in data.datasets["val"].sentences] == [2, 5, 2]
    assert data.datasets["val"].sentences[1].words == tuple(f"w{i}" for i in range(5))


def test_ner_default_limit_keeps_a_long_sentence_within_it(tmp_path):
    data = CoNLLNERDataModule(data_dir=str(_ner_folder(tmp_path, 6)))
    data.setup("fit")
    assert data.hparams.max_tokens == MAX_TOKENS
    assert len(data.datasets["val"].sentences[1].words) == 6


def _conllu(words, first_id=1):
    rows = [f"{i}\tw{i}\tw\tNOUN\t_\t_\t{0 if i == 1 else 1}\tdep\t_\t_"
            for i in range(first_id, first_id + words)]
    return "# sent_id = x\n" + "\n".join(rows) + "\n\n"


def test_ud_pos_refuses_a_long_sentence_at_its_first_word(tmp_path):
    for name, text in (("en_ewt-ud-train.conllu.gz", _conllu(2)),
                       ("en_ewt-ud-dev.conllu.gz", _conllu(2)),
                       ("en_ewt-ud-test.conllu.gz", _conllu(2) + _conllu(4))):
        with gzip.open(tmp_path / name, "wt", encoding="utf-8") as f:
            f.write(text)
    with pytest.raises(MalformedLine) as error:
        UDPOSDataModule(data_dir=str(tmp_path), max_tokens=3).setup("test")
    # lines: comment 1, words 2-3, blank 4, comment 5, first word 6
    _refused(error.value, tmp_path / "en_ewt-ud-test.conllu.gz", 6, 3)
    data = UDPOSDataModule(data_dir=str(tmp_path), max_tokens=3, length_policy="truncate")
    with pytest.warns(UserWarning, match="1 example longer than max_tokens=3"):
        data.setup("test")
    assert [len(s.words) for s in data.datasets["test"].sentences] == [2, 3]


def _qe_folder(tmp_path, long_mt):
    for split in ("train", "dev"):
        mt = ["das Haus", " ".join(["x"] * long_mt) if split == "dev" else "ein Hund"]
        _write(tmp_path / f"{split}.mt", "\n".join(mt) + "\n")
        _write(tmp_path / f"{split}.src", "the house\na dog\n")
        tags = ["OK BAD", " ".join(["OK"] * len(mt[1].split()))]
        _write(tmp_path / f"{split}.tags", "\n".join(tags) + "\n")
        align = ["0-0 1-1", f"0-0 1-1 0-{len(mt[1].split()) - 1}"]
        _write(tmp_path / f"{split}.align", "\n".join(align) + "\n")
    return tmp_path


def test_word_qe_refuses_a_long_mt_sentence_naming_the_mt_file(tmp_path):
    data = WordQEDataModule(data_dir=str(_qe_folder(tmp_path, 5)), max_tokens=4)
    with pytest.raises(MalformedLine) as error:
        data.setup("fit")
    _refused(error.value, tmp_path / "dev.mt", 2, 4)


def test_word_qe_truncation_drops_the_alignment_pairs_beyond_the_cut(tmp_path):
    data = WordQEDataModule(data_dir=str(_qe_folder(tmp_path, 5)), max_tokens=4,
                            length_policy="truncate")
    with pytest.warns(UserWarning, match=r"dev\.mt: 1 example longer than max_tokens=4"):
        data.setup("fit")
    cut = data.datasets["val"].sentences[1]
    assert (len(cut.words), len(cut.tags), cut.source) == (4, 4, ("a", "dog"))
    assert cut.alignment == ((0, 0), (1, 1))


# ----------------------------------------------------------------------------- tagging codecs


def _tagging_codec(limit=None):
    vocab = Vocabulary(["a", "b"])
    return TaggingCodec(vocab, Vocabulary(["a", "b"]), Vocabulary(["O"], specials=("<pad>",)),
                        limit)


def test_tagging_codec_refuses_a_long_raw_line_naming_source_and_line():
    codec = restore_codec(codec_record(_tagging_codec(LengthLimit(3))))
    assert len(codec.parse(["a b a", "a"], "in.txt")) == 2
    with pytest.raises(RawInputError, match=r"^in\.txt:3: sentence of 4 words is longer than "
                                            r"max_tokens=3"):
        codec.parse(["a b", "", "a b a b"], "in.txt")


def test_tagging_codec_truncates_raw_lines_when_its_limit_says_so():
    codec = restore_codec(codec_record(_tagging_codec(LengthLimit(3, "truncate"))))
    with pytest.warns(UserWarning, match=r"in\.txt: 1 example longer than max_tokens=3"):
        examples = codec.parse(["a b a b"], "in.txt")
    assert examples[0].words == ("a", "b", "a")


def test_qe_codec_keeps_the_limit_and_an_old_state_gets_the_default():
    words = Vocabulary(["a"])
    codec = QECodec(words, words, Vocabulary(["OK"], specials=("<pad>",)), words,
                    LengthLimit(2))
    with pytest.raises(RawInputError, match=r"^<input>:1: sentence of 3 words .*max_tokens=2"):
        restore_codec(codec_record(codec)).parse(["a a\ta a a\t0-0"])
    old = codec_record(codec)
    for key in ("max_tokens", "length_policy"):
        del old["state"][key]
    assert restore_codec(old).limit.state() == {"max_tokens": MAX_TOKENS,
                                                "length_policy": "error"}
