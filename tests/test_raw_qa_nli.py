"""Raw text through trained bAbI, NLI and needle-demo models: each checkpoint answers raw
stories, classifies raw pairs or sequences in a fresh process without data (``answer``,
``classify``, ``structattn predict``) exactly as its predict step does on the DataModule's
batches; the codecs name a bad line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lit_structattn.common.codec import RawInputError, codec_record, restore_codec
from lit_structattn.datamodules.babi import BabiDataModule, StoryCodec
from lit_structattn.datamodules.nli import LABELS, NLIDataModule, PairCodec
from lit_structattn.datamodules.synthetic import NeedleCodec, NeedleDataModule
from lit_structattn.datamodules.vocabulary import Vocabulary
from lit_structattn.prepare.parser import parser_settings
from lit_structattn.run.lightning_cli import build_cli
from lit_structattn.tasks import load_task
from tests.raw_prediction import fresh_process, numbered, predict_raw, refused
from tests.test_babi_cli import tiny as babi_args
from tests.test_babi_data import STORY
from tests.test_cache_keys import cache_parser, write_treebank
from tests.test_nli_cli import parser_record
from tests.test_nli_cli import tiny as nli_args
from tests.test_seq2seq_cli import ROOT

QUIET = ("--trainer.logger", "false", "--trainer.callbacks", "null",
         "--trainer.enable_checkpointing", "false", "--trainer.max_epochs", "1")
GLOVE = "sees 1 0 0\nw1 0 1 0\n"  # fixed 3-d vectors for the NLI model


def fit_and_save(args: list[str], checkpoint: Path):
    """Fit the tiny run of ``args`` in this process and save its checkpoint; returns the
    CLI (model and set-up DataModule)."""
    cli = build_cli(args, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cli.trainer.save_checkpoint(checkpoint)
    return cli


def distributions(rows: list, shape: tuple[int, ...]) -> bool:
    """Whether ``rows`` has ``shape`` and sums to 1 over its last dimension."""
    values = torch.tensor(rows)
    return values.shape == shape and torch.allclose(values.sum(-1), torch.ones(shape[:-1]),
                                                    atol=1e-3)


# ----------------------------------------------------------------------------- bAbI

BABI_ROWS = ("softmax", "binary_crf")


@pytest.fixture(scope="module")
def babi(tmp_path_factory) -> dict[str, Path]:
    """A MemN2N and a binary-CRF memory fitted for one epoch (no linear start) on the generated
    task-2 stories: row -> checkpoint; ``"data"`` -> the data folder."""
    out = tmp_path_factory.mktemp("babi")
    found = {}
    for row in BABI_ROWS:
        args = babi_args(out / row, row, *QUIET, "--model.init_args.linear_start_epochs", "0")
        fit_and_save(args, out / f"{row}.ckpt")
        found[row] = out / f"{row}.ckpt"
    found["data"] = out / BABI_ROWS[0] / "data"
    return found


def test_fresh_process_answers_a_raw_story(babi, tmp_path):
    story = ["Mary moved to the bathroom.", "John went to the zebra.", "Mary went back to the "
             "hallway."]
    questions = ["Where is Mary?", "Where is John"]
    out = fresh_process(tmp_path, f"""
        import json
        from lit_structattn.tasks import QATask, load_task
        found = {{}}
        for row, path in {[(row, str(babi[row])) for row in BABI_ROWS]!r}:
            task = load_task(path)
            found[row] = {{"class": type(task).__name__,
                          "records": task.answer({story!r}, {questions!r})}}
        same = QATask.load_from_checkpoint({str(babi['softmax'])!r}, map_location="cpu")
        assert same.answer({story!r}, {questions!r}) == found["softmax"]["records"]
        print(json.dumps(found))
    """)
    for row in BABI_ROWS:
        assert out[row]["class"] == "QATask"
        records = out[row]["records"]
        assert [r["question"] for r in records] == ["where is mary", "where is john"]
        for record in records:
            assert record["story"][1] == "john went to the <unk>"  # an unseen word
            assert len(record["story"]) == 3 and isinstance(record["answer"], str)
            assert distributions(record["attention"], (2, 3))  # K = 2 hops over 3 memories
            assert len(record["facts"]) == 2 and all(0 <= f < 3 for f in record["facts"])
        if row == "binary_crf":  # p(z1 = i, z2 = j): a distribution over the pairs
            pairs = torch.tensor(records[0]["edge_marginals"])
            assert pairs.shape == (1, 3, 3) and abs(float(pairs.sum()) - 1) < 1e-3
            assert records[0]["facts"][0] != records[0]["facts"][1]  # no fact twice in a row


@pytest.mark.parametrize("row", BABI_ROWS)
def test_raw_stories_answer_as_the_datamodule_batches(babi, row):
    task = load_task(babi[row]).eval()  # as the predict loop runs it
    data = BabiDataModule(data_dir=str(babi["data"]), task=2, batch_size=4)
    data.setup()
    batch = next(iter(data.predict_dataloader()))
    expected = task.predict_step(batch, 0)
    unanswered = [line.split("\t")[0] for line in STORY.splitlines()]  # answers left out
    questions = task.text_codec.parse(unanswered)
    assert [q.memory for q in questions] == [q.memory for q in data.datasets["test"].questions]
    lines, records = numbered(task.predict_examples([questions[i] for i in batch["index"]], 4))
    assert lines == [1, 2, 3] and records == expected  # without line numbers: positions


def test_structattn_predict_answers_a_babi_file(babi, tmp_path, capsys):
    raw = tmp_path / "stories.txt"
    raw.write_text(STORY + "\n1 Sandra went to the garden.\n2 Where is Sandra?\n")
    records = predict_raw(babi["binary_crf"], raw, tmp_path)
    assert [r["question"] for r in records] == ["where is mary", "where is daniel",
                                                "where is the football", "where is sandra"]
    assert [r["line"] for r in records] == [3, 6, 9, 12]  # the questions' lines (11: blank)
    assert records[-1]["story"] == ["sandra went to the garden"]
    raw.write_text("1 Mary moved to the bathroom.\n3 Where is Mary?\n")
    assert "id 3 does not follow 1" in refused(babi["softmax"], raw, 2, capsys)


def test_story_codec_reads_optional_answers_and_round_trips():
    vocab = Vocabulary(["mary", "moved", "to", "the", "bathroom", "where", "is"])
    codec = restore_codec(codec_record(StoryCodec(vocab, memory_size=1)))
    assert isinstance(codec, StoryCodec) and codec.memory_size == 1
    lines = ["1 Mary moved to the bathroom.", "2 Mary moved to the hallway.", "3 Where is Mary?",
             "4 Where is Mary?\tbathroom\t1 2"]
    unanswered, answered = codec.parse(lines)
    assert unanswered.answer is None and unanswered.supports == ()
    assert answered.memory == (("mary", "moved", "to", "the", "hallway"),)  # memory_size 1
    assert answered.answer == "bathroom" and answered.supports == (-1, 0)
    batch = codec.batch([unanswered, answered])
    assert batch["answer"].tolist() == [0, vocab.id("bathroom")]  # placeholder: padding
    assert batch["supports"].tolist() == [[-1, -1], [-1, 0]]
    assert batch["story"][0, 0, 4] == vocab.unk_id  # "hallway" is unknown
    with pytest.raises(RawInputError, match="s.txt:1: a question before any statement"):
        codec.parse(["1 Where is Mary?"], "s.txt")
    with pytest.raises(RawInputError, match=r"s.txt:3: expected '<id> <question>\\t"):
        codec.parse([*lines[:2], "3 Where?\ta\t1\textra"], "s.txt")


# ----------------------------------------------------------------------------- NLI


@pytest.fixture(scope="module")
def nli(tmp_path_factory) -> dict[str, Path]:
    """The pretrained-structured model (the supervised parser read from a cache, trained on
    with the rest) with fixed input vectors, fitted one epoch on a generated SNLI folder:
    ``checkpoint``, ``data`` (the folder). The vectors file is deleted after the fit."""
    out = tmp_path_factory.mktemp("nli")
    glove = out / "glove.txt"
    glove.write_text(GLOVE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STRUCTATTN_CACHE", str(out / "cache"))
        patch.setenv("STRUCTATTN_DATA", str(write_treebank(out / "data")))
        cache_parser(parser_record()[1], parser_settings(1, 6, 4))
        args = nli_args(out, "pretrained_structured", *QUIET, "--data.init_args.vectors",
                        str(glove), "--data.init_args.vector_dim", "3")
        fit_and_save(args, out / "nli.ckpt")
    glove.unlink()
    return {"checkpoint": out / "nli.ckpt", "data": out / "snli"}


def nli_data(folder: Path, tmp_path: Path) -> NLIDataModule:
    """The set-up DataModule of the :func:`nli` fit (its vectors file written again)."""
    glove = tmp_path / "glove.txt"
    glove.write_text(GLOVE)
    data = NLIDataModule("snli", data_dir=str(folder), vectors=str(glove), vector_dim=3,
                         batch_size=8)
    data.setup()
    return data


def test_fresh_process_classifies_raw_pairs(nli, tmp_path):
    checkpoint = nli["checkpoint"]
    weights = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    assert {"model.parser_ids", "model.parser.embedding.weight", "model.embedding.weight"} <= \
        set(weights)  # the supervised parser, its word-id map and the fixed vectors travel
    premises, hypotheses = ["w0 sees w1.", "A zebra sees w2"], ["W1 w2", "w2 sleeps !"]
    out = fresh_process(tmp_path, f"""
        import json
        from lit_structattn.tasks import NLITask, load_task
        task = load_task({str(checkpoint)!r})
        same = NLITask.load_from_checkpoint({str(checkpoint)!r}, map_location="cpu")
        records = task.classify({premises!r}, {hypotheses!r})
        assert same.classify({premises!r}, {hypotheses!r}) == records
        assert task.classify({premises[0]!r}, {hypotheses[0]!r}) == records[:1]  # one pair
        print(json.dumps({{"class": type(task).__name__, "records": records}}))
    """)
    assert out["class"] == "NLITask"
    first, second = out["records"]
    assert first["premise"] == ["w0", "sees", "w1", "."] and first["hypothesis"] == ["w1", "w2"]
    assert second["premise"] == ["<unk>", "<unk>", "sees", "w2"]  # "a" and "zebra" are unseen
    for record in out["records"]:
        n, m = len(record["premise"]), len(record["hypothesis"])
        assert record["label"] in LABELS and list(record["probabilities"]) == list(LABELS)
        assert max(record["probabilities"], key=record["probabilities"].get) == record["label"]
        assert abs(sum(record["probabilities"].values()) - 1) < 1e-3
        assert distributions(record["attention"], (n, m))
        assert distributions(record["parents"], (n, n + 1))  # the premise's soft parents


def test_raw_pairs_classify_as_the_datamodule_batches(nli, tmp_path):
    task = load_task(nli["checkpoint"]).eval()
    data = nli_data(nli["data"], tmp_path)
    batch = next(iter(data.predict_dataloader()))
    expected = task.predict_step(batch, 0)
    pairs = [data.datasets["test"].pairs[i] for i in batch["index"]]
    lines = [f"{' '.join(p.premise)}\t{' '.join(p.hypothesis)}" for p in pairs]
    assert numbered(task.predict_text(lines, batch_size=len(lines))) == (
        list(range(1, len(lines) + 1)), expected)


def test_structattn_predict_classifies_a_pair_file(nli, tmp_path, capsys):
    raw = tmp_path / "pairs.txt"
    raw.write_text("w0 sees w1.\tw1 w2\n\nw2 sees w3 .\tw3 sleeps\n")
    records = predict_raw(nli["checkpoint"], raw, tmp_path)
    assert [r["hypothesis"] for r in records] == [["w1", "w2"], ["w3", "<unk>"]]
    assert [r["line"] for r in records] == [1, 3]  # the blank line 2 gives none
    raw.write_text("w0 sees w1.\tw1 w2\nw2 sees w3 .\n")
    assert "expected premise<TAB>hypothesis" in refused(nli["checkpoint"], raw, 2, capsys)


def test_pair_codec_tokenizes_as_the_data_and_round_trips():
    vocab = Vocabulary(["a", "man", "sleeps", "."])
    codec = restore_codec(codec_record(PairCodec(vocab, LABELS, lowercase=True)))
    assert isinstance(codec, PairCodec) and codec.labels == LABELS and codec.lowercase
    [pair] = codec.parse(["A man sleeps.\tA woman sleeps"])
    assert pair.premise == ("a", "man", "sleeps", ".") and pair.label is None
    batch = codec.batch([pair])
    assert batch["hypothesis"].tolist() == [[vocab.id("a"), vocab.unk_id, vocab.id("sleeps")]]
    assert batch["labels"].tolist() == [-1]
    for bad in ("A man sleeps.", "A man.\t", "a\tb\tc"):
        with pytest.raises(RawInputError, match="p.txt:1: expected premise<TAB>hypothesis"):
            codec.parse([bad], "p.txt")


# ----------------------------------------------------------------------------- needle demo

NEEDLE = ROOT / "configs" / "demo" / "needle.yaml"


@pytest.fixture(scope="module")
def needle(tmp_path_factory) -> Path:
    """The needle demo fitted for one epoch on 64 sequences; returns its checkpoint."""
    out = tmp_path_factory.mktemp("needle")
    fit_and_save(["--config", str(NEEDLE), "--data.init_args.num_train", "64",
                  "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir",
                  str(out), *QUIET], out / "needle.ckpt")
    return out / "needle.ckpt"


def test_fresh_process_classifies_raw_sequences(needle, tmp_path):
    sequences = ["5 1 7 3", [2, 4, 1, 9, 9, 19]]
    out = fresh_process(tmp_path, f"""
        import json
        from lit_structattn.tasks import SequenceClassifier, load_task
        task = load_task({str(needle)!r})
        same = SequenceClassifier.load_from_checkpoint({str(needle)!r}, map_location="cpu")
        records = task.classify({sequences!r})
        assert same.classify({sequences!r}) == records
        assert task.classify({sequences[0]!r}) == records[:1]  # a bare string: one sequence
        print(json.dumps({{"class": type(task).__name__, "records": records}}))
    """)
    assert out["class"] == "SequenceClassifier"
    assert [r["tokens"] for r in out["records"]] == [[5, 1, 7, 3], [2, 4, 1, 9, 9, 19]]
    for record in out["records"]:
        assert record["prediction"] in range(5)
        assert distributions(record["attention"], (len(record["tokens"]),))


def test_raw_sequences_classify_as_the_datamodule_batches(needle):
    task = load_task(needle).eval()
    data = NeedleDataModule(num_test=12, batch_size=12)
    data.setup()
    batch = next(iter(data.predict_dataloader()))
    expected = task.predict_step(batch, 0)
    lines = [" ".join(map(str, row[:n].tolist()))
             for row, n in zip(batch["tokens"], batch["lengths"], strict=True)]
    assert numbered(task.predict_text(lines, batch_size=12)) == (list(range(1, 13)), expected)


def test_structattn_predict_classifies_a_sequence_file(needle, tmp_path, capsys):
    raw = tmp_path / "sequences.txt"
    raw.write_text("5 1 7 3\n\n2 1 4\n")
    lines, records = numbered(predict_raw(needle, raw, tmp_path))
    assert [r["tokens"] for r in records] == [[5, 1, 7, 3], [2, 1, 4]] and lines == [1, 3]
    raw.write_text("5 1 7 3\n2 1 20 x 0\n")
    assert "token ids outside 1..19: 20 x 0" in refused(needle, raw, 2, capsys)


def test_needle_codec_round_trips():
    codec = restore_codec(codec_record(NeedleDataModule(vocab_size=12).text_codec()))
    assert isinstance(codec, NeedleCodec) and codec.vocab_size == 12
    batch = codec.batch(codec.parse(["3 1 11", "", "2 1"]))
    assert batch["tokens"].tolist() == [[3, 1, 11], [2, 1, 0]]
    assert batch["lengths"].tolist() == [3, 2] and batch["index"].tolist() == [0, 1]
