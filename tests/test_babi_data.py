"""The bAbI DataModule: parsing, the memory window and its supporting-fact slots, malformed
lines, the held-out validation split and the batches; on generated files and on the real data
when it is present."""

from __future__ import annotations

import pytest

from lit_structattn.datamodules.babi import BabiDataModule, read_babi
from lit_structattn.datamodules.files import MalformedLine, data_root

STORY = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 Sandra moved to the garden.
6 Where is Daniel? \thallway\t4
7 John moved to the office.
8 Mary got the football there.
9 Where is the football? \tbathroom\t8 1
"""


def write_task(folder, task=2, name="two-supporting-facts", train=STORY * 4, test=STORY):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"qa{task}_{name}_train.txt").write_text(train)
    (folder / f"qa{task}_{name}_test.txt").write_text(test)
    return folder


def test_parser_reads_questions_memories_and_supports(tmp_path):
    path = write_task(tmp_path) / "qa2_two-supporting-facts_test.txt"
    questions = read_babi(path, task=2)
    assert len(questions) == 3
    last = questions[2]
    assert last.query == ("where", "is", "the", "football")
    assert last.answer == "bathroom" and last.task == 2
    assert last.memory[0] == ("mary", "moved", "to", "the", "bathroom")
    assert len(last.memory) == 6  # the statements only: questions are no memories
    assert last.supports == (5, 0)  # line 8 is the 6th statement, line 1 the 1st; order kept


def test_memory_window_keeps_the_last_statements_and_remaps_supports(tmp_path):
    path = write_task(tmp_path) / "qa2_two-supporting-facts_test.txt"
    last = read_babi(path, task=2, memory_size=3)[2]
    assert [s[0] for s in last.memory] == ["sandra", "john", "mary"]  # lines 5, 7, 8
    assert last.supports == (2, -1)  # line 8 -> slot 2; line 1 fell out of the window


@pytest.mark.parametrize(("line", "number", "problem"), [
    ("Mary moved to the bathroom.", 2, "expected '<id> <sentence>'"),
    ("5 Mary moved.", 2, "id 5 does not follow 1"),
    ("2 Where is Mary? \tbathroom", 2, "expected '<id> <question>"),
    ("2 Where is Mary? \tbathroom\t3", 2, "not all earlier statements"),
])
def test_malformed_lines_name_file_and_line(tmp_path, line, number, problem):
    path = tmp_path / "qa1_single-supporting-fact_train.txt"
    path.write_text(f"1 Mary moved to the bathroom.\n{line}\n")
    with pytest.raises(MalformedLine, match=f"{path.name}:{number}: ") as error:
        read_babi(path, task=1)
    assert problem in str(error.value)


def test_unknown_task_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid: 1-20"):
        BabiDataModule(task=21)
    with pytest.raises(ValueError, match="valid: 1-20"):
        BabiDataModule(task=[2, 0])


def test_missing_task_file(tmp_path):
    write_task(tmp_path)
    with pytest.raises(FileNotFoundError, match="no qa3_\\*_train.txt"):
        BabiDataModule(data_dir=str(tmp_path), task=3).setup()


def test_validation_split_is_fixed_and_batches_are_padded(tmp_path):
    write_task(tmp_path, train=STORY * 10)  # 30 training questions -> 3 held out
    held_out = []
    for seed in (0, 1):  # the training seed does not move the hold-out
        dm = BabiDataModule(data_dir=str(tmp_path), task=2, batch_size=4, seed=seed)
        dm.setup()
        assert {s: len(d) for s, d in dm.datasets.items()} == {"train": 27, "val": 3, "test": 3}
        held_out.append([q.memory for q in dm.datasets["val"].questions])
    assert held_out[0] == held_out[1]
    batch = next(iter(dm.test_dataloader()))  # sorted by memory size: 2, 4, 6 statements
    assert batch["story"].shape == (3, 6, 6) and batch["query"].shape == (3, 4)
    assert batch["story_lengths"].tolist() == [2, 4, 6]
    assert batch["sentence_lengths"][0].tolist() == [5, 5, 0, 0, 0, 0]
    assert (batch["story"][0, 2:] == 0).all()
    assert batch["supports"].tolist() == [[0, -1], [2, -1], [5, 0]]
    assert dm.vocab.decode(batch["answer"]) == ["bathroom", "hallway", "bathroom"]
    assert dm.vocab.decode(batch["query"][2]) == ["where", "is", "the", "football"]
    assert batch["task"].tolist() == [2, 2, 2]


def test_several_tasks_and_the_10k_layout(tmp_path):
    folder = tmp_path / "en-10k"
    write_task(folder)
    write_task(folder, task=1, name="single-supporting-fact", train=STORY * 2, test=STORY * 2)
    dm = BabiDataModule(data_dir=str(folder), task=[1, 2])
    dm.setup()
    assert len(dm.datasets["test"]) == 9
    assert sorted({q.task for q in dm.datasets["test"].questions}) == [1, 2]


BABI = data_root() / "babi_v1.2_en"


@pytest.mark.skipif(not BABI.is_dir(), reason="../shared/data/babi_v1.2_en is absent")
@pytest.mark.parametrize("task", [2, 3, 16])
def test_real_data(task):
    dm = BabiDataModule(task=task)
    dm.setup()
    assert {s: len(d) for s, d in dm.datasets.items()} == {"train": 900, "val": 100,
                                                          "test": 1000}
    questions = dm.datasets["test"].questions
    assert max(len(q.memory) for q in questions) <= 25
    assert all(-1 <= s < len(q.memory) for q in questions for s in q.supports)
    supports = {2: 2, 3: 3, 16: 3}[task]
    assert all(len(q.supports) == supports for q in questions)
