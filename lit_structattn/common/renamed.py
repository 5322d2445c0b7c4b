"""Old module names that saved configs and checkpoints hold, still importable.

Problem: a run's ``config.yaml`` and a checkpoint's hyper-parameters name classes by their
import path (``class_path: datamodules.translation.TranslationDataModule``,
``lit_structattn.schedules.DecayFrom``). When the application floor moved into homes of its own
(issue 46), three of those paths changed: ``datamodules.*`` is ``lit_structattn.datamodules.*``
(the wheel installs no top-level ``datamodules`` package any more), ``lit_structattn.schedules``
is ``lit_structattn.tasks.schedules``, and ``lit_structattn.callbacks`` was split into
``lit_structattn.figures.callbacks`` and ``lit_structattn.run.callbacks``.

Method: :func:`install` puts one finder first on ``sys.meta_path`` that answers only for those
old names and hands back the module of the new name (the same module object, so classes stay
identical), or for the split module a module that looks each name up in the new ones. A real
top-level ``datamodules`` package installed by another project is found first: the finder
gives way to it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

#: old module (or package prefix) -> its module now
MOVED = {
    "datamodules": "lit_structattn.datamodules",
    "lit_structattn.schedules": "lit_structattn.tasks.schedules",
}
#: old module -> the modules its names went to
SPLIT = {
    "lit_structattn.callbacks": ("lit_structattn.figures.callbacks",
                                 "lit_structattn.run.callbacks"),
}


def new_name(old: str) -> str | None:
    """The module that ``old`` is now (``datamodules.babi`` -> ``lit_structattn.datamodules.
    babi``), or None when ``old`` is not an old name."""
    for before, after in MOVED.items():
        if old == before or old.startswith(before + "."):
            return after + old[len(before):]
    return None


class _RenamedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name's new module (see the module's docstring)."""

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top == "datamodules" and not _ours(sys.modules.get(top), fullname):
            return None  # another project's datamodules
        if fullname in SPLIT or new_name(fullname) is not None:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        if spec.name in SPLIT:
            return _split_module(spec.name, SPLIT[spec.name])
        return importlib.import_module(new_name(spec.name))

    def exec_module(self, module) -> None:
        """Nothing to run: the module is the new one, already imported."""


def _ours(loaded: types.ModuleType | None, fullname: str) -> bool:
    """Whether the name ``datamodules`` (``loaded``: its module, if imported) means ours: it is
    ours once imported through this finder, and before that when no other package has it (the
    repository's own ``datamodules/`` folder, seen from a checkout, is ours)."""
    if loaded is not None:
        return loaded.__name__ == "lit_structattn.datamodules"
    if fullname != "datamodules":
        return True
    other = importlib.machinery.PathFinder.find_spec("datamodules")
    return other is None or _OUR_FOLDER in {
        Path(location).resolve() for location in other.submodule_search_locations or ()}


_OUR_FOLDER = (Path(__file__).resolve().parents[1] / "datamodules").resolve()


def _split_module(name: str, parts: tuple[str, ...]) -> types.ModuleType:
    module = types.ModuleType(name, f"Moved: the names of {name} are in {', '.join(parts)}.")

    def __getattr__(attribute: str):
        for part in parts:
            found = importlib.import_module(part)
            if hasattr(found, attribute):
                return getattr(found, attribute)
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}")

    module.__getattr__ = __getattr__
    return module


def install() -> None:
    """Make the old names importable (once per process)."""
    if not any(isinstance(finder, _RenamedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RenamedModules())
