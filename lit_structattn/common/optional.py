"""Libraries that only an extra of the package installs (``pip install
'lit_structattn[translation]'``): imported where they are used, with an error that names the
extra when they are missing."""

from __future__ import annotations

import importlib
from types import ModuleType


def optional_import(module: str, extra: str) -> ModuleType:
    """``import module``; an ``ImportError`` naming the extra ``extra`` that installs it when it
    is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{module} is not installed: it comes with the {extra!r} extra, "
            f"pip install 'lit_structattn[{extra}]'") from error
