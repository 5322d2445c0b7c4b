"""The floors of DESIGN.md hold: each package imports only the floors below it, and no module
imports itself back through others (read from the source with ``ast``, imports inside functions
included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LIBRARY = {"lit_structattn.common", "lit_structattn.attention", "lit_structattn.structured",
           "lit_structattn.layers", "lit_structattn.models"}
APPLICATION_GROUND = {"lit_structattn.common", "lit_structattn.datamodules"}

#: What each floor may import from the project (besides itself): the library's floors, then the
#: application's (DESIGN.md, Layers). Every module of the package is on one of them.
ALLOWED = {
    "lit_structattn": {"lit_structattn.common"},  # the package's __init__
    "lit_structattn.common": set(),
    "lit_structattn.attention": {"lit_structattn.common"},
    "lit_structattn.structured": {"lit_structattn.common"},
    "lit_structattn.layers": {"lit_structattn.common", "lit_structattn.attention",
                              "lit_structattn.structured"},
    "lit_structattn.models": {"lit_structattn.common", "lit_structattn.attention",
                              "lit_structattn.structured", "lit_structattn.layers"},
    # our attention in other libraries' models (optional extras), beside the models
    "lit_structattn.integrations": {"lit_structattn.common", "lit_structattn.attention",
                                    "lit_structattn.layers"},
    # the application: data, metrics, figures and what every Trainer gets on the ground ...
    "lit_structattn.datamodules": {"lit_structattn.common"},
    "lit_structattn.metrics": APPLICATION_GROUND,
    "lit_structattn.figures": {"lit_structattn.common"},
    "lit_structattn.run": APPLICATION_GROUND,
    # ... side models above the models, tasks above them, the runner and the command on top
    "lit_structattn.prepare": LIBRARY | APPLICATION_GROUND | {"lit_structattn.run"},
    "lit_structattn.tasks": LIBRARY | APPLICATION_GROUND | {
        "lit_structattn.metrics", "lit_structattn.figures", "lit_structattn.run",
        "lit_structattn.prepare"},
    "lit_structattn.reproduce": {"lit_structattn.common", "lit_structattn.run"},
    "lit_structattn.cli": {"lit_structattn", "lit_structattn.common", "lit_structattn.datamodules",
                           "lit_structattn.run", "lit_structattn.tasks",
                           "lit_structattn.reproduce"},
}
PROJECT = ("lit_structattn",)
#: the repository's datamodules/ is the package lit_structattn.datamodules (a link in the package)
DATAMODULES = ROOT / "datamodules"


def module_name(path: Path) -> str:
    if path.is_relative_to(DATAMODULES):
        path = ROOT / "lit_structattn" / path.relative_to(ROOT)
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """The project modules the file ``path`` imports, as absolute dotted names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(path.read_text(), package)


def imports_in(source: str, package: str) -> set[str]:
    """The project modules ``source`` (a module of ``package``) imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {module for module in found if module.split(".")[0] in PROJECT}


def project_modules() -> dict[str, Path]:
    files = [*(ROOT / "lit_structattn").rglob("*.py"), *DATAMODULES.rglob("*.py")]
    return {module_name(path): path for path in files}


MODULES = project_modules()


def floor_of(module: str) -> str | None:
    """The floor of ``module``: the longest floor name it is or lies under."""
    floors = [floor for floor in ALLOWED if module == floor or module.startswith(floor + ".")]
    return max(floors, key=len, default=None)


def test_every_module_is_on_a_floor():
    assert len(MODULES) > 100
    assert not sorted(m for m in MODULES if floor_of(m) in (None, "lit_structattn")
                      and m != "lit_structattn")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_lower_floors(module):
    floor = floor_of(module)
    wrong = sorted(
        imported for imported in imported_modules(MODULES[module])
        if imported in MODULES and floor_of(imported) != floor
        and floor_of(imported) not in ALLOWED[floor]
    )
    assert not wrong, f"{module} (floor {floor}) imports {wrong}"


def test_no_import_cycles():
    graph = {name: {m for m in imported_modules(path) if m in MODULES and m != name}
             for name, path in MODULES.items()}
    # a package's __init__ re-exporting its own modules is not a cycle of the design
    graph = {name: {m for m in deps if not name.startswith(m + ".")}
             for name, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_checker_resolves_relative_imports():
    """Imports inside functions and relative ones count: a model importing the app is seen."""
    source = "def f():\n    from ..tasks import base\n    from . import pooling\n"
    found = imports_in(source, "lit_structattn.models")
    assert {"lit_structattn.tasks", "lit_structattn.tasks.base",
            "lit_structattn.models.pooling"} <= found
    assert floor_of("lit_structattn.tasks") == "lit_structattn.tasks"
    assert "lit_structattn.tasks" not in ALLOWED[floor_of("lit_structattn.models.pooling")]
    assert floor_of("lit_structattn.datamodules.babi") == "lit_structattn.datamodules"
