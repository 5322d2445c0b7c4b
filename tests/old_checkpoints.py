"""Checkpoints saved by an earlier version of the project, kept as test fixtures (issue 46,
item 7: a user's trained models must survive a refactor).

Each fixture is a tiny model of one family, fitted for a few steps through the same config stack
as its golden case (``tests/golden.py``; the needle demo for the sequence classifier), saved with
``trainer.save_checkpoint`` into ``tests/old_checkpoints/<case>.ckpt``, with the records its
``predict_text`` gave for a few raw inputs at that time in ``<case>.json``.
``tests/test_old_checkpoints.py`` loads each with ``load_task`` and checks the same records
come out. They are recorded once, with the code *before* a refactor, and never re-recorded to
make a refactor pass::

    OMP_NUM_THREADS=1 python -m tests.old_checkpoints --record
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.golden import CASES, CONFIGS, Case, case_cli, one_thread

FOLDER = Path(__file__).resolve().parent / "old_checkpoints"
STEPS = 5

#: The raw inputs of each case, in its codec's line format (what ``structattn predict`` reads).
RAW = {
    "tree_structured": ["( + 1 2 )", "( * 3 ( + 4 5 ) 6 )"],
    "easy_first_nef_crf_f_csoftmax": ["John Smith said in Paris .", "Zzyzx talks with EU ."],
    "translation_csparsemax_predicted": ["Der Hund spielt im Park.", "Die Katze schläft."],
    "translation_beam_joint": ["Der Hund spielt im Park.", "Die Katze schläft."],
    "translation_segmentation": ["Der Hund spielt im Park.", "Die Katze schläft."],
    "babi_binary_crf": ["1 Mary moved to the bathroom.", "2 John went to the hallway.",
                        "3 Where is Mary?", "4 Where is John?"],
    "nli_structured": ["w0 sees w1 near w2 .\tw1 dev3 w2", "A zebra sees w2\tw2 sleeps !"],
    "needle": ["5 1 7 3", "2 4 1 9 9 19"],
}

NEEDLE = Case(("demo/needle.yaml",), ("--data.init_args.num_train", "64"))

#: Patched while fitting: the fertility predictor at the paper's sizes (2x256 LSTM) makes a 10 MB
#: fixture; at 8 units it is the same format (its codec records the sizes) in 0.3 MB.
SMALLER = {"translation_csparsemax_predicted": (
    ("lit_structattn.models.fertility.FertilityPredictor.__init__.__defaults__",
     (8, 8, 1, 0.2, 10)),)}


#: Added to a case's arguments: smaller layers, for a smaller fixture.
SMALLER_ARGS = {"easy_first_nef_crf_f_csoftmax": tuple(
    f"--model.init_args.model.init_args.{name}=6"
    for name in ("encoder.word_dim", "encoder.affix_dim", "encoder.hidden_dim",
                 "decoder.sketch_dim", "decoder.preattention_dim"))}


def case_of(name: str) -> Case:
    return NEEDLE if name == "needle" else CASES[name]


def checkpoint_path(name: str) -> Path:
    return FOLDER / f"{name}.ckpt"


def records_path(name: str) -> Path:
    return FOLDER / f"{name}.json"


def fit_and_save(name: str, checkpoint: Path) -> None:
    """Fit case ``name`` for :data:`STEPS` steps (its golden configuration) and save its
    checkpoint, weights and hyper-parameters only, to ``checkpoint``."""
    extra = ("--trainer.max_steps", str(STEPS), *SMALLER_ARGS.get(name, ()))
    with one_thread(), tempfile.TemporaryDirectory(prefix=f"old-{name}-") as tmp:
        with case_cli(case_of(name), Path(tmp), extra, SMALLER.get(name, ())) as cli:
            cli.trainer.fit(cli.model, datamodule=cli.datamodule)
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            cli.trainer.save_checkpoint(checkpoint, weights_only=True)


def predicted(name: str) -> list[dict]:
    """The records of the checkpoint of ``name`` for its raw inputs, loaded with ``load_task``
    in a fresh process (as a user would, without the training data)."""
    code = (f"import json; from lit_structattn.tasks import load_task; "
            f"task = load_task({str(checkpoint_path(name))!r}); "
            f"print(json.dumps(task.predict_text({RAW[name]!r})))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                           "PYTHONPATH": str(FOLDER.parents[1])},
                         cwd=tempfile.gettempdir())
    if run.returncode:
        raise RuntimeError(f"{name}: predicting failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.splitlines()[-1])


def record(name: str) -> None:
    fit_and_save(name, checkpoint_path(name))
    document = {"case": name, "configs": [str(CONFIGS / c) for c in case_of(name).configs],
                "inputs": RAW[name], "records": predicted(name)}
    document["configs"] = [c.replace(str(FOLDER.parents[1]) + "/", "")
                           for c in document["configs"]]
    records_path(name).write_text(json.dumps(document, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.old_checkpoints", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", action="store_true", required=True)
    parser.add_argument("names", nargs="*", help=f"cases (default: all): {', '.join(RAW)}")
    args = parser.parse_args(argv)
    for name in args.names or list(RAW):
        record(name)
        print(f"{name}: {checkpoint_path(name).stat().st_size // 1024} KiB", flush=True)


if __name__ == "__main__":
    sys.exit(main())

