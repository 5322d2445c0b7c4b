"""Loading Hugging Face hub datasets for online users, failing fast and clearly when the hub is
out of reach (offline mode, no network): every DataModule reads local files first."""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlparse

__all__ = ["HubUnavailableError", "hub_offline", "load_hub_dataset"]


class HubUnavailableError(RuntimeError):
    """A Hugging Face dataset could not be loaded (offline, unreachable, unknown name, ...)."""


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


def load_hub_dataset(name: str, config: str | None, split: str, local_hint: str) -> Any:
    """``datasets.load_dataset(name, config, split=split)``, failing fast with
    :class:`HubUnavailableError` (whose message says to use local files: ``local_hint``) when
    offline mode is on and the dataset is not cached, or when the hub is unreachable."""
    where = f"Hugging Face dataset {name!r}" + (f" (config {config!r})" if config else "")
    advice = f"Use local files instead: {local_hint}"
    offline = hub_offline()
    if not offline:
        reason = _check_hub_reachable()
        if reason is not None:
            raise HubUnavailableError(f"cannot load the {where}: {reason}. {advice}")
    try:
        import datasets

        return datasets.load_dataset(name, config, split=split)
    except Exception as error:  # any failure gets the same advice
        mode = (
            "offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and it is not in the "
            "local cache" if offline else "loading failed"
        )
        raise HubUnavailableError(
            f"cannot load split {split!r} of the {where}: {mode} "
            f"({type(error).__name__}: {error}). {advice}"
        ) from error
