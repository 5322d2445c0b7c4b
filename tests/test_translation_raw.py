"""Raw sentences through a trained translation model: a checkpoint (constant fertility with
softmax attention; PREDICTED fertilities with csparsemax and <SINK>) translates raw text in a
fresh process without data or cache (Python API and ``structattn predict``), exactly as its
greedy decoding of the DataModule's batches; the codec encodes GUIDED fertilities, character
sources and word targets as the DataModule does."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from lit_structattn.common.codec import CODEC_KEY, RawInputError, codec_record, restore_codec
from lit_structattn.datamodules.translation import (
    TranslationCodec,
    TranslationDataModule,
    collate_pairs,
)
from lit_structattn.tasks import load_task
from tests.raw_prediction import fresh_process, numbered, predict_raw, refused
from tests.test_translation_task import cli_for, corpus, tiny  # noqa: F401 (the fixture)

SENTENCES = ["Der Hund spielt im Park.", "Die Katze schläft und isst im Garten!"]
ROWS = ("softmax", "csparsemax_predicted")


def assert_same_records(got: list[dict], expected: list[dict], but: tuple = ()) -> None:
    """The records say the same, their attention up to rounding (the batches that made them
    may differ, and the float sums with them)."""
    assert len(got) == len(expected)
    for one, other in zip(got, expected, strict=True):
        assert one.keys() == other.keys()
        for key in one.keys() - {"attention", *but}:
            assert one[key] == other[key]
        torch.testing.assert_close(torch.tensor(one["attention"]),
                                   torch.tensor(other["attention"]), atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> dict:  # noqa: F811
    """Per row of :data:`ROWS`: the DataModule of a tiny fit and its ``last.ckpt``."""
    fitted = {}
    for row in ROWS:
        out = tmp_path_factory.mktemp(row)
        cli = cli_for(tiny(corpus, out, row, "--trainer.max_epochs", "1",
                           "--trainer.limit_train_batches", "4",
                           "--trainer.limit_val_batches", "1",
                           "--model.init_args.drop_score", "false"))
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        fitted[row] = cli.datamodule, next(out.rglob("last.ckpt"))
    return fitted


def test_fresh_process_translates_raw_sentences(runs, corpus, tmp_path):  # noqa: F811
    checkpoints = {row: str(last) for row, (_, last) in runs.items()}
    code = textwrap.dedent(f"""
        import json
        from lit_structattn.tasks import TranslationTask, load_task
        out = {{}}
        for row, path in {checkpoints!r}.items():
            task = load_task(path)
            out[row] = {{"class": type(task).__name__,
                        "records": task.translate({SENTENCES!r}, batch_size=1)}}
        same = TranslationTask.load_from_checkpoint({checkpoints["softmax"]!r})
        out["same"] = same.translate({SENTENCES!r}, batch_size=1)
        print(json.dumps(out))
    """)
    out = fresh_process(tmp_path, code)
    assert out["same"] == out["softmax"]["records"]
    for row, (_, last) in runs.items():
        assert str(corpus) not in str(torch.load(last, weights_only=True)[CODEC_KEY])
        assert out[row]["class"] == "TranslationTask"
        task = load_task(last)
        assert_same_records(out[row]["records"], task.translate(SENTENCES))  # as in here
        sink = int(task.text_codec.sink)
        for sentence, record in zip(SENTENCES, out[row]["records"], strict=True):
            assert record["source"] == sentence and "▁" not in record["translation"]
            assert set(record["target_pieces"]) <= set(task.text_codec.subwords.pieces(
                range(len(task.text_codec.subwords))))
            attention = torch.tensor(record["attention"])
            steps = len(record["target_pieces"]) + 1  # one less when cut at the length limit
            assert len(attention) in (steps, steps - 1)
            assert attention.shape[1] == len(record["source_pieces"]) + sink
            assert (attention >= 0).all()
            assert torch.allclose(attention.sum(-1), torch.ones(len(attention)), atol=1e-3)


@pytest.mark.parametrize("row", ROWS)
def test_raw_sentences_translate_as_the_datamodule_batches(runs, row):
    data, last = runs[row]
    task = load_task(last).eval()
    batch = next(iter(data.test_dataloader()))
    sentences = [data.datasets["test"].pairs[i][0] for i in batch["index"].tolist()]
    lines, records = numbered(task.translate(sentences, batch_size=len(sentences)))
    assert lines == list(range(1, len(sentences) + 1))
    with torch.no_grad():
        expected = task.predict_step(batch, 0)
        greedy = [data.detokenize(ids) for ids in task.decode(batch, beam=1)]
    assert [r["translation"] for r in records] == greedy
    assert [r["source"] for r in records] == sentences
    assert [r["source"] for r in expected] == [  # without the sentences: the subwords say it
        data.subwords.decode(data.subwords.encode(s, "de"), "de") for s in sentences]
    assert_same_records(records, expected, but=("source",))
    codec = task.text_codec
    raw = task.with_fertility(codec.batch(codec.parse(sentences)))
    assert torch.equal(raw["src"], batch["src"])
    assert torch.equal(raw["src_lengths"], batch["src_lengths"])
    assert ("fertility" in raw) == ("fertility" in batch) == (row == "csparsemax_predicted")
    if "fertility" in batch:  # the predictor's, as the data got them in training
        torch.testing.assert_close(raw["fertility"], batch["fertility"], atol=1e-5, rtol=0)


def test_structattn_predict_writes_jsonl_and_names_a_bad_line(runs, tmp_path, capsys):
    _, last = runs["csparsemax_predicted"]
    raw = tmp_path / "sentences.de"
    raw.write_text("\n\n".join(SENTENCES) + "\n\n")
    records = predict_raw(last, raw, tmp_path)
    assert [r["source"] for r in records] == SENTENCES
    assert [r["line"] for r in records] == [1, 3]  # blank lines give no record
    assert all(r["target_pieces"] and r["translation"] for r in records)

    raw.write_text("Der Hund läuft.\n\x01\x02\n")
    assert f"{raw}:2: nothing to translate" in refused(last, raw, 2, capsys)


def test_a_checkpoint_without_sentencepiece_names_the_extra(runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # as if not installed
    with pytest.raises(ImportError, match=r"sentencepiece is not installed: it comes with the "
                       r"'translation' extra"):
        load_task(runs["softmax"][1])


@pytest.mark.parametrize("settings", [
    {"fertility_strategy": "guided", "sink": True},
    {"source_units": "characters", "target_units": "words", "word_vocab_size": 12,
     "max_source_length": 200},
])
def test_codec_encodes_raw_sentences_as_the_datamodule(corpus, settings):  # noqa: F811
    data = TranslationDataModule(data_dir=str(corpus / "corpus"), cache_dir=str(corpus / "cache"),
                                 prefixes=("train", "val", "test"), bpe_size=60, **settings)
    codec = restore_codec(codec_record(data.text_codec()))
    assert isinstance(codec, TranslationCodec) and codec.subwords.model_file is None
    test = data.datasets["test"]
    sentences = codec.parse([f" {source} " for source, _ in test.pairs])
    assert [(s.ids, s.fertility) for s in sentences] == [(src, f) for src, _, _, f in test.items]
    batch, expected = codec.batch(sentences), collate_pairs(test.items)
    assert batch.keys() == expected.keys()
    for key in ("src", "src_lengths", "index") + ("fertility",) * ("fertility" in batch):
        assert torch.equal(batch[key], expected[key])
    for _, target, _, _ in test.items:
        assert codec.subwords.decode(target, "en") == data.detokenize(target)
    with pytest.raises(RawInputError, match=r"f.txt:3: nothing to translate"):
        codec.parse(["Der Hund läuft.", "", "\x01\x02"], "f.txt")


def test_predicted_fertilities_need_their_predictor(corpus):  # noqa: F811
    data = TranslationDataModule(data_dir=str(corpus / "corpus"), cache_dir=str(corpus / "cache"),
                                 prefixes=("train", "val", "test"), bpe_size=60,
                                 fertility_strategy="predicted")
    data.setup()
    data.set_fertilities({split: [[2.0] * len(s) for s in data.source_ids(split)]
                          for split in data.datasets})
    with pytest.raises(RuntimeError, match="needs the fertility predictor"):
        data.text_codec()
    with pytest.raises(ValueError, match="'guided' needs the fertility_table"):
        TranslationCodec(data.subwords, fertility_strategy="guided")
