"""Bounded cost per input (issue 44, item 4): every family's DataModule takes ``max_tokens``
(and, where cutting makes sense, ``length_policy``); a longer example in a data file is refused
naming its ``file:line`` and the limit, or cut with one warning that counts the cuts; the text
codec keeps the limit in its saved state, so raw input to a trained model is refused naming
``<source>:<line>``; a codec saved without the limit loads with the family's default.

Everything runs on tiny files in ``tmp_path`` (or generated data); nothing is trained.
"""

from __future__ import annotations

import gzip
import json

import pytest

from lit_structattn.common.codec import RawInputError, codec_record, restore_codec
from lit_structattn.common.constants import SEQUENCE_SPECIALS
from lit_structattn.datamodules.babi import BabiDataModule
from lit_structattn.datamodules.conll_ner import CoNLLNERDataModule
from lit_structattn.datamodules.files import MalformedLine
from lit_structattn.datamodules.limits import LengthLimit
from lit_structattn.datamodules.morphology import InflectionCodec, InflectionDataModule
from lit_structattn.datamodules.nli import LABELS, NLIDataModule, PairCodec, read_snli
from lit_structattn.datamodules.synthetic import NeedleDataModule
from lit_structattn.datamodules.tagging import MAX_TOKENS, TaggingCodec
from lit_structattn.datamodules.tree_transduction import TreeTransductionDataModule
from lit_structattn.datamodules.ud_pos import UDPOSDataModule
from lit_structattn.datamodules.vocabulary import Vocabulary
from lit_structattn.datamodules.word_qe import QECodec, WordQEDataModule
from tests.raw_prediction import refused
from tests.test_seq2seq_cli import trained  # noqa: F401 (the fixture)


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


# ----------------------------------------------------------------------------- bAbI


def _babi_folder(tmp_path, long_words):
    story = "1 Mary moved to the bathroom.\n2 Where is Mary?\tbathroom\t1\n"
    long = "1 " + " ".join(["Mary"] * long_words) + ".\n2 Where is Mary?\tbathroom\t1\n"
    _write(tmp_path / "qa1_single-supporting-fact_train.txt", story * 10)
    _write(tmp_path / "qa1_single-supporting-fact_test.txt", story + long)
    return tmp_path


def test_babi_refuses_a_long_statement_and_truncates_when_told(tmp_path):
    folder = _babi_folder(tmp_path, 7)
    with pytest.raises(MalformedLine) as error:
        BabiDataModule(data_dir=str(folder), max_tokens=6).setup("fit")
    _refused(error.value, folder / "qa1_single-supporting-fact_test.txt", 3, 6)
    data = BabiDataModule(data_dir=str(folder), max_tokens=6, length_policy="truncate")
    with pytest.warns(UserWarning, match=r"_test\.txt: 1 example longer than max_tokens=6"):
        data.setup("fit")
    assert data.datasets["test"].questions[1].memory == (("mary",) * 6,)


def test_babi_codec_refuses_a_long_raw_question_naming_source_and_line(tmp_path):
    data = BabiDataModule(data_dir=str(_babi_folder(tmp_path, 2)), max_tokens=6)
    codec = restore_codec(codec_record(data.text_codec()))
    raw = ["1 Mary moved to the bathroom.", "2 Where is Mary in the big house?"]
    with pytest.raises(RawInputError, match=r"^story\.txt:2: sentence of 7 words is longer "
                                            r"than max_tokens=6"):
        codec.parse(raw, "story.txt")
    old = codec_record(codec)
    del old["state"]["max_tokens"], old["state"]["length_policy"]
    assert len(restore_codec(old).parse(raw)) == 1  # the default, 100 words


# ----------------------------------------------------------------------------- NLI


SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\tentailment_label\t" + "\t".join("x" * 8) + "\n"


def _sick_row(premise, split):
    return f"1\t{premise}\tA dog runs.\tNEUTRAL\t" + "\t".join(["x"] * 7) + f"\t{split}\n"


def test_nli_refuses_a_long_premise_naming_file_line_and_truncates_when_told(tmp_path):
    long = " ".join(["dog"] * 9)
    _write(tmp_path / "SICK.txt", SICK_HEADER + _sick_row("A cat sleeps.", "TRAIN")
           + _sick_row("A cat sleeps.", "TRIAL") + _sick_row(long, "TEST"))
    with pytest.raises(MalformedLine) as error:
        NLIDataModule(dataset="sick", data_dir=str(tmp_path), max_tokens=8).setup("fit")
    _refused(error.value, tmp_path / "SICK.txt", 4, 8)
    data = NLIDataModule(dataset="sick", data_dir=str(tmp_path), max_tokens=8,
                         length_policy="truncate")
    with pytest.warns(UserWarning, match=r"SICK\.txt: 1 example longer than max_tokens=8"):
        data.setup("fit")
    assert data.datasets["test"].pairs[0].premise == ("dog",) * 8


def test_nli_snli_reader_refuses_a_long_hypothesis(tmp_path):
    row = {"sentence1": "A man sleeps .", "sentence2": " ".join(["a"] * 5),
           "gold_label": "neutral"}
    path = _write(tmp_path / "dev.jsonl", "\n" + json.dumps(row) + "\n")
    with pytest.raises(MalformedLine) as error:
        read_snli(path, limit=LengthLimit(4))
    _refused(error.value, path, 2, 4)


def test_nli_codec_keeps_the_limit():
    codec = PairCodec(Vocabulary(["a"]), LABELS, limit=LengthLimit(3))
    restored = restore_codec(codec_record(codec))
    with pytest.raises(RawInputError, match=r"^pairs:2: premise or hypothesis of 4 words"):
        restored.parse(["a a\ta", "a a a a\ta"], "pairs")


# ----------------------------------------------------------------------------- tree transduction


def test_tree_transduction_refuses_a_long_raw_formula_naming_source_and_line():
    data = TreeTransductionDataModule(train_per_depth=2, eval_per_depth=2, max_tokens=20)
    codec = restore_codec(codec_record(data.text_codec()))
    formula = "( + 1 2 )"
    for _ in range(5):  # 4 symbols more per nesting
        formula = f"( + {formula} 3 )"
    assert len(formula.split()) == 25
    with pytest.raises(RawInputError, match=r"^formulas\.txt:2: formula of 25 symbols is longer "
                                            r"than max_tokens=20 \(raise max_tokens\)$"):
        codec.parse(["( * 1 2 )", formula], "formulas.txt")


def test_tree_transduction_generation_must_fit_the_limit_and_cannot_truncate():
    data = TreeTransductionDataModule(train_per_depth=2, eval_per_depth=2, eval_depths=(2, 6),
                                      max_tokens=30)
    with pytest.raises(ValueError, match=r"generated test formula \d+ \(depth \d\): formula of "
                                         r"\d+ symbols is longer than max_tokens=30"):
        data.setup("fit")
    with pytest.raises(ValueError, match="unknown length_policy 'truncate'; valid: error$"):
        LengthLimit(5, "truncate", truncatable=False)


def test_tree_transduction_default_limit_fits_the_paper_splits():
    data = TreeTransductionDataModule()
    data.setup("fit")  # the paper's sizes, depths up to 6: about a second
    longest = max(len(f.prefix) for split in data.datasets.values() for f in split.formulas)
    assert longest <= data.hparams.max_tokens == 400


# ----------------------------------------------------------------------------- morphology


def test_morphology_refuses_a_long_inflection_naming_file_and_line(tmp_path):
    rows = ["Hauses,Haus,case=genitive:number=singular", "x" * 40 + ",Haus,case=nominative"]
    _write(tmp_path / "inflections_de_noun.csv", "\n".join(rows) + "\n")
    for split in ("train", "dev", "test"):
        _write(tmp_path / f"base_forms_de_noun_{split}.txt", "Haus\n")
    with pytest.raises(MalformedLine) as error:
        InflectionDataModule(data_dir=str(tmp_path), max_tokens=30).setup("fit")
    _refused(error.value, tmp_path / "inflections_de_noun.csv", 2, 30)
    assert "inflection of 40 symbols" in str(error.value)


def test_morphology_codec_refuses_a_long_lemma_and_old_states_get_the_default():
    vocab = Vocabulary(["a", "case=genitive"], specials=SEQUENCE_SPECIALS)
    codec = restore_codec(codec_record(InflectionCodec(vocab, LengthLimit(5, unit="symbols",
                                                                          truncatable=False))))
    with pytest.raises(RawInputError, match=r"^<input>:1: input of 6 symbols is longer than "
                                            r"max_tokens=5"):
        codec.parse(["aaaaa,case=genitive"])
    old = codec_record(codec)
    del old["state"]["max_tokens"], old["state"]["length_policy"]
    assert restore_codec(old).limit.max_tokens == 100


# ----------------------------------------------------------------------------- needle demo


def test_needle_codec_refuses_or_truncates_long_raw_sequences():
    data = NeedleDataModule(min_len=2, max_len=4, max_tokens=4)
    codec = restore_codec(codec_record(data.text_codec()))
    with pytest.raises(RawInputError, match=r"^seq:1: sequence of 5 ids is longer than "
                                            r"max_tokens=4"):
        codec.parse(["2 1 3 4 5"], "seq")
    with pytest.raises(ValueError, match="max_len=20 exceeds max_tokens=4"):
        NeedleDataModule(max_tokens=4, max_len=20)
    cutting = restore_codec(codec_record(NeedleDataModule(min_len=2, max_len=4, max_tokens=4,
                                                          length_policy="truncate")
                                         .text_codec()))
    with pytest.warns(UserWarning, match="seq: 1 example longer than max_tokens=4 ids"):
        assert cutting.parse(["2 1 3 4 5"], "seq") == [[2, 1, 3, 4]]


# ----------------------------------------------------------------------------- translation


def _translation_corpus(tmp_path):
    """The generated corpus, with short test sentences and a long validation pair on line 3
    (after a blank line)."""
    pytest.importorskip("sentencepiece")
    pytest.importorskip("sacremoses")
    from .translation_corpus import write_corpus

    corpus = tmp_path / "corpus"
    write_corpus(corpus, gz=False)
    long = " und ".join(["im Park"] * 30)
    _write(corpus / "val.de", f"Der Hund läuft.\n\nDer Hund läuft {long}.\n")
    _write(corpus / "val.en", "The dog runs.\n\nThe dog runs " + " and ".join(["in the park"] * 30)
           + ".\n")
    _write(corpus / "test.de", "Der Hund läuft.\n")
    _write(corpus / "test.en", "The dog runs.\n")
    return corpus


def _translation(corpus, tmp_path, **kwargs):
    from lit_structattn.datamodules.translation import TranslationDataModule

    return TranslationDataModule(data_dir=str(corpus), prefixes=("train", "val", "test"),
                                 bpe_size=60, batch_size=16, cache_dir=str(tmp_path / "cache"),
                                 max_length=None, max_tokens=20, **kwargs)


def test_translation_bounds_evaluation_pairs_but_keeps_every_training_pair(tmp_path):
    corpus = _translation_corpus(tmp_path)
    with pytest.raises(MalformedLine) as error:
        _translation(corpus, tmp_path).setup()
    _refused(error.value, corpus / "val.de", 3, 20)
    data = _translation(corpus, tmp_path, length_policy="truncate")
    with pytest.warns(UserWarning, match=r"val\.de: 1 example longer than max_tokens=20 units"):
        data.setup()
    assert len(data.datasets["train"]) == 300  # the training split: max_length only
    assert max(len(s) for s, _, _, _ in data.datasets["train"].items) > 20
    assert [len(s) <= 20 and len(t) <= 20 for s, t, _, _ in data.datasets["val"].items] == [
        True, True]
    record = codec_record(data.text_codec())
    assert record["state"]["max_tokens"] == 20
    record["state"]["length_policy"] = "error"
    codec = restore_codec(record)
    with pytest.raises(RawInputError, match=r"^src\.txt:2: source sentence of \d+ units is "
                                            r"longer than max_tokens=20"):
        codec.parse(["Der Hund läuft.", "Der Hund läuft " + " und ".join(["im Park"] * 30)],
                    "src.txt")


# ----------------------------------------------------------------------------- end to end


def test_structattn_predict_refuses_an_over_long_formula_from_a_real_checkpoint(
        trained, tmp_path, capsys):  # noqa: F811
    """The limit travels in the checkpoint (default 400 symbols): the issue's 1,601-symbol
    formula is refused in one line, exit 2, before any decoding."""
    formula = "( + 1 2 )"
    while len(formula.split()) < 1601:
        formula = f"( * {formula} 3 )"
    raw = _write(tmp_path / "formulas.txt", f"( + 1 2 )\n{formula}\n")
    stderr = refused(next(trained.rglob("last.ckpt")), raw, 2, capsys)
    assert "formula of 1601 symbols is longer than max_tokens=400" in stderr.splitlines()[0]
    assert "Traceback" not in stderr
