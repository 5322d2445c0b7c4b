"""NLI data: the SNLI / SICK / GloVe readers on small generated files and on the real files when
present, the DataModule's protocols and batches, and the CoNLL-U HEAD reader."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from lit_structattn.datamodules.files import MalformedLine, data_root
from lit_structattn.datamodules.nli import (
    LABELS,
    OOV_BUCKETS,
    NLIDataModule,
    NLIPair,
    pairs_from_hub,
    read_sick,
    read_snli,
    read_vectors,
)
from lit_structattn.datamodules.ud_pos import read_conllu_trees


def snli_line(premise: str, hypothesis: str, label: str, parse: bool = True) -> str:
    record = {"gold_label": label, "sentence1": premise, "sentence2": hypothesis}
    if parse:
        record["sentence1_binary_parse"] = "( ( " + premise.rstrip(".") + " ) . )"
        record["sentence2_binary_parse"] = hypothesis
    return json.dumps(record)


def write_snli(folder, name: str, lines: list[str]) -> None:
    with gzip.open(folder / name, "wt", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")


def test_read_snli_drops_no_consensus_and_reads_parse_tokens(tmp_path):
    path = tmp_path / "snli.jsonl"
    path.write_text("\n".join([
        snli_line("A Man sleeps.", "A person rests", "entailment"),
        snli_line("A dog runs.", "A cat sits", "-"),
        snli_line("Two kids play.", "Nobody plays!", "contradiction", parse=False),
    ]) + "\n")
    assert read_snli(path) == [
        NLIPair(("a", "man", "sleeps", "."), ("a", "person", "rests"), "entailment"),
        NLIPair(("two", "kids", "play", "."), ("nobody", "plays", "!"), "contradiction"),
    ]
    assert read_snli(path, lowercase=False)[0].premise == ("A", "Man", "sleeps", ".")


@pytest.mark.parametrize("bad", ['{"sentence1": "a", "gold_label": "neutral"}', "not json",
                                 snli_line("a b", "c d", "maybe")])
def test_read_snli_malformed_line_names_file_and_line(tmp_path, bad):
    path = tmp_path / "snli.jsonl"
    path.write_text(snli_line("a b", "c d", "neutral") + "\n\n" + bad + "\n")
    with pytest.raises(MalformedLine) as error:
        read_snli(path)
    assert error.value.line == 3 and str(error.value).startswith(f"{path}:3:")


SICK_HEADER = ("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\t"
               "entailment_AB\tentailment_BA\tsentence_A_original\tsentence_B_original\t"
               "sentence_A_dataset\tsentence_B_dataset\tSemEval_set")


def sick_line(number: int, a: str, b: str, label: str, semeval_set: str) -> str:
    return "\t".join([str(number), a, b, label, "4.5", "x", "y", a, b, "FLICKR", "FLICKR",
                      semeval_set])


def test_read_sick_splits_by_semeval_set(tmp_path):
    path = tmp_path / "SICK.txt"
    lines = [SICK_HEADER, sick_line(1, "A man is playing", "A man plays", "ENTAILMENT", "TRAIN"),
             sick_line(2, "A dog", "No dog", "CONTRADICTION", "TEST"),
             sick_line(3, "A cat", "A cat, sleeping", "NEUTRAL", "TRIAL")]
    path.write_bytes("\r\n".join(lines).encode() + b"\r\n")  # CRLF, as the real file
    splits = read_sick(path)
    assert splits["train"] == [NLIPair(("a", "man", "is", "playing"), ("a", "man", "plays"),
                                       "entailment")]
    assert splits["val"] == [NLIPair(("a", "cat"), ("a", "cat", ",", "sleeping"), "neutral")]
    assert [p.label for p in splits["test"]] == ["contradiction"]
    path.write_text("\n".join([*lines[:2], "3\tonly\tthree columns", lines[3]]) + "\n")
    with pytest.raises(MalformedLine, match=r"SICK.txt:3: expected 12 tab-separated"):
        read_sick(path)
    path.write_text("\n".join([SICK_HEADER, sick_line(1, "a", "b", "NEUTRAL", "DEV")]) + "\n")
    with pytest.raises(MalformedLine, match=r"SICK.txt:2: unknown SemEval_set 'DEV'"):
        read_sick(path)


def test_read_vectors_unit_norm_and_hashed_oov(tmp_path):
    path = tmp_path / "glove.txt"
    path.write_text("the 3 4\nNew York 0 2\nthe 9 9\n")
    words = ["<pad>", "<unk>", "the", "new york", "zebra", "okapi"]
    matrix, found = read_vectors(path, words, 2)
    assert found == 2
    assert torch.allclose(matrix[2], torch.tensor([0.6, 0.8]))  # first occurrence, unit norm
    assert torch.allclose(matrix[3], torch.tensor([0.0, 1.0]))  # a token with a space
    assert torch.equal(matrix[0], torch.zeros(2))
    again, _ = read_vectors(path, ["<pad>", "okapi"], 2)
    assert torch.equal(again[1], matrix[5])  # an OOV word's vector depends on the word only
    buckets = {tuple(read_vectors(path, ["<pad>", f"w{i}"], 2)[0][1].tolist()) for i in range(300)}
    assert len(buckets) <= OOV_BUCKETS
    path.write_text("the 3 4\nbroken 1\n")
    with pytest.raises(MalformedLine, match="glove.txt:2:"):
        read_vectors(path, words, 2)


def snli_folder(tmp_path, pairs: int = 40):
    labels = ["entailment", "neutral", "contradiction", "-"]
    for name in ("snli_1.0_dev.jsonl.gz", "snli_1.0_test.jsonl.gz"):
        write_snli(tmp_path, name, [
            snli_line(f"w{i % 7} sees w{i % 5} .", f"w{i % 3} {name[9:12]}{i}", labels[i % 4])
            for i in range(pairs)])
    return tmp_path


def test_datamodule_cpu_protocol_and_batches(tmp_path):
    data = NLIDataModule("snli", data_dir=str(snli_folder(tmp_path)), batch_size=4)
    data.setup("fit")
    train, val = data.datasets["train"].pairs, data.datasets["val"].pairs
    assert (len(train), len(val), len(data.datasets["test"])) == (27, 3, 30)  # 30 labeled
    assert not set(map(id, train)) & set(map(id, val))
    assert "dev0" in data.vocab and "tes1" not in data.vocab  # training words only
    batch = next(iter(data.train_dataloader()))
    assert set(batch) == {"premise", "premise_lengths", "hypothesis", "hypothesis_lengths",
                          "labels", "index"}
    sizes = [len(b["labels"]) for b in data.train_dataloader()]  # a bucket's last may be short
    assert sum(sizes) == 27 and max(sizes) == 4
    assert batch["premise"].shape == (len(batch["labels"]), int(batch["premise_lengths"].max()))
    assert batch["labels"].max() < len(LABELS)
    with pytest.raises(FileNotFoundError, match="snli_1.0_train.jsonl.gz"):
        NLIDataModule("snli", protocol="full", data_dir=str(tmp_path)).setup()


def test_datamodule_with_vectors_covers_every_split(tmp_path):
    glove = tmp_path / "glove.txt"
    glove.write_text("sees 1 0 0\n")
    data = NLIDataModule("snli", data_dir=str(snli_folder(tmp_path)), vectors=str(glove),
                         vector_dim=3)
    data.setup()
    assert "tes1" in data.vocab and data.vectors.shape == (len(data.vocab), 3)
    assert data.vectors_found == 1


@pytest.mark.parametrize("name, value", [("dataset", "mnli"), ("protocol", "gpu")])
def test_unknown_names_list_the_valid_ones(name, value):
    with pytest.raises(ValueError, match=f"unknown {name} '{value}'; valid: "):
        NLIDataModule(**{name: value})


SNLI, SICK = data_root() / "snli", data_root() / "sick"


@pytest.mark.skipif(not SNLI.is_dir(), reason="SNLI not available")
def test_real_snli_counts():
    data = NLIDataModule("snli")
    data.setup()
    assert {s: len(d) for s, d in data.datasets.items()} == {"train": 8858, "val": 984,
                                                           "test": 9824}


@pytest.mark.skipif(not SICK.is_dir(), reason="SICK not available")
def test_real_sick_counts():
    splits = read_sick(SICK / "SICK.txt")
    assert {s: len(p) for s, p in splits.items()} == {"train": 4439, "val": 495, "test": 4906}


CONLLU = """# sent_id = 1
1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tdo\tdo\tAUX\t_\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\t_\t_\t3\tadvmod\t_\t_
3\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_
3.1\tgone\t_\t_\t_\t_\t_\t_\t_\t_

1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_
"""


def test_read_conllu_trees(tmp_path):
    path = tmp_path / "t.conllu"
    path.write_text(CONLLU)
    trees = read_conllu_trees(path)
    assert [(t.words, t.heads) for t in trees] == [(("do", "n't", "go"), (3, 3, 0)),
                                                   (("Hi",), (0,))]
    path.write_text(CONLLU.replace("\t3\taux", "\t4\taux"))
    with pytest.raises(MalformedLine, match=r"t.conllu:3: invalid HEAD '4'"):
        read_conllu_trees(path)


def test_pairs_from_hub_rows():
    rows = [{"premise": "A man sleeps.", "hypothesis": "He rests", "label": 0},
            {"premise": "x", "hypothesis": "y", "label": -1},
            {"sentence_A": "Two dogs", "sentence_B": "No dogs", "label": 2}]
    assert pairs_from_hub(rows) == [
        NLIPair(("a", "man", "sleeps", "."), ("he", "rests"), "entailment"),
        NLIPair(("two", "dogs"), ("no", "dogs"), "contradiction")]
