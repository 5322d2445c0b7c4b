"""bAbI question answering (Weston et al. 2015; Kim et al. 2017, §4.3): stories of short
sentences, questions about them, one-word answers and the ids of the supporting sentences.

Files: ``qa<N>_<name>_{train,test}.txt`` in one folder (``../shared/data/babi_v1.2_en`` holds the
1k set; point ``data_dir`` at the release's ``en-10k`` folder for the 10k set, same names). Each
line is ``<id> <sentence>`` or, for a question, ``<id> <question>\\t<answer>\\t<supporting ids>``;
ids restart at 1 with every story and questions take ids too. A statement never holds a ``?``
(none does in the release), so a line with a ``?`` but no tab is a question whose answer was
lost: :class:`~.files.MalformedLine`, not a memory fact. A file without questions is
an :class:`~.files.EmptyDataFile` naming it. The raw input of a trained model
(:class:`StoryCodec`) is the same lines with the answer and supporting ids optional: there a
line with a ``?`` or a tab is a question.

Bounded cost (:mod:`.limits`): a statement or question holds at most ``max_tokens``
words (100 by default; the longest sentence of the shipped tasks has 11), refused naming its
``file:line`` or, with ``length_policy="truncate"``, cut; the memory holds at most
``memory_size`` statements.

Each question is one example whose memory holds the last ``memory_size`` statements of its story
before the question (questions are not memories), oldest first; its supporting-fact ids become
memory slots (-1 for a fact that fell out of the window). Words are lowercased, the final ``.``
and ``?`` dropped. 10% of the training questions (chosen with ``split_seed``) form the
validation split.

Batches (word id 0 = padding; ``n`` = most memories, ``L`` = longest sentence, ``S`` = most
supporting facts in the batch)::

    story [B, n, L], story_lengths [B] (memories), sentence_lengths [B, n] (words, 0 = padding),
    query [B, L'], query_lengths [B], answer [B], supports [B, S] (slots, -1 = padding),
    task [B] (bAbI task number), index [B] (example in its split)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from lit_structattn.common.codec import RawInputError, TextCodec

from .batching import EncodedItems, pad_rows
from .files import MalformedLine, data_root, how_to_give_data, open_text, require_records
from .limits import LengthLimit, limit_from_state
from .splits import SplitDataModule, hold_out
from .vocabulary import Vocabulary

TASKS = tuple(range(1, 21))
#: the default ``max_tokens``: words per statement or question (the shipped tasks: at most 11)
MAX_TOKENS = 100
SOURCE_HINT = ("The bAbI v1.2 tasks (qa<N>_<name>_{train,test}.txt) come from "
               "https://research.facebook.com/downloads/babi/ (tasks_1-20_v1-2.tar.gz).")


@dataclass(frozen=True)
class Question:
    """One example: ``memory`` (tokenized statements, oldest first), the question, its answer
    and its supporting facts as memory slots (-1 = outside the memory window). Raw input for a
    trained model (:class:`StoryCodec`) may leave the answer out (None) and the supports empty."""

    task: int
    memory: tuple[tuple[str, ...], ...]
    query: tuple[str, ...]
    answer: str | None
    supports: tuple[int, ...]


def tokenize(text: str) -> tuple[str, ...]:
    """Lowercased words of a sentence without its final ``.`` or ``?``."""
    return tuple(text.strip().rstrip(".?").strip().lower().split())


_QUESTION_FIELDS = "expected '<id> <question>\\t<answer>\\t<supporting ids>'"


def parse_babi(lines: Iterable[str], source: str | Path, task: int, memory_size: int = 25,
               answered: bool = True, limit: LengthLimit | None = None) -> list[Question]:
    """The questions of the lines of a bAbI file (:func:`numbered_questions` without the line
    numbers)."""
    return [question for _, question in
            numbered_questions(lines, source, task, memory_size, answered, limit)]


def numbered_questions(lines: Iterable[str], source: str | Path, task: int,
                       memory_size: int = 25, answered: bool = True,
                       limit: LengthLimit | None = None) -> Iterator[tuple[int, Question]]:
    """The questions of the lines of a bAbI file (see the module docstring), in order, each
    with the 1-based number of its line.

    Args:
        lines: the lines, numbered from 1 in errors; blank ones are skipped.
        source: the file named in errors.
        task: the bAbI task number the questions get.
        memory_size: statements kept before each question (the most recent ones).
        answered: every question carries its answer and supporting ids (a data file). False:
            both are optional (``<id> <question>`` alone, its ``?`` or a tab telling it from a
            statement), as in the raw input of a trained model.
        limit: the most words of a statement or question (None: unbounded); cut ones are
            counted, not reported (the caller's :meth:`~.limits.LengthLimit.warn`).

    Raises:
        MalformedLine: a line without a leading id, an id that neither starts a story (1) nor
            follows the previous one, a question before any statement of its story, a question
            line (one with a ``?``) without exactly three tab-separated fields (at most three
            unless ``answered``), an empty answer (when ``answered``), or a supporting id that
            is not an earlier statement of the same story, or a sentence longer than
            ``limit``.
    """
    statements: list[tuple[str, ...]] = []  # of the current story, in order
    slot_of_line: dict[int, int] = {}  # statement id -> its index in ``statements``
    previous_id = 0
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        head, _, rest = line.partition(" ")
        if not head.isdecimal():
            raise MalformedLine(source, number, "expected '<id> <sentence>'")
        line_id = int(head)
        if line_id == 1:
            statements, slot_of_line = [], {}
        elif line_id != previous_id + 1:
            raise MalformedLine(source, number, f"id {line_id} does not follow {previous_id}")
        previous_id = line_id
        if "\t" not in rest and "?" not in rest:
            slot_of_line[line_id] = len(statements)
            statements.append(_bounded(tokenize(rest), limit, source, number))
            continue
        if answered and "\t" not in rest:
            raise MalformedLine(source, number, "a question ('?') without its tab-separated "
                                f"answer and supporting ids: {_QUESTION_FIELDS}")
        fields = rest.split("\t")
        if len(fields) > 3 or answered and (len(fields) != 3 or not fields[1].strip()):
            raise MalformedLine(source, number, _QUESTION_FIELDS)
        if not statements:
            raise MalformedLine(source, number, "a question before any statement of its story")
        query, answer, support_ids = (*fields, "", "")[:3]
        if not all(s.isdecimal() and int(s) in slot_of_line for s in support_ids.split()):
            raise MalformedLine(source, number, f"supporting ids {support_ids.strip()!r} are "
                                "not all earlier statements of the story")
        first_kept = max(0, len(statements) - memory_size)
        slots = tuple(slot_of_line[int(s)] - first_kept for s in support_ids.split())
        query = _bounded(tokenize(query), limit, source, number)
        yield number, Question(task, tuple(statements[first_kept:]), query,
                               answer.strip().lower() or None, tuple(max(s, -1) for s in slots))


def _bounded(words: tuple[str, ...], limit: LengthLimit | None, source: str | Path,
             number: int) -> tuple[str, ...]:
    """``words`` (a sentence at ``source:number``) within ``limit``."""
    return words if limit is None else tuple(limit.cut((words,), "sentence", source, number)[0])


def read_babi(path: Path, task: int, memory_size: int = 25,
              limit: LengthLimit | None = None) -> list[Question]:
    """The questions of one bAbI file (:func:`parse_babi`, every question answered), its
    sentences within ``limit`` (a warning counts those cut).

    Raises:
        MalformedLine: a malformed line (see :func:`parse_babi`).
        EmptyDataFile: a file without questions.
    """
    with open_text(path) as lines:
        questions = parse_babi(lines, path, task, memory_size, limit=limit)
    if limit is not None:
        limit.warn(path)
    return list(require_records(questions, path, "questions"))


def task_file(folder: Path, task: int, split: str) -> Path:
    """``qa<task>_*_<split>.txt`` in ``folder``; ``FileNotFoundError`` if absent."""
    found = sorted(folder.glob(f"qa{task}_*_{split}.txt"))
    if not found:
        raise FileNotFoundError(f"no qa{task}_*_{split}.txt in {folder}. {SOURCE_HINT} "
                                f"{how_to_give_data()}")
    return found[0]


class QuestionDataset(EncodedItems):
    """Encoded questions of one split; ``questions`` keeps the text. Item ``i`` is
    ``(memory ids, query ids, answer id, supports, task, i)`` (answer id 0, the padding, for a
    question without answer); batches are bucketed by the number of memories."""

    def __init__(self, questions: Sequence[Question], vocab: Vocabulary) -> None:
        self.questions = list(questions)
        self.items = [
            ([vocab.encode(s) for s in q.memory], vocab.encode(q.query),
             vocab.pad_id if q.answer is None else vocab.id(q.answer), q.supports, q.task, i)
            for i, q in enumerate(self.questions)
        ]


def collate_questions(items: Sequence[tuple]) -> dict[str, torch.Tensor]:
    """Pad dataset items into a batch (see the module docstring)."""
    memories, queries, answers, supports, tasks, index = zip(*items, strict=True)
    slots = max(1, max(len(m) for m in memories))
    words = max(1, max((len(s) for m in memories for s in m), default=1))
    sentence_lengths = pad_rows([[len(s) for s in m] for m in memories], slots)
    story = [pad_rows([*m, *[[]] * (slots - len(m))], words) for m in memories]
    return {
        "story": torch.tensor(story),
        "story_lengths": torch.tensor([len(m) for m in memories]),
        "sentence_lengths": torch.tensor(sentence_lengths),
        "query": torch.tensor(pad_rows(queries, max(len(q) for q in queries))),
        "query_lengths": torch.tensor([len(q) for q in queries]),
        "answer": torch.tensor(answers),
        "supports": torch.tensor(pad_rows(supports, max(1, max(map(len, supports))), -1)),
        "task": torch.tensor(tasks),
        "index": torch.tensor(index),
    }


class StoryCodec(TextCodec):
    """Raw bAbI stories and questions for a trained model
    (:class:`~lit_structattn.common.codec.TextCodec`): the lines of a bAbI file (see the
    module docstring), whose questions may leave out their answer and supporting ids; words
    outside the vocabulary read as ``<unk>``. Examples are :class:`Question` (task 0), batches
    those of :func:`collate_questions` (answer 0 and no supports where none is given).

    Args:
        vocab: the training vocabulary (with ``<unk>``).
        memory_size: statements kept before each question (the most recent ones).
        limit: the most words of a sentence (default :data:`MAX_TOKENS`, refused), kept in
            :meth:`state`.
    """

    format = ("bAbI lines, ids restarting at 1 per story, answers optional: '1 Mary moved to "
              "the bathroom.' then '2 Where is Mary?' (or '2 Where is Mary?<TAB>bathroom<TAB>1')")

    def __init__(self, vocab: Vocabulary, memory_size: int, limit: LengthLimit | None = None
                 ) -> None:
        self.vocab, self.memory_size = vocab, memory_size
        self.limit = limit or LengthLimit(MAX_TOKENS)

    def state(self) -> dict:
        return {"vocab": self.vocab.state(), "memory_size": self.memory_size,
                **self.limit.state()}

    @classmethod
    def from_state(cls, state: dict) -> StoryCodec:
        """The codec of :meth:`state`; a state saved without the limit gets the default."""
        return cls(Vocabulary.from_state(state["vocab"]), state["memory_size"],
                   limit_from_state(state, MAX_TOKENS, "words"))

    def parse_numbered(self, lines: Iterable[str], source: str = "<input>"
                       ) -> tuple[list[int], list[Question]]:
        """The questions of the lines and the number of each one's line (a record per
        question; statements and blank lines give none)."""
        try:
            numbered = list(numbered_questions(lines, source, 0, self.memory_size,
                                               answered=False, limit=self.limit))
        except MalformedLine as error:
            raise RawInputError(source, error.line, error.problem) from None
        self.limit.warn(source)
        return [number for number, _ in numbered], [question for _, question in numbered]

    def batch(self, examples: Sequence[Question]) -> dict[str, torch.Tensor]:
        """The :func:`collate_questions` batch of ``examples`` (``index`` their position)."""
        return collate_questions(QuestionDataset(examples, self.vocab).items)


class BabiDataModule(SplitDataModule):
    """One or several bAbI tasks as padded batches.

    Args:
        data_dir: the folder of the ``qa<N>_*_{train,test}.txt`` files; default
            ``<data_root>/babi_v1.2_en``.
        task: a task number 1-20, or a list of them (trained together, one vocabulary).
        memory_size: statements kept before each question (the most recent ones).
        val_fraction: share of the training questions held out for validation.
        split_seed: seed of that hold-out (fixed, independent of the training seed).
        max_tokens, length_policy: the most words of a statement or question in any split or
            raw input, and ``"error"`` (refused, naming ``file:line``) or ``"truncate"`` (cut,
            with a warning counting them); see :mod:`.limits`.
        **loader: the loader options (``batch_size``, ``bucket_batches``, ``seed``, ...) of
            :class:`~.splits.SplitDataModule`; ``bucket_batches`` sorts questions by their
            number of memories.

    After :meth:`setup`: ``vocab`` (words of the training questions, answers included),
    ``datasets`` and ``tasks``.
    """

    def __init__(
        self, data_dir: str | None = None, task: int | list[int] = 1, memory_size: int = 25,
        val_fraction: float = 0.1, split_seed: int = 0, max_tokens: int = MAX_TOKENS,
        length_policy: str = "error", **loader,
    ) -> None:
        super().__init__(**loader)
        self.limit = LengthLimit(max_tokens, length_policy, "words")
        self.tasks = (task,) if isinstance(task, int) else tuple(task)
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown or not self.tasks:
            raise ValueError(f"unknown bAbI task(s) {unknown or self.tasks}; valid: 1-20")
        self.vocab: Vocabulary | None = None
        self.datasets: dict[str, QuestionDataset] = {}

    # What the memory network takes from the data (the CLI links each into the model's
    # argument of the same name when it instantiates the classes).

    @property
    def vocab_size(self) -> int:
        """The size of the vocabulary of the training questions (read when asked for)."""
        return len(self.set_up().vocab)

    @property
    def memory_size(self) -> int:
        """The most statements a question's memory holds."""
        return self.hparams.memory_size

    def folder(self) -> Path:
        data_dir = self.hparams.data_dir
        return Path(data_dir).expanduser() if data_dir else data_root() / "babi_v1.2_en"

    def _read(self, split: str) -> list[Question]:
        return [q for task in self.tasks for q in
                read_babi(task_file(self.folder(), task, split), task, self.hparams.memory_size,
                          self.limit)]

    def setup(self, stage: str | None = None) -> None:
        """Read the tasks' files and hold out the validation questions (once)."""
        if self.datasets:
            return
        train, test = self._read("train"), self._read("test")
        fraction = self.hparams.val_fraction
        kept, held_out = hold_out(train, fraction, self.hparams.split_seed)
        if fraction > 0:  # the validation split is carved from the training files
            files = ", ".join(str(task_file(self.folder(), t, "train")) for t in self.tasks)
            require_records(held_out, files, "validation questions",
                            f"val_fraction={fraction} of {len(train)} training questions "
                            "holds out none")
        splits = {"train": kept, "val": held_out, "test": test}
        self.vocab = Vocabulary(word for q in splits["train"]
                               for word in (*(w for s in q.memory for w in s), *q.query, q.answer))
        self.datasets = {split: QuestionDataset(questions, self.vocab)
                         for split, questions in splits.items()}

    collate = staticmethod(collate_questions)  # batches of the length-bucketed loaders

    def text_codec(self) -> StoryCodec:
        """What a trained model keeps to read raw stories (its checkpoint saves it)."""
        return StoryCodec(self.set_up().vocab, self.hparams.memory_size, self.limit)
