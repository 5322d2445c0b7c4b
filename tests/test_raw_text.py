"""Raw text means raw text (issue 47, item 4): a tagger's codec splits raw sentences into words
the way its training data was split (:mod:`lit_structattn.datamodules.treebank`) and keeps
the tokenizer's name in its state; already-tokenised text reads unchanged; every family's
codec numbers its examples by input line and skips blank lines by one rule
(:func:`~lit_structattn.common.codec.is_blank`); ``pretokenized`` is a tagger's alone. The
trained taggers' ``tag``/``predict`` are tested in ``tests/test_tagging_raw.py``."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from lit_structattn.common.codec import (
    RawInputError,
    codec_record,
    is_blank,
    restore_codec,
)
from lit_structattn.datamodules.babi import StoryCodec
from lit_structattn.datamodules.files import data_root
from lit_structattn.datamodules.nli import LABELS, PairCodec
from lit_structattn.datamodules.synthetic import NeedleCodec
from lit_structattn.datamodules.tagging import TaggingCodec
from lit_structattn.datamodules.tree_transduction import TreeTransductionDataModule
from lit_structattn.datamodules.treebank import TOKENIZERS, treebank_words, ud_words
from lit_structattn.datamodules.ud_pos import UDPOSDataModule
from lit_structattn.datamodules.vocabulary import Vocabulary
from lit_structattn.datamodules.word_qe import QECodec
from lit_structattn.models.easy_first import EasyFirstDecoderOptions, EasyFirstTagger
from lit_structattn.models.tagging_encoder import TaggingEncoderOptions
from lit_structattn.tasks import TaggingTask

RAW = {  # raw sentence -> its words as CoNLL-2003 / the Penn Treebank split them
    "I live in New York.": "I live in New York .",
    "I don't know, can't and won't.": "I do n't know , ca n't and wo n't .",
    "John's students' books": "John 's students ' books",
    'He said "hello." (in the U.S.)': 'He said " hello . " ( in the U.S. )',
    "Mr. Smith paid $5 for 50%...": "Mr. Smith paid $ 5 for 50 % ...",
    "J. Smith wrote 3.5 e-mails to 1,000 people?!": "J. Smith wrote 3.5 e-mails to 1,000 "
                                                    "people ? !",
    "1. Michelle Freeman ( Jamaica ) 12.71": "1. Michelle Freeman ( Jamaica ) 12.71",
}
TOKENISED = ["John Smith said in Paris .", "Zzyzx talks with EU .", "I do n't know 's",
             "the U.S. and ... -- '' `` ( ) Anglo-Dutch 1-0", "He 's got ta go !"]


@pytest.mark.parametrize("raw", list(RAW))
def test_treebank_words_split_punctuation_and_clitics(raw):
    assert treebank_words(raw) == tuple(RAW[raw].split())


def test_ud_words_also_split_hyphens():
    assert ud_words("a 15-year term, anti-war.") == ("a", "15", "-", "year", "term", ",",
                                                     "anti", "-", "war", ".")


@pytest.mark.parametrize("tokenised", TOKENISED)
def test_tokenised_text_reads_unchanged(tokenised):
    assert treebank_words(tokenised) == tuple(tokenised.split())


def test_blank_text_has_no_words_and_is_blank():
    for blank in ("", "  \t ", [], ["", " "]):
        assert is_blank(blank)
        if isinstance(blank, str):
            assert all(tokenize(blank) == () for tokenize in TOKENIZERS.values())
    assert not is_blank(".") and not is_blank(["a"])


EWT = data_root() / "ud_english_ewt" / "en_ewt-ud-dev.conllu.gz"
CONLL = data_root() / "conll2003_en" / "eng.testa"


@pytest.mark.skipif(not EWT.is_file(), reason=f"no {EWT}")
def test_ud_words_split_most_ewt_raw_sentences_as_the_treebank():
    """UD English-EWT's dev sentences: their raw ``# text`` split by :func:`ud_words` gives
    the treebank's words for 87% of them (whitespace: 16%), and the treebank's words joined by
    spaces read back unchanged for 96%."""
    sentences = list(ewt_sentences(EWT))
    exact = sum(list(ud_words(text)) == words for text, words in sentences) / len(sentences)
    spaces = sum(text.split() == words for text, words in sentences) / len(sentences)
    unchanged = sum(list(ud_words(" ".join(words))) == words
                    for _, words in sentences) / len(sentences)
    assert len(sentences) == 2001 and exact > 0.85 and spaces < 0.2 and unchanged > 0.95


@pytest.mark.skipif(not CONLL.is_file(), reason=f"no {CONLL}")
def test_tokenised_conll_sentences_read_unchanged():
    """CoNLL-2003's development sentences joined by spaces: :func:`treebank_words` gives their
    words back for all but one (``'S `LOST PASSPORT '``: a backquote the data kept)."""
    sentences = list(conll_sentences(CONLL))
    changed = [words for words in sentences if list(treebank_words(" ".join(words))) != words]
    assert len(sentences) == 3250 and len(changed) == 1


def conll_sentences(path: Path):
    """The words of every sentence of a CoNLL-2003 file."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        word = line.split(" ")[0]
        if word and word != "-DOCSTART-":
            words.append(word)
        elif not word and words:
            yield words
            words = []


def ewt_sentences(path: Path):
    """``(raw text, words)`` of every sentence of a CoNLL-U file (the syntactic words, as
    the POS DataModule reads them: no multiword ranges)."""
    text, words = None, []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            line = line.rstrip("\n")
            if line.startswith("# text = "):
                text = line[len("# text = "):]
            elif line and not line.startswith("#"):
                word_id, form = line.split("\t")[:2]
                words += [form] if word_id.isdigit() else []
            elif not line and text is not None:
                yield text, words
                text, words = None, []


# ----------------------------------------------------------------------------- codecs


def vocab(tokens, tags=False) -> Vocabulary:
    return Vocabulary(tokens, ("<pad>",) if tags else ("<pad>", "<unk>"))


def tagging_codec(**options) -> TaggingCodec:
    return TaggingCodec(vocab(["the", "New", "York", "."]), vocab(["t", "N"]),
                        vocab(["DET", "PROPN", "PUNCT"], tags=True), **options)


def test_the_tokenizer_travels_with_the_codec_and_an_old_codec_tokenises():
    codec = tagging_codec(tokenizer="ud")
    again = restore_codec(codec_record(codec))
    assert again.tokenizer == "ud" and again.state() == codec.state()
    old = codec.state()
    del old["tokenizer"]  # a codec saved before it kept one (tests/old_checkpoints)
    assert TaggingCodec.from_state(old).tokenizer == "treebank"
    assert again.read("a well-known New York.").words == ("a", "well", "-", "known", "New",
                                                         "York", ".")
    assert again.pretokenized().read("New York.").words == ("New", "York.")
    assert again.tokenizer == "ud"  # the copy changed, not the codec
    with pytest.raises(ValueError, match="unknown tokenizer 'moses'; valid: treebank, ud, "
                       "whitespace"):
        tagging_codec(tokenizer="moses")


def test_the_ud_data_tokenises_as_ud_and_qe_never():
    assert UDPOSDataModule.tokenizer == "ud"
    qe = QECodec(vocab(["the"]), vocab(["t"]), vocab(["BAD", "OK"], tags=True), vocab(["a"]))
    assert restore_codec(codec_record(qe)).tokenizer == "whitespace"
    [example] = qe.parse(["the cat.\ta b.\t0-0 1-1"])  # the alignment counts the words given
    assert example.words == ("the", "cat.") and example.source == ("a", "b.")


def codecs() -> dict:
    """A codec of every family whose raw format is one example a line, and a line of each."""
    return {
        "tagging": (tagging_codec(), "the New York."),
        "nli": (PairCodec(vocab(["a", "man"]), LABELS), "a man\ta man"),
        "formulas": (TreeTransductionDataModule(train_per_depth=1, eval_per_depth=1)
                     .text_codec(), "( + 1 2 )"),
        "needle": (NeedleCodec(vocab_size=12), "3 1 11"),
    }


@pytest.mark.parametrize("family", list(codecs()))
def test_every_codec_numbers_its_lines_and_skips_blank_ones(family):
    codec, line = codecs()[family]
    numbers, examples = codec.parse_numbered(["", line, " \t ", line, ""], "in.txt")
    assert numbers == [2, 4] and examples == codec.parse([line, line])
    with pytest.raises(RawInputError, match=r"^in.txt:3: "):
        codec.parse_numbered([line, "", "\x01 ( 9 9 \t \t"], "in.txt")


def test_babi_records_are_numbered_by_their_question_lines():
    codec = StoryCodec(vocab(["mary", "moved", "to", "the", "bathroom", "where", "is"]), 5)
    story = ["1 Mary moved to the bathroom.", "2 Where is Mary?", "", "1 Mary moved to the "
             "bathroom.", "2 Mary moved to the bathroom.", "3 Where is Mary?"]
    numbers, questions = codec.parse_numbered(story)
    assert numbers == [2, 6] and [len(q.memory) for q in questions] == [1, 2]


def test_only_the_taggers_read_pretokenized_input():
    for family, (codec, _) in codecs().items():
        if family != "tagging":
            with pytest.raises(ValueError, match="pretokenized input applies to the taggers"):
                codec.pretokenized()


def test_tag_tokenises_with_the_codec_of_the_task():
    model = EasyFirstTagger(
        6, 4, 4, encoder=TaggingEncoderOptions(word_dim=2, affix_dim=2, hidden_dim=2),
        decoder=EasyFirstDecoderOptions(steps=0))
    task = TaggingTask(model, ["<pad>", "DET", "PROPN", "PUNCT"]).eval()
    task.text_codec = tagging_codec()
    [record] = task.tag("I live in New York.")
    assert record["line"] == 1 and record["words"] == ["I", "live", "in", "New", "York", "."]
    assert len(record["tags"]) == 6
    [record] = task.tag("I live in New York.", pretokenized=True)
    assert record["words"] == ["I", "live", "in", "New", "York."]
    assert task.tag(["", "  "]) == []
