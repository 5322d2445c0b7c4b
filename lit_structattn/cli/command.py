"""The ``structattn`` command: LightningCLI over every task and DataModule of the project.

    structattn fit --config configs/demo/needle.yaml
    structattn test --config configs/demo/needle.yaml --ckpt_path last
    structattn fit --print_config --config configs/demo/needle.yaml
    structattn experiments                       # every table row, by name
    structattn fit --experiment tree_transduction/structured
    structattn reproduce tree_transduction --budget cpu --seeds 3
    structattn predict --ckpt_path best.ckpt --input formulas.txt --output out.jsonl
    structattn --version

The configs ship with the package: from any folder, ``--config configs/...`` reads the shipped
file when there is none of that name here (:mod:`lit_structattn.cli.experiments`).

Models and data are chosen in the config by ``class_path`` (e.g.
``lit_structattn.tasks.SequenceClassifier`` and
``lit_structattn.datamodules.synthetic.NeedleDataModule``).

``--version``, ``--help``, ``experiments`` and ``predict --help`` answer without importing torch
or Lightning (a fraction of a second; ``bench/startup.py`` measures it): this module imports
them only for the commands that need them. LightningCLI's help of a command (``fit --help``)
ends with the options of the chosen config's DataModule, or how to list them.

A user error (an unknown name or config key, a value of the wrong type, a config file that is not
YAML, a malformed or unreadable data file, a folder it may not write, infeasible bounds, a
training loss that became NaN) ends the command with one short message on stderr, naming the
file and line where there is one, and exit status 2; ``--debug`` (anywhere on the command
line) or ``STRUCTATTN_DEBUG=1`` shows the traceback instead. A misspelt option, name or value
gets a "did you mean" naming the closest valid one. Ctrl-C (or SIGTERM) during a fit
writes ``last.ckpt`` at the step it stopped and exits with status 130; the same command with
``--ckpt_path last`` resumes there.

A run prints its folder, a line per epoch and its result; ``--verbose`` (anywhere on the command
line, or ``STRUCTATTN_VERBOSE=1``) brings back Lightning's messages, its warnings and the model
summary (:mod:`lit_structattn.run.quiet`).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import sys
import textwrap
import traceback
from argparse import ArgumentError
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

import yaml

from .. import __version__
from ..common.suggest import did_you_mean
from ..run.quiet import VERBOSE_ENV
from . import experiments


def main(args: list[str] | None = None) -> None:
    """Entry point of ``structattn fit|validate|test|predict|reproduce``.

    A user error exits with status 2 and one short message (see :func:`user_error`), unless
    ``--debug`` is on the command line or ``STRUCTATTN_DEBUG=1``: then its traceback shows.
    """
    args = list(sys.argv[1:] if args is None else args)
    debug = "--debug" in args or os.environ.get("STRUCTATTN_DEBUG", "") not in ("", "0")
    if "--verbose" in args:  # Lightning's messages, here and in the processes this one starts
        os.environ[VERBOSE_ENV] = "1"
    args = [arg for arg in args if arg not in ("--debug", "--verbose")]
    try:
        answer_without_lightning(args)
        if args and args[0] == "reproduce":
            from ..reproduce import main as reproduce

            reproduce(args[1:])
            return
        if args and args[0] == "experiments":
            experiments.main(args[1:])
            return
        if args and args[0] == "predict" and any(a.split("=")[0] == "--input" for a in args):
            from .predict import main as predict_raw

            predict_raw(args[1:])
            return
        expanded = experiments.expand(args)
        check_config_files(expanded)
        from ..run.lightning_cli import build_cli

        with data_options_after_help(expanded):
            build_cli(expanded)
    except fit_interrupted() as interrupted:
        print(f"structattn: {interrupted}", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # the reader left (`structattn experiments | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except user_errors() as error:
        if debug:
            raise
        print(f"structattn: error: {user_error(error)}\n(run with --debug for the traceback)",
              file=sys.stderr)
        sys.exit(2)


#: The commands, as ``structattn --help`` describes them.
COMMANDS = {
    "fit": "train a model: structattn fit --config CFG, or --experiment NAME",
    "validate": "evaluate a checkpoint (--ckpt_path) on the validation split",
    "test": "evaluate a checkpoint (--ckpt_path) on the test split",
    "predict": "a checkpoint's predictions on a raw text file (--input), or LightningCLI's "
               "predict over a DataModule (--config)",
    "reproduce": "train, test and report the rows of a paper's table over seeds (budgets ci, "
                 "demo, cpu, paper)",
    "experiments": "list the experiments (every table row, by name) or show one",
}

START_HERE = """\
start here:
  structattn experiments                        every table row, by name
  structattn fit --experiment NAME              train one (its whole config: --print_config)
  structattn COMMAND --help                     a command's options (fit: trainer and model)
  structattn fit --config CFG --print_config    a config in full, the data's options included
  structattn fit --data.help CLASS              the options of a DataModule
"""


def answer_without_lightning(args: list[str]) -> None:
    """Answers, and exits, what needs no torch or Lightning (a fraction of a second where they
    take seconds to import): no arguments, ``--help`` and ``--version`` of the command, and
    ``predict --help`` and ``--formats`` (the raw-text predict's; ``predict --config CFG
    --help`` is LightningCLI's). Returns for anything else."""
    if not args or args[0] in ("-h", "--help", "--version"):
        top_level_parser().parse_args(args[:1])
    options = {arg.split("=")[0] for arg in args}
    if (args[0] == "predict" and options & {"-h", "--help", "--formats"}
            and not options & {"-c", "--config"}):
        from .predict import main as predict_raw

        predict_raw(args[1:])


def top_level_parser() -> argparse.ArgumentParser:
    """The parser of ``structattn --help`` and ``--version`` (LightningCLI's parses the rest)."""
    parser = argparse.ArgumentParser(
        prog="structattn", description="Structured and constrained attention for NLP: train "
        "and evaluate any model with any attention by config, reproduce the papers' tables, "
        "predict on raw text.", epilog=START_HERE,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"structattn {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error (also STRUCTATTN_DEBUG=1)")
    parser.add_argument("--verbose", action="store_true",
                        help="Lightning's messages, its warnings and the model summary too "
                        f"(also {VERBOSE_ENV}=1)")
    commands = parser.add_subparsers(title="subcommands", metavar="{" + ",".join(COMMANDS) + "}",
                                     required=True)
    for name, text in COMMANDS.items():
        commands.add_parser(name, help=text)
    return parser


USER_ERRORS = (ArgumentError, ValueError, FileNotFoundError, NotADirectoryError,
               PermissionError)


def user_errors() -> tuple[type[BaseException], ...]:
    """:data:`USER_ERRORS` and, once Lightning is imported (only then can it be raised), its
    ``MisconfigurationException``: an error of a command that needs no Lightning (``structattn
    experiments NAME``) is worded without importing it."""
    lightning = sys.modules.get("lightning.fabric.utilities.exceptions")
    return USER_ERRORS + ((lightning.MisconfigurationException,) if lightning else ())


def fit_interrupted() -> type[BaseException] | tuple[()]:
    """The exception of a fit stopped by Ctrl-C or SIGTERM, once a fit could have raised it (no
    class before: the ``except`` that names it imports nothing)."""
    interruption = sys.modules.get("lit_structattn.run.interruption")
    return interruption.FitInterrupted if interruption else ()


@contextmanager
def data_options_after_help(args: list[str]) -> Iterator[None]:
    """After LightningCLI's help of a command (``structattn fit --help``), which cannot list the
    options of a DataModule chosen by ``class_path``, :func:`data_options_help`."""
    try:
        yield
    except SystemExit as exited:
        if exited.code in (0, None) and {"-h", "--help"} & set(args):
            print(data_options_help(args))
        raise


def data_options_help(args: list[str]) -> str:
    """The data options of the DataModule that ``args`` choose (the last ``data`` of their
    ``--config`` files, or ``--data CLASS``), with how to see their help and values; how to
    list them when ``args`` choose none."""
    command = args[0] if args and not args[0].startswith("-") else "fit"
    data = _data_class(args)
    if data is None:
        return (f"data options: a config chooses its DataModule (data: class_path: ...).\n"
                f"  structattn {command} --config CFG --help          its options\n"
                f"  structattn {command} --data.help CLASS            their types, defaults "
                f"and help\n  (CLASS e.g. {DATA_EXAMPLE})\n"
                f"  structattn {command} --config CFG --print_config  the config in full, "
                "their values included")
    options = textwrap.fill(", ".join(_init_options(data)), initial_indent="  ",
                            subsequent_indent="  ", width=100)
    return (f"data options of this config ({data}), given as --data.init_args.NAME VALUE:\n"
            f"{options}\ntheir types, defaults and help: structattn {command} --data.help "
            f"{data}\ntheir values in this config: add --print_config (instead of --help)")


DATA_EXAMPLE = "lit_structattn.datamodules.synthetic.NeedleDataModule"


def _data_class(args: list[str]) -> str | None:
    """The ``class_path`` of the DataModule that ``args`` choose: the last of their
    ``--config`` files' ``data`` and their ``--data`` / ``--data.class_path``; None if none."""
    chosen = None
    for option, value in pairwise(args):
        if option in ("--config", "-c") and Path(value).is_file():
            data = (yaml.safe_load(Path(value).read_text(encoding="utf-8")) or {}).get("data")
            chosen = data.get("class_path", chosen) if isinstance(data, dict) else chosen
        elif option in ("--data", "--data.class_path") and not value.endswith((".yaml", ".yml")):
            chosen = value
    return chosen


def check_config_files(args: list[str]) -> None:
    """Each ``--config FILE`` in ``args`` (as :func:`~.experiments.expand` leaves them) that
    names a file must be YAML: else ``ValueError`` naming ``FILE:line:column`` and the problem
    (jsonargparse, which reads the file as a string, names only ``"<unicode string>"``)."""
    for option, value in pairwise(args):
        if option != "--config" or not Path(value).is_file():
            continue
        try:
            yaml.compose(Path(value).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as error:
            raise ValueError(f"{value}:{yaml_problem(error)}") from None


def yaml_problem(error: yaml.MarkedYAMLError) -> str:
    """``line:column: not valid YAML: problem (context at line:column)`` of ``error``, lines
    and columns counted from 1."""
    mark, start = error.problem_mark or error.context_mark, error.context_mark
    text = f"{mark.line + 1}:{mark.column + 1}: not valid YAML: {error.problem or error.context}"
    if error.context and error.problem:
        text += f" ({error.context}"
        if start is not None and (start.line, start.column) != (mark.line, mark.column):
            text += f" at line {start.line + 1}, column {start.column + 1}"
        text += ")"
    return text


def user_error(error: BaseException) -> str:
    """The message a user needs from ``error``: that of the innermost exception raised outside
    jsonargparse (the project's own "unknown X; valid: ..." rather than jsonargparse's union
    dump around it), with the class being built when the error came from its constructor."""
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    own = [e for e in chain if isinstance(e, user_errors()) and not _raised_in(e, "jsonargparse")]
    chosen = own[-1] if own else chain[0]
    if isinstance(chosen, ArgumentError):
        return parser_message(str(chosen), _parser_options(chosen))
    if isinstance(chosen, PermissionError):
        return (f"permission denied: {chosen.filename} (this user may not read or write it). "
                "Change its permissions (chmod, chown) or choose another path (a run's folder: "
                "--trainer.default_root_dir)")
    message = str(chosen)
    built = _class_being_built(chosen)
    return f"{message}\n  (in {built})" if built else message


def parser_message(text: str, options: Iterable[str] = ()) -> str:
    """jsonargparse's error ``text`` without its dump: the key, then the reasons given by the
    types it tried (not the ``NoneType`` alternative), with the options a class accepts when
    one was refused and the choices of a ``Literal`` as "unknown value ...; valid: ...", and
    "did you mean" the closest valid name of a misspelt one (an unrecognized option among the
    parser's ``options``, a refused option of a class, a value of a ``Literal``)."""
    wrong_type = _wrong_type(text)
    if wrong_type:
        return wrong_type
    lines = text.splitlines()
    if "Errors:" not in text:
        return _LITERAL.sub(_unknown_value, "\n".join(
            line for line in lines if not line.lstrip().startswith("Given value"))
        ) + _unrecognized_options(text, options)
    start = next(i for i, line in enumerate(lines) if line.strip() == "Errors:") + 1
    reasons = []
    for line in lines[start:]:
        stripped = line.strip()
        if stripped.startswith(("Given value", "Subtypes:")):
            break
        if stripped and "Expected a <class 'NoneType'>" not in stripped:
            reasons.append(stripped.removeprefix("- "))
    message = " ".join([lines[0].strip(), *reasons])
    refused = _REFUSED.search(message)
    if refused:  # the innermost class and the option it refused
        accepted = _init_options(refused.group(1))
        if accepted:
            message += f"; valid: {', '.join(accepted)}{did_you_mean(refused.group(2), accepted)}"
    refused = refused or _NOT_A_GROUP.search(message)
    if refused:
        from ..tasks.upgrade import moved_argument  # torch and the models: only here

        moved = moved_argument(refused.group(1), refused.group(2))
        if moved:  # a flat option of before the parts' options were groups (tasks/upgrade.py)
            message += f" ({refused.group(2)} is now {moved})"
    return _LITERAL.sub(_unknown_value, message)


_REFUSED = re.compile(r".*class_path '([\w.]+)'.*?Option '(\w+)' is not accepted")
_NOT_A_GROUP = re.compile(r".*class_path '([\w.]+)': Parser key \"(\w+)\": Unable to load config")


_KEY = re.compile(r'^( *).*?Parser key "([^"]+)"', re.M)
_EXPECTED_CLASS = re.compile(r"Expected a <class '([\w.]+)'>")
_GIVEN = re.compile(r"(?:Given|Got) value: (.*?)(?:\. Got value: |$)", re.M)


def _wrong_type(text: str) -> str | None:
    """"the value of KEY must be a T, not 'V'" when jsonargparse's error ``text`` says that the
    value of its innermost key has none of the types it takes (plain classes, e.g. a float
    ``lr``), with the key's full name (``model.init_args.optimizer.init_args.lr``); else None.
    """
    keys = _KEY.findall(text)
    nested = all(len(a) < len(b) for (a, _), (b, _) in pairwise(keys))
    if not keys or not nested:
        return None
    block = _block(text[text.rindex(f'Parser key "{keys[-1][1]}"'):], len(keys[-1][0]))
    # sorted, null last: jsonargparse lists them in an order that varies between versions
    types = sorted(set(_EXPECTED_CLASS.findall(block)), key=lambda name: (name == "NoneType",
                                                                         name))
    given = _GIVEN.search(block)
    if "Expected a typing." in block or given is None or not set(types) - {"NoneType"}:
        return None
    kinds = ["null" if name == "NoneType" else f"{'an' if name[0] in 'aeiou' else 'a'} {name}"
             for name in types]
    kinds_text = " or ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)
    key = ".init_args.".join(name for _, name in keys)
    return f"the value of {key} must be {kinds_text}, not {given.group(1)!r}"


def _block(text: str, indent: int) -> str:
    """The first line of ``text`` and the lines after it indented by more than ``indent``."""
    first, *rest = text.splitlines()
    inside = []
    for line in rest:
        if line.strip() and len(line) - len(line.lstrip(" ")) <= indent:
            break
        inside.append(line)
    return "\n".join([first, *inside])


_LITERAL = re.compile(r"Expected a typing\.Literal\[(.*?)\]\. Got value: (\S+)")


def _unknown_value(found: re.Match) -> str:
    choices = ast.literal_eval(f"[{found.group(1)}]")
    return (f"unknown value {found.group(2)!r}; valid: {', '.join(map(str, choices))}"
            f"{did_you_mean(found.group(2), choices)}")


def _unrecognized_options(text: str, options: Iterable[str]) -> str:
    """"did you mean" for each ``--option`` of argparse's "unrecognized arguments: ..." ``text``
    that is close to one of ``options`` (``--trainer.max_epoch``: ``--trainer.max_epochs``)."""
    if not text.startswith("unrecognized arguments:"):
        return ""
    options = list(options)
    given = [arg.split("=")[0] for arg in text.split()[2:] if arg.startswith("--")]
    return "".join(did_you_mean(arg, options, show=str) for arg in given)


def _parser_options(error: BaseException) -> list[str]:
    """The option strings of the innermost parser in ``error``'s traceback and of its
    subcommands' parsers (empty when no parser raised it)."""
    parsers = [frame.f_locals.get("self") for frame in _frames(error)]
    parsers = [parser for parser in parsers if isinstance(parser, argparse.ArgumentParser)]
    return _option_strings(parsers[-1]) if parsers else []


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every ``--option`` of ``parser`` and of the parsers of its subcommands."""
    found = []
    for action in parser._actions:
        found += [name for name in action.option_strings if name.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for subcommand in action.choices.values():
                found += _option_strings(subcommand)
    return found


def _init_options(class_path: str) -> list[str]:
    """The options the constructor of ``class_path`` takes as jsonargparse reads them, those it
    passes on through ``**kwargs`` included (empty if unknown)."""
    from jsonargparse import ArgumentParser

    module, _, name = class_path.rpartition(".")
    parser = ArgumentParser()
    try:
        parser.add_class_arguments(getattr(importlib.import_module(module), name), "init")
    except (ImportError, AttributeError, TypeError, ValueError):
        return []
    return list(dict.fromkeys(action.dest.split(".")[1] for action in parser._actions
                              if action.dest.startswith("init.")))


def _frames(error: BaseException):
    return [frame for frame, _ in traceback.walk_tb(error.__traceback__)]


def _raised_in(error: BaseException, package: str) -> bool:
    frames = _frames(error)
    return bool(frames) and f"{os.sep}{package}{os.sep}" in frames[-1].f_code.co_filename


def _class_being_built(error: BaseException) -> str | None:
    """``model: module.Class`` (or ``data: ...``) of the outermost constructor of this project
    in ``error``'s traceback, or None (always None before Lightning is imported: no class was
    being built)."""
    if "lightning" not in sys.modules:
        return None
    import lightning as L
    from lightning.pytorch.cli import LightningCLI

    for frame in _frames(error):
        instance = frame.f_locals.get("self")
        if frame.f_code.co_name != "__init__" or instance is None or isinstance(
                instance, LightningCLI):  # the command itself, not a class it builds
            continue
        cls = type(instance)
        if cls.__module__.split(".")[0] in ("lit_structattn", "datamodules"):
            key = ("model: " if isinstance(instance, L.LightningModule) else
                   "data: " if isinstance(instance, L.LightningDataModule) else "")
            return f"{key}{cls.__module__}.{cls.__qualname__}"
    return None
