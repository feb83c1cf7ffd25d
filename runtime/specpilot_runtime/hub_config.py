"""A hub id's config.json, fetched into the pod's hub cache before vLLM starts, so that the checkpoint rules
(checkpoint.py) read every checkpoint's facts (a DSpark draft's block size, a target's MTP layers), not only
those of checkpoints already cached.

Only config.json (a few kB) is fetched, with huggingface_hub (vLLM's own dependency: the same cache, the same
HF_TOKEN, so vLLM later finds it there), in a thread bounded by FETCH_TIMEOUT_S. Nothing is fetched for a
local directory, a checkpoint already cached, HF_HUB_OFFLINE, or where huggingface_hub is not installed; a
fetch that fails or runs out of time claims nothing and stops nothing: vLLM downloads the checkpoint (or
fails to) as it always did.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .checkpoint import HUB_ID, hub_cache, hub_snapshot

log = logging.getLogger("specpilot.runtime")

# A HEAD and a few kB from the Hub; a pod start is not held longer than this by it.
FETCH_TIMEOUT_S = 20.0
OFFLINE_VALUES = frozenset({"1", "on", "true", "yes"})

Download = Callable[..., Any]


def _hf_hub_download() -> Download | None:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None
    return hf_hub_download


def wants_fetch(model: str, env: Mapping[str, str], revision: str | None) -> bool:
    """A hub id, not a local directory, not cached, and the pod is not offline."""
    if not model or not HUB_ID.fullmatch(model) or Path(model).is_dir():
        return False
    if env.get("HF_HUB_OFFLINE", "").strip().lower() in OFFLINE_VALUES:
        return False
    return hub_snapshot(model, env, revision) is None


def fetch_config(model: str, env: Mapping[str, str], revision: str | None = None,
                 download: Download | None = None, timeout_s: float = FETCH_TIMEOUT_S) -> bool:
    """Fetch `model`'s config.json into the hub cache when `wants_fetch`; whether it is there now. `download`:
    huggingface_hub's hf_hub_download (its keyword arguments)."""
    try:
        if not wants_fetch(model, env, revision):
            return False
    except Exception as exc:  # a damaged cache: checkpoint.py says so when it reads it
        log.info("config.json of %s not fetched: %s", model, exc)
        return False
    download = download or _hf_hub_download()
    if download is None:
        return False
    outcome: list[BaseException | None] = []

    def fetch() -> None:
        try:
            download(repo_id=model, filename="config.json", revision=revision, cache_dir=str(hub_cache(env)),
                     token=env.get("HF_TOKEN") or None)
            outcome.append(None)
        except BaseException as exc:  # reported below, in the caller's thread
            outcome.append(exc)

    worker = threading.Thread(target=fetch, name="fetch-config", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        log.warning("config.json of %s not fetched within %.0f s: its checkpoint is not checked before vLLM "
                    "starts", model, timeout_s)
        return False
    if outcome[0] is not None:
        log.warning("config.json of %s not fetched (%s): its checkpoint is not checked before vLLM starts",
                    model, str(outcome[0])[:300])
        return False
    log.info("fetched config.json of %s into the hub cache, to check the checkpoint before vLLM starts", model)
    return True
