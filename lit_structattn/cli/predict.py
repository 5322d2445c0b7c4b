"""``structattn predict --ckpt_path CKPT --input FILE``: a trained model's predictions on a raw
text file, written as JSONL (one record per example, as they are made, each with ``line``: the
1-based number of the input line it came from). A blank line is no example and gives no record,
as in the Python API (``predict_text``, ``tag``); a tagger tokenises each line the way its
training data was (``--pretokenized``: words separated by spaces, read as they are).

The checkpoint is all it needs: the task's class and the data's text codec (vocabularies,
tag sets, subword model) travel in it, so no config and no training data are read. Each
family reads its natural format (``--formats`` lists them); the records hold the prediction
and its attention (marginals where the attention is structured). ``structattn predict
--config ...`` without ``--input`` is LightningCLI's predict over a DataModule's test split.

The checkpoint is read as data (a file holding other Python objects is refused, see
:func:`~lit_structattn.run.checkpoints.read_checkpoint`; ``--trust_checkpoint`` lifts that for a
legacy file you trust). The output file appears only once every input line parsed and every
prediction succeeded: the records go to a temporary file beside it, renamed at the end, so a
bad line or a crash leaves an existing ``--output`` as it was.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..datamodules.files import atomic_path, open_text

#: the codec of every family, whose ``format`` the help shows
FORMATS = {
    "tagging (POS, NER)": "lit_structattn.datamodules.tagging.TaggingCodec",
    "word-level QE": "lit_structattn.datamodules.word_qe.QECodec",
    "translation": "lit_structattn.datamodules.translation.TranslationCodec",
    "bAbI question answering": "lit_structattn.datamodules.babi.StoryCodec",
    "natural language inference": "lit_structattn.datamodules.nli.PairCodec",
    "tree transduction": "lit_structattn.datamodules.tree_transduction.FormulaCodec",
    "morphological inflection": "lit_structattn.datamodules.morphology.InflectionCodec",
    "needle demo": "lit_structattn.datamodules.synthetic.NeedleCodec",
}


def _formats() -> str:
    """The ``--input`` format of each family (imports every codec, hence torch: shown by
    ``--formats``, not in ``--help``, which answers at once)."""
    from ..common.codec import import_class

    return "\n".join(f"  {family}: {import_class(path).format}"
                     for family, path in FORMATS.items())


def predict_file(checkpoint: str | Path, lines: list[str], output, source: str = "<input>",
                 batch_size: int = 32, device: str = "cpu", progress: bool = False,
                 trusted: bool = False, pretokenized: bool = False) -> int:
    """Write the predictions of the raw ``lines`` (the checkpoint family's format) to the
    text stream ``output`` as JSONL, each record with its ``line`` number; returns how many
    records it wrote. ``trusted``: see :func:`~lit_structattn.tasks.base.load_task`;
    ``pretokenized``: see :meth:`~lit_structattn.tasks.base.Task.predict_text`."""
    from ..tasks.base import load_task  # torch, Lightning and the models: not for --help

    task = load_task(checkpoint, map_location=device, trusted=trusted)
    codec = task.text_codec.pretokenized() if pretokenized else task.text_codec
    numbers, examples = codec.parse_numbered(lines, source)
    starts = range(0, len(examples), batch_size)
    if progress:
        from tqdm import tqdm

        starts = tqdm(starts, desc="predict", unit="batch")
    written = 0
    for start in starts:
        chunk = slice(start, start + batch_size)
        for record in task.predict_examples(examples[chunk], batch_size, numbers[chunk]):
            output.write(json.dumps(record, ensure_ascii=False) + "\n")
            written += 1
        output.flush()
    return written


def main(argv: list[str] | None = None) -> None:
    """``structattn predict --input ...`` (see the module docstring); ``FileNotFoundError``
    for a missing checkpoint or input file, :class:`~.common.codec.RawInputError` for a
    malformed line."""
    parser = argparse.ArgumentParser(
        prog="structattn predict", description=__doc__.split("\n\n")[0],
        epilog="structattn predict --formats: the --input format of each family.\n"
        "structattn predict --config CFG --help: LightningCLI's predict over a DataModule.",
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--formats", action=FormatsAction,
                        help="print the --input format of each family and exit")
    parser.add_argument("--ckpt_path", required=True, type=Path, help="a trained checkpoint")
    parser.add_argument("--input", required=True,
                        help="the raw text file in the family's format ('-': standard input; "
                        "--formats lists them)")
    parser.add_argument("--output", default="predictions.jsonl",
                        help="the JSONL file to write ('-': standard output; default: "
                        "%(default)s)")
    parser.add_argument("--pretokenized", action="store_true",
                        help="a tagger reads each line's words, separated by spaces, as they are "
                        "(default: it tokenises raw sentences as its training data was)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--device", default=None,
                        help="where the model runs (default: cuda when there is one, else cpu)")
    parser.add_argument("--trust_checkpoint", action="store_true",
                        help="unpickle the checkpoint in full, Python objects and all: only for "
                        "a legacy checkpoint from a source you trust (it can run code)")
    args = parser.parse_args(argv)
    args.device = args.device or default_device()
    if not args.ckpt_path.is_file():
        raise FileNotFoundError(f"--ckpt_path: no checkpoint at {args.ckpt_path}")
    lines, source = read_input(args.input)
    run = dict(source=source, batch_size=args.batch_size, device=args.device,
               trusted=args.trust_checkpoint, pretokenized=args.pretokenized)
    if args.output == "-":
        predict_file(args.ckpt_path, lines, sys.stdout, **run)
        return
    output = Path(args.output)
    with atomic_path(output) as partial, partial.open("w", encoding="utf-8") as out:
        count = predict_file(args.ckpt_path, lines, out, progress=sys.stderr.isatty(), **run)
    print(f"{count} predictions written to {output}", file=sys.stderr)


class FormatsAction(argparse.Action):
    """``--formats``: print :func:`_formats` and exit, like ``--help``."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"formats of --input:\n{_formats()}")
        parser.exit()


def default_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def read_input(name: str) -> tuple[list[str], str]:
    """The lines of ``--input`` (a file, or ``-`` for standard input) and how errors name it.
    ``FileNotFoundError`` for a missing file;
    :class:`~lit_structattn.datamodules.files.MalformedLine` (``file:line``) for bytes that are not
    UTF-8."""
    if name == "-":
        return sys.stdin.read().splitlines(), "<stdin>"
    path = Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"--input: no file at {path}")
    with open_text(path) as text:
        return text.read().splitlines(), str(path)
