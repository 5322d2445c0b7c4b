"""Raw text through a trained tagger: an NER model with a CRF and easy-first sketch steps, and
a word-level QE model, each fitted on tiny generated files, load in a fresh process without
data and tag raw sentences (``TaggingTask.tag``, ``predict_text``, ``structattn predict``)
exactly as the DataModule's batches are tagged, tokenised as the training data was (or as given,
``pretokenized``), each record with its line number, blank lines skipped alike in the API and
the CLI; malformed lines are named by file and line."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch

from lit_structattn.cli import command as cli
from lit_structattn.common.codec import RawInputError, codec_record, restore_codec
from lit_structattn.datamodules.conll_ner import CoNLLNERDataModule
from lit_structattn.datamodules.tagging import TaggedSentence, TaggingCodec, collate_tagged
from lit_structattn.datamodules.word_qe import QECodec, WordQEDataModule
from lit_structattn.run.lightning_cli import build_cli
from lit_structattn.tasks import TaggingTask, load_task
from tests.raw_prediction import fresh_process, numbered, predict_raw, refused
from tests.test_tagging_cli import EASY
from tests.test_vectors import tiny_qe

NER = [  # (word, IOB2 tag) sentences; every training sentence twice, so min_count 2 keeps them
    [("Peter", "B-PER"), ("Blackburn", "I-PER"), ("visited", "O"), ("Brussels", "B-LOC"),
     (".", "O")],
    [("EU", "B-ORG"), ("rejects", "O"), ("German", "B-MISC"), ("call", "O"), (".", "O")],
    [("Germany", "B-LOC"), ("'s", "O"), ("representative", "O"), ("to", "O"), ("the", "O"),
     ("European", "B-ORG"), ("Union", "I-ORG"), (".", "O")],
    [("Peter", "B-PER"), ("called", "O"), ("the", "O"), ("EU", "B-ORG"), (".", "O")],
]
RAW = ["Peter Blackburn visited Brussels .", "Zzyzx rejects the EU call ."]  # Zzyzx: unknown
NER_TAGS = ["B-LOC", "B-MISC", "B-ORG", "B-PER", "I-ORG", "I-PER", "O"]
QE_RAW = ["the cat sat\ta b\t0-0 1-1", "Paris sat\tc d\t0-1 1-0 1-1"]
SMALL = [f"--model.init_args.model.init_args.{name}=6"
         for name in ("encoder.word_dim", "encoder.affix_dim", "encoder.hidden_dim",
                      "decoder.sketch_dim", "decoder.preattention_dim")]


def write_conll(path, sentences) -> None:
    """``sentences`` as a CoNLL-2003 file (``WORD POS CHUNK NER``, dummy POS and chunk)."""
    blocks = ["-DOCSTART- -X- -X- O\n"]
    blocks += ["".join(f"{word} X X {tag}\n" for word, tag in sentence) for sentence in sentences]
    path.write_text("\n".join(blocks))


def fit(tmp_path, dataset: str, row: str, data_dir) -> tuple:
    """Fit one epoch of ``configs/easy_first/{dataset}.yaml`` with ``row`` on ``data_dir``:
    ``(last checkpoint, the DataModule)``."""
    run = tmp_path / "run"
    cli = build_cli([
        "fit", "--config", str(EASY / "common.yaml"), "--config", str(EASY / f"{dataset}.yaml"),
        "--config", str(EASY / "rows" / f"{row}.yaml"), *SMALL,
        "--data.init_args.data_dir", str(data_dir), "--data.init_args.batch_size", "4",
        "--trainer.default_root_dir", str(run), "--trainer.max_epochs", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.logger", "false",
    ])
    return next(run.rglob("last.ckpt")), cli.datamodule


@pytest.fixture(scope="module")
def ner(tmp_path_factory):
    """An NER tagger with a CRF and 5 csoftmax sketch steps (NEF-CRF-F) on tiny CoNLL files."""
    folder = tmp_path_factory.mktemp("ner")
    write_conll(folder / "eng.train", NER + NER)
    write_conll(folder / "eng.testa", NER[:2])
    write_conll(folder / "eng.testb", [NER[3], NER[2], NER[0]])
    return fit(folder, "ner_en", "nef_crf_f_5", folder)


@pytest.fixture(scope="module")
def qe(tmp_path_factory):
    """A word-level QE tagger (NEF-CRF-F) on the tiny QE files of :func:`tiny_qe`."""
    folder = tmp_path_factory.mktemp("qe")
    tiny_qe(folder)
    return fit(folder, "qe", "nef_crf_f_5", folder)


def check_record(record: dict, words: list[str], tags: list[str], steps: int) -> None:
    """Words as given, one known tag each, ``steps`` attention rows of distributions over the
    words, and every word's CRF marginals a distribution over ``tags``."""
    length = len(words)
    assert record["words"] == words
    assert len(record["tags"]) == length and set(record["tags"]) <= set(tags)
    attention = torch.tensor(record["attention"])
    assert attention.shape == (min(steps, length), length)
    assert torch.allclose(attention.sum(-1), torch.ones(len(attention)), atol=1e-3)
    assert record["tag_names"] == tags
    marginals = torch.tensor(record["marginals"])
    assert marginals.shape == (length, len(tags)) and marginals.min() >= 0
    assert torch.allclose(marginals.sum(-1), torch.ones(length), atol=1e-3)


# ----------------------------------------------------------------------------- NER


def test_fresh_process_tags_raw_sentences(ner, tmp_path):
    checkpoint, _ = ner
    out = fresh_process(tmp_path, f"""
        import json
        from lit_structattn.tasks import TaggingTask, load_task
        task = load_task({str(checkpoint)!r})
        same = TaggingTask.load_from_checkpoint({str(checkpoint)!r}, map_location="cpu")
        records = task.tag({RAW!r}, batch_size=1)
        assert same.tag([line.split() for line in {RAW!r}]) == records  # words as lists
        assert task.predict_text({RAW!r}) == records
        print(json.dumps({{"class": type(task).__name__, "records": records}}))
    """)
    assert out["class"] == "TaggingTask"
    for line, record in zip(RAW, out["records"], strict=True):
        check_record(record, line.split(), NER_TAGS, steps=5)
        assert "source" not in record


def test_raw_sentences_tag_as_the_datamodule_batches(ner, tmp_path):
    checkpoint, trained_on = ner
    data = CoNLLNERDataModule(trained_on.hparams.data_dir, language="en", batch_size=2,
                              min_count=2)  # as configs/easy_first/ner_en.yaml
    data.setup()
    task = load_task(checkpoint)
    test = data.datasets["test"]
    # the codec's batch is the DataModule's, but for the (unknown) tags
    raw = task.text_codec.batch(task.text_codec.parse(" ".join(s.words) for s in test.sentences))
    expected = collate_tagged(list(test))
    assert torch.equal(raw.pop("tags"), torch.zeros_like(expected.pop("tags")))
    assert raw.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(raw[key], value), key

    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    predicted = [r for batch in trainer.predict(task, datamodule=data) for r in batch]
    order = [i for batch in data.predict_dataloader() for i in batch["index"].tolist()]
    by_index = dict(zip(order, predicted, strict=True))
    tagged = task.tag([" ".join(s.words) for s in test.sentences], batch_size=3)
    assert len(tagged) == len(test) == len(by_index)
    for index, record in enumerate(tagged):
        assert record["words"] == by_index[index]["words"]
        assert record["tags"] == by_index[index]["tags"]
        for key in ("attention", "marginals"):
            assert torch.allclose(torch.tensor(record[key]), torch.tensor(by_index[index][key]),
                                  atol=1e-4)


def test_structattn_predict_tags_a_raw_file_and_names_a_bad_line(ner, tmp_path, capsys):
    checkpoint, _ = ner
    raw = tmp_path / "sentences.txt"
    raw.write_text("\n".join(RAW) + "\n\n")
    records = predict_raw(checkpoint, raw, tmp_path)
    assert [r["words"] for r in records] == [line.split() for line in RAW]
    assert [r["line"] for r in records] == [1, 2]

    raw.write_text(RAW[0] + "\n" + QE_RAW[0] + "\n")  # a QE line for an NER model
    stderr = refused(checkpoint, raw, 2, capsys)
    assert f"structattn: error: {raw}:2: a tab in the sentence" in stderr


UNTOKENISED = "Peter Blackburn visited Brussels.\n\n  \nZzyzx rejects the EU's call.\n"
TOKENISED = [["Peter", "Blackburn", "visited", "Brussels", "."],
             ["Zzyzx", "rejects", "the", "EU", "'s", "call", "."]]


def predict_in_process(checkpoint, raw, *options: str) -> list[dict]:
    """The records ``structattn predict`` writes for the file ``raw`` (in this process: the
    same arithmetic as the API's, to the last digit)."""
    output = raw.with_suffix(".jsonl")
    cli.main(["predict", "--ckpt_path", str(checkpoint), "--input", str(raw), "--output",
              str(output), *options])
    return [json.loads(line) for line in output.read_text().splitlines()]


def test_raw_text_is_tokenised_numbered_and_blank_lines_skipped_alike(ner, tmp_path):
    checkpoint, _ = ner
    task = load_task(checkpoint)
    raw = tmp_path / "raw.txt"
    raw.write_text(UNTOKENISED)
    records = predict_in_process(checkpoint, raw)
    lines, tagged = numbered(records)
    assert lines == [1, 4] and [r["words"] for r in tagged] == TOKENISED
    assert task.tag(UNTOKENISED.splitlines()) == records  # blank sentences: no record either
    assert task.predict_text(UNTOKENISED.splitlines()) == records
    assert task.tag(["", [], *UNTOKENISED.splitlines()])[0]["line"] == 3  # positions
    assert numbered(task.tag(TOKENISED)) == ([1, 2], tagged)  # lists of words: as they are
    assert task.tag(UNTOKENISED.splitlines()[0]) == records[:1]  # a bare string: one sentence
    assert task.tag("   ") == []

    as_given = predict_in_process(checkpoint, raw, "--pretokenized")
    assert [r["words"] for r in as_given] == [line.split() for line in UNTOKENISED.splitlines()
                                              if line.strip()]
    assert [r["line"] for r in as_given] == [1, 4]
    assert task.tag(UNTOKENISED.splitlines(), pretokenized=True) == as_given
    assert task.predict_text(UNTOKENISED, pretokenized=True) == as_given  # a file's text


def test_tag_names_a_bad_sentence_by_its_position(ner):
    task = load_task(ner[0])
    limit = task.text_codec.limit.max_tokens
    with pytest.raises(RawInputError, match=rf"<input>:3: sentence of {limit + 1} words is "):
        task.tag(["EU rejects", " ", "EU " * (limit + 1)])
    with pytest.raises(RawInputError, match=r"<input>:1: a source sentence .* reads none"):
        task.tag(["EU rejects"], sources=["a"], alignments=["0-0"])


def test_records_of_a_bilstm_without_crf_have_no_attention_nor_marginals():
    from lit_structattn.models.easy_first import EasyFirstDecoderOptions, EasyFirstTagger
    from lit_structattn.models.tagging_encoder import TaggingEncoderOptions

    codec = TaggingCodec(_vocab(["the", "cat"]), _vocab(["t", "c"]),
                         _vocab(["DET", "NOUN"], tags=True))
    model = EasyFirstTagger(
        4, 3, 4, encoder=TaggingEncoderOptions(word_dim=2, affix_dim=2, hidden_dim=2),
        decoder=EasyFirstDecoderOptions(steps=0))
    task = TaggingTask(model, ["<pad>", "DET", "NOUN"]).eval()
    examples = codec.parse(["the dog"])
    assert examples == [TaggedSentence(("the", "dog"), ("<pad>", "<pad>"))]
    [record] = task.records(codec.batch(examples), examples)
    assert record["words"] == ["the", "dog"] and set(record) == {"words", "tags"}
    assert len(record["tags"]) == 2 and set(record["tags"]) <= {"DET", "NOUN"}


def _vocab(tokens, tags=False):
    from lit_structattn.datamodules.vocabulary import Vocabulary

    return Vocabulary(tokens, ("<pad>",) if tags else ("<pad>", "<unk>"))


def test_tagging_codec_round_trips_through_a_weights_only_checkpoint(tmp_path):
    codec = TaggingCodec(_vocab(["the"]), _vocab(["t"]), _vocab(["DET"], tags=True))
    torch.save(codec_record(codec), tmp_path / "codec.pt")
    again = restore_codec(torch.load(tmp_path / "codec.pt", weights_only=True))
    assert type(again) is TaggingCodec and again.state() == codec.state()
    batch = again.batch(again.parse(["the THE Tea"]))
    assert batch["words"].tolist() == [[2, 1, 1]] and batch["caps"].tolist() == [[1, 3, 2]]


# ----------------------------------------------------------------------------- word-level QE


def test_fresh_process_estimates_raw_qe_examples(qe, tmp_path):
    checkpoint, _ = qe
    out = fresh_process(tmp_path, f"""
        import json
        from lit_structattn.tasks import load_task
        task = load_task({str(checkpoint)!r})
        records = task.predict_text({QE_RAW!r})
        again = task.tag(["the cat sat", ["Paris", "sat"]], sources=["a b", ["c", "d"]],
                         alignments=["0-0 1-1", [(0, 1), (1, 0), (1, 1)]])
        assert again == records
        print(json.dumps({{"class": type(task.text_codec).__name__, "records": records}}))
    """)
    assert out["class"] == "QECodec"
    for number, (line, record) in enumerate(zip(QE_RAW, out["records"], strict=True), 1):
        assert record["line"] == number
        mt, source, _ = line.split("\t")
        check_record(record, mt.split(), ["BAD", "OK"], steps=5)
        assert record["source"] == source.split()


def test_raw_qe_examples_tag_as_the_datamodule_batches(qe, tmp_path):
    checkpoint, trained_on = qe
    data = WordQEDataModule(trained_on.hparams.data_dir, batch_size=2)
    data.setup()
    task = load_task(checkpoint)
    sentences = data.datasets["train"].sentences
    lines = ["\t".join((" ".join(s.words), " ".join(s.source),
                        " ".join(f"{i}-{j}" for i, j in s.alignment))) for s in sentences]
    raw = task.text_codec.batch(task.text_codec.parse(lines))
    expected = collate_tagged(list(data.datasets["train"]))
    raw.pop("tags"), expected.pop("tags")
    assert raw.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(raw[key], value), key
    task.eval()
    with torch.no_grad():
        outputs = task(expected)
    prediction = task.model.predict(outputs, expected["lengths"])
    for b, record in enumerate(task.predict_text(lines)):
        length = len(record["words"])
        assert record["tags"] == [task.tag_names[t] for t in prediction[b, :length].tolist()]


def test_structattn_predict_reads_qe_lines_and_names_a_bad_one(qe, tmp_path, capsys):
    checkpoint, _ = qe
    raw = tmp_path / "qe.tsv"
    raw.write_text("\n".join(QE_RAW) + "\n")
    records = predict_raw(checkpoint, raw, tmp_path)
    assert [r["source"] for r in records] == [["a", "b"], ["c", "d"]]
    assert all(set(r["tags"]) <= {"OK", "BAD"} for r in records)

    raw.write_text(QE_RAW[0] + "\nthe cat\ta b\t0-0 0-5\nthe cat\n")
    stderr = refused(checkpoint, raw, 2, capsys)
    assert f"{raw}:2: alignment 0-5 out of range (2 source words, 2 MT words" in stderr


def test_qe_codec_names_what_is_missing_or_malformed():
    codec = QECodec(_vocab(["the"]), _vocab(["t"]), _vocab(["BAD", "OK"], tags=True),
                    _vocab(["a"]))
    again = restore_codec(codec_record(codec))
    assert type(again) is QECodec and again.state() == codec.state()
    for line, problem in [("the cat", "expected MT sentence<TAB>.* found 1 tab-separated field$"),
                          ("the\ta\t0:0", "invalid alignment '0:0'"),
                          ("\ta\t", "empty MT sentence"),
                          ("the\t \t", "empty source sentence")]:
        with pytest.raises(RawInputError, match=rf"^qe.tsv:1: {problem}"):
            codec.parse([line], "qe.tsv")
    with pytest.raises(ValueError, match="source sentence and their alignment"):
        codec.example("the cat")
    [example] = codec.parse(["the cat\ta b\t"])  # an empty alignment: no source word aligned
    assert codec.batch([example])["aligned"].tolist() == [[[0], [0]]]
