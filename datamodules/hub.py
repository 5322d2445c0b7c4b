"""Loading Hugging Face hub datasets for online users, failing fast and clearly when the hub is
out of reach (offline mode, no network), when a name is a loading-script dataset that
``datasets`` >= 4 refuses, or when a name is unknown: every DataModule reads local files first.

Hub copies that load with the current ``datasets`` (no loading script), per family. The
canonical repositories still hold their loading scripts on ``main``, but the hub's parquet
converter published every config on the branch ``refs/convert/parquet`` as
``<config>/<split>/0000.parquet``, with the features (``ClassLabel`` names included) kept in the
files; :func:`load_hub_dataset` reads that branch for the repositories of
:data:`PARQUET_EXPORTS`:

- CoNLL-2003 NER (old name ``conll2003``): ``eriktks/conll2003``, no config; columns
  ``tokens``, ``ner_tags``.
- CoNLL-2002 NER (``conll2002``): ``eriktks/conll2002``, ``es`` (or ``nl``); ``tokens``,
  ``ner_tags``.
- UD POS (``universal_dependencies``): ``universal-dependencies/universal_dependencies``,
  ``en_ewt`` (or any treebank config); ``tokens``, ``upos``.
- word-level QE (``wmt20_mlqe_task2``): ``wmt/wmt20_mlqe_task2``, ``en-de``; ``translation``
  ({en, de}), ``mt_tags`` (2N+1 tags with gaps), ``alignments`` ([source, MT] index pairs).
- translation (``iwslt2017``): ``IWSLT/iwslt2017``, ``iwslt2017-de-en``; ``translation``
  ({de, en}).

Tag columns are ``Sequence(ClassLabel)``: ids whose class names are the tag strings (NER: ``O``,
``B-PER``, ...; UPOS: ``NOUN``, ..., and ``_`` for multiword tokens; QE: ``BAD``/``OK``).
Every family has such a copy; a script-based name without one gets an error saying so.

``hub_name`` may also be a local folder laid out like such a parquet export
(``<folder>/<hub_config>/<split>/*.parquet``, e.g. the branch downloaded with
``huggingface-cli download --repo-type dataset --revision refs/convert/parquet``): it is read
with ``datasets`` without touching the network.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

__all__ = [
    "PARQUET_EXPORT",
    "PARQUET_EXPORTS",
    "SCRIPT_DATASETS",
    "HubUnavailableError",
    "ScriptDatasetError",
    "UnknownHubDatasetError",
    "hub_offline",
    "load_hub_dataset",
]

#: the branch where the hub's parquet converter publishes every config of a dataset
PARQUET_EXPORT = "refs/convert/parquet"

#: loading-script names -> the repository whose parquet export loads with ``datasets`` >= 4
SCRIPT_DATASETS = {
    "conll2003": "eriktks/conll2003",
    "conll2002": "eriktks/conll2002",
    "universal_dependencies": "universal-dependencies/universal_dependencies",
    "wmt20_mlqe_task2": "wmt/wmt20_mlqe_task2",
    "iwslt2017": "IWSLT/iwslt2017",
}

#: repositories whose ``main`` holds a loading script: read from :data:`PARQUET_EXPORT`
PARQUET_EXPORTS = frozenset(SCRIPT_DATASETS.values())

_SCRIPT_MESSAGE = "Dataset scripts are no longer supported"  # datasets >= 4, RuntimeError


class HubUnavailableError(RuntimeError):
    """A Hugging Face dataset could not be loaded (offline, unreachable, unknown name, ...)."""


class ScriptDatasetError(HubUnavailableError):
    """The name is a loading-script dataset, which ``datasets`` >= 4 cannot load."""


class UnknownHubDatasetError(HubUnavailableError):
    """The hub has no dataset of that name (or it is private or gated)."""


def hub_offline() -> bool:
    """True if ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` asks for offline mode."""
    return any(
        os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _check_hub_reachable(timeout: float = 3.0) -> str | None:
    """None if the hub endpoint accepts a TCP connection within ``timeout`` seconds (or a proxy
    is configured, which we cannot probe), else the reason. Keeps an offline machine without the
    offline variables from retrying for tens of seconds."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
    except OSError as error:
        return f"{endpoint} is unreachable ({error})"
    return None


def _load(name: str, config: str | None, split: str) -> Any:
    """``datasets.load_dataset`` for a local parquet-export folder, a repository of
    :data:`PARQUET_EXPORTS` (its parquet branch, the config as folder) or any other name."""
    import datasets

    if Path(name).expanduser().is_dir():
        return datasets.load_dataset(str(Path(name).expanduser()), data_dir=config, split=split)
    if name in PARQUET_EXPORTS:
        return datasets.load_dataset(name, data_dir=config, revision=PARQUET_EXPORT, split=split)
    return datasets.load_dataset(name, config, split=split)


def _is_not_found(error: Exception) -> bool:
    """True for ``datasets``' DatasetNotFoundError (matched by name: its module moved between
    ``datasets`` versions)."""
    return any(cls.__name__ == "DatasetNotFoundError" for cls in type(error).__mro__)


def _script_error(name: str, error: Exception, advice: str) -> ScriptDatasetError:
    """The error for a loading-script name: the parquet copy to use, or that none is known."""
    copy = SCRIPT_DATASETS.get(name)
    if copy is not None:
        instead = (f"use {copy!r} (read from its parquet export, branch {PARQUET_EXPORT}, "
                   f"with the same hub_config) or local files")
    else:
        instead = "no parquet copy of it is known here; use local files"
    return ScriptDatasetError(
        f"{name!r} is a loading-script dataset, which datasets >= 4 cannot load "
        f"({type(error).__name__}: {error}); {instead}: {advice}")


def _explain(name: str, where: str, split: str, error: Exception, offline: bool,
             advice: str) -> HubUnavailableError:
    """The :class:`HubUnavailableError` (or subclass) that says why ``error`` happened."""
    if isinstance(error, RuntimeError) and _SCRIPT_MESSAGE in str(error):
        return _script_error(name, error, advice)
    cause = f"({type(error).__name__}: {error})"
    if offline:
        return HubUnavailableError(
            f"cannot load split {split!r} of the {where}: offline mode is on (HF_HUB_OFFLINE / "
            f"HF_DATASETS_OFFLINE) and it is not in the local cache {cause}. "
            f"Use local files instead: {advice}")
    if _is_not_found(error):
        return UnknownHubDatasetError(
            f"cannot load split {split!r} of the {where}: the hub has no such dataset (or it "
            f"is private or gated) {cause}. Check the name (hub copies that load: "
            f"{', '.join(sorted(PARQUET_EXPORTS))}) or use local files: {advice}")
    if isinstance(error, ConnectionError):
        return HubUnavailableError(
            f"cannot load split {split!r} of the {where}: the hub is unreachable {cause}. "
            f"Use local files instead: {advice}")
    return HubUnavailableError(
        f"cannot load split {split!r} of the {where}: loading failed {cause}. "
        f"Use local files instead: {advice}")


def load_hub_dataset(name: str, config: str | None, split: str, local_hint: str) -> Any:
    """Split ``split`` of the hub dataset ``name`` (config ``config``) as a ``datasets.Dataset``.

    ``name`` is a hub repository (those of :data:`PARQUET_EXPORTS` are read from their parquet
    export, ``config`` naming its folder) or a local folder laid out like a parquet export.
    Fails fast with :class:`HubUnavailableError` (whose message says to use local files:
    ``local_hint``) when offline mode is on and the dataset is not cached or the hub is
    unreachable, with :class:`ScriptDatasetError` for a loading-script name (naming its parquet
    copy, if any) and with :class:`UnknownHubDatasetError` for a name the hub does not have."""
    where = f"Hugging Face dataset {name!r}" + (f" (config {config!r})" if config else "")
    offline = hub_offline()
    local = Path(name).expanduser().is_dir()
    if not offline and not local:
        reason = _check_hub_reachable()
        if reason is not None:
            raise HubUnavailableError(
                f"cannot load the {where}: {reason}. Use local files instead: {local_hint}")
    try:
        return _load(name, config, split)
    except Exception as error:  # every failure is explained, with the local-files advice
        raise _explain(name, where, split, error, offline, local_hint) from error
