"""Raw text through a trained encoder-decoder: a tree-transduction checkpoint predicts raw
formulas in a fresh process without data (Python API and ``structattn predict``) exactly as
its predict step does on the DataModule's batches; the inflection codec reads
``lemma,feature_bundle`` lines."""

from __future__ import annotations

import pytest
import torch

from lit_structattn.common.codec import RawInputError, codec_record, restore_codec
from lit_structattn.common.constants import SEQUENCE_SPECIALS
from lit_structattn.datamodules.morphology import InflectionCodec, InflectionDataModule
from lit_structattn.datamodules.tree_transduction import FormulaCodec, TreeTransductionDataModule
from lit_structattn.datamodules.vocabulary import Vocabulary
from lit_structattn.tasks import load_task
from tests.raw_prediction import fresh_process, numbered, predict_raw, refused
from tests.test_seq2seq_cli import trained  # noqa: F401 (the fixture)

FORMULAS = ["( + 1 2 )", "( * 3 ( + 4 5 ) 6 )"]


def test_fresh_process_transduces_raw_formulas(trained, tmp_path):  # noqa: F811
    last = next(trained.rglob("last.ckpt"))
    out = fresh_process(tmp_path, f"""
        import json
        from lit_structattn.tasks import TransductionTask, load_task
        task = load_task({str(last)!r})
        same = TransductionTask.load_from_checkpoint({str(last)!r}, map_location="cpu")
        records = task.transduce({FORMULAS!r})
        assert same.transduce({FORMULAS!r}) == records
        print(json.dumps({{"class": type(task).__name__, "records": records}}))
    """)
    assert out["class"] == "TransductionTask"
    for formula, record in zip(FORMULAS, out["records"], strict=True):
        assert record["input"] == formula
        steps, width = len(record["prediction"].split()) + 1, len(formula.split())
        attention = torch.tensor(record["attention"])
        assert attention.shape == (min(steps, 60), width)
        assert torch.allclose(attention.sum(-1), torch.ones(len(attention)), atol=1e-3)
        parents = torch.tensor(record["parents"])  # the structured encoder's soft parents
        assert parents.shape == (width, width + 1)
        assert torch.allclose(parents.sum(-1), torch.ones(width), atol=1e-3)


def test_raw_formulas_predict_as_the_datamodule_batches(trained):  # noqa: F811
    task = load_task(next(trained.rglob("last.ckpt")))
    data = TreeTransductionDataModule(train_per_depth=30, eval_per_depth=4)
    data.setup()
    batch = next(iter(data.predict_dataloader()))
    expected = task.predict_step(batch, 0)
    lines = [" ".join(data.vocab.decode(row[:n]))
             for row, n in zip(batch["src"], batch["src_lengths"], strict=True)]
    assert numbered(task.predict_text(lines, batch_size=7)) == (
        list(range(1, len(lines) + 1)), expected)


def test_structattn_predict_writes_jsonl_and_names_a_bad_line(trained, tmp_path,  # noqa: F811
                                                              capsys):
    last = next(trained.rglob("last.ckpt"))
    raw = tmp_path / "formulas.txt"
    raw.write_text("\n \n".join(FORMULAS) + "\n\n")
    records = predict_raw(last, raw, tmp_path)
    assert [r["input"] for r in records] == FORMULAS
    assert [r["line"] for r in records] == [1, 3]  # a blank line gives no record

    raw.write_text("( + 1 2 )\n( + 1 7\n")
    assert f"{raw}:2: unbalanced '('" in refused(last, raw, 2, capsys)


def test_formula_codec_refuses_malformed_formulas_and_round_trips():
    codec = TreeTransductionDataModule(train_per_depth=1, eval_per_depth=1).text_codec()
    with pytest.raises(RawInputError, match=r"f.txt:2: expected a number .* got '21'"):
        codec.parse(["( * 1 2 )", "( + 21 3 )"], "f.txt")
    again = restore_codec(codec_record(codec))
    assert isinstance(again, FormulaCodec) and again.vocab.tokens == codec.vocab.tokens


def test_formula_brackets_need_no_spaces():
    codec = TreeTransductionDataModule(train_per_depth=1, eval_per_depth=1).text_codec()
    assert codec.symbols("(+ 1 (* 2 3))") == codec.symbols("( + 1 ( * 2 3 ) )") == [
        "(", "+", "1", "(", "*", "2", "3", ")", ")"]
    with pytest.raises(ValueError):
        codec.symbols("(+ 1 (* 2 3)")


def test_inflection_codec_reads_lemma_and_bundle(tmp_path):
    vocab = Vocabulary(["case=genitive", "number=singular", *"Haus"], SEQUENCE_SPECIALS)
    codec = restore_codec(codec_record(InflectionCodec(vocab)))
    [example] = codec.parse(["Haus,case=genitive:number=singular"])
    assert example == ["case=genitive", "number=singular", "H", "a", "u", "s"]
    batch = codec.batch([example])
    assert batch["src"].tolist() == [vocab.encode(example)]
    with pytest.raises(RawInputError, match="in.txt:2: expected lemma,feature_bundle"):
        codec.parse(["Haus,case=genitive", "Haus"], "in.txt")
    # an unseen character maps to <unk>: the inflection vocabulary has one
    assert codec.batch(codec.parse(["Hüs,case=genitive"]))["src"][0, 2] == vocab.unk_id


def test_inflection_datamodule_codec_has_its_vocabulary(tmp_path):
    folder = tmp_path / "wiktionary"
    folder.mkdir()
    (folder / "inflections_de_noun.csv").write_text(
        "Hauses,Haus,case=genitive:number=singular\nMaus,Maus,case=nominative:number=singular\n"
        "Bau,Bau,case=nominative:number=singular\n")
    for split, lemma in (("train", "Haus"), ("dev", "Maus"), ("test", "Bau")):
        (folder / f"base_forms_de_noun_{split}.txt").write_text(lemma + "\n")
    data = InflectionDataModule(data_dir=str(folder))
    codec = data.text_codec()
    assert codec.vocab.tokens == data.vocab.tokens
    src = codec.batch(codec.parse(["Haus,case=genitive:number=singular"]))["src"][0].tolist()
    assert src == data.datasets["train"].items[0][0]
