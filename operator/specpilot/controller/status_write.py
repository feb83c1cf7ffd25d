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
                      generation: int | None, written: Callable[[dict[str, Any]], None] | None = None) -> bool:
    """The tuning loop's write: `patch_of` the status as it is now, under `lock`, so neither writer puts back a
    stale conditions list. Nothing is written when the object is gone or its spec is no longer at `generation`,
    the one the loop decided for: a window that began before the user turned tuning off or set N by hand must
    not put its Tuning condition back over the reconciler's. `written` is given the object as written; returns
    whether the patch was written."""
    async with lock:
        for attempt in range(CONFLICT_ATTEMPTS):
            current = await asyncio.to_thread(kube.get, path)
            if current is None or current["metadata"].get("generation") != generation:
                return False
            try:
                answer = await asyncio.to_thread(kube.patch_status, path, patch_of(current.get("status") or {}))
                if written is not None and isinstance(answer, dict):
                    written(answer)
                return True
            except KubeError as exc:
                if exc.status != 409 or attempt + 1 == CONFLICT_ATTEMPTS:
                    raise
    return False
