"""The one place a SpeculativeDeployment's status is written (a merge patch to its /status subresource).

What goes into a patch is plain data computed elsewhere: the reconciler's from status.py (conditions,
rollout numbers), the tuning loop's from tuning/status.py (the tuner's state, the Tuning condition, accepted
length). The two writers share the conditions list, so the loop's writes are re-based on a fresh read
under the object's reconcile lock (handlers.Scheduler.lock), which the reconciler holds while it runs."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from specpilot.controller.kube import Kube, KubeError
from specpilot.controller.status import changed

Status = dict[str, Any]
# A write that meets a 409 is re-based on a fresh read this many times before the window is lost.
CONFLICT_ATTEMPTS = 3


def write_changed(kube: Kube, path: str, old: Status, new: Status,
                  resource_version: str | None = None) -> dict[str, Any] | None:
    """The reconciler's write: `new` (computed from `old`, the status it read at `resource_version`), only when
    it changes a key; the object as written, None when nothing was."""
    if changed(old, new):
        return kube.patch_status(path, new, resource_version)
    return None


async def write_fresh(kube: Kube, lock: asyncio.Lock, path: str, patch_of: Callable[[Status], Status],
                      written: Callable[[dict[str, Any]], None] | None = None) -> None:
    """The tuning loop's write: `patch_of` the status as it is now, under `lock`, so neither writer puts back a
    stale conditions list; nothing when the object is gone. `written` is given the object as written."""
    async with lock:
        for attempt in range(CONFLICT_ATTEMPTS):
            current = await asyncio.to_thread(kube.get, path)
            if current is None:
                return
            try:
                answer = await asyncio.to_thread(kube.patch_status, path, patch_of(current.get("status") or {}))
                if written is not None and isinstance(answer, dict):
                    written(answer)
                return
            except KubeError as exc:
                if exc.status != 409 or attempt + 1 == CONFLICT_ATTEMPTS:
                    raise
