"""The newest SpeculativeDeployment bodies the operator knows: its watch's events and the API's answers to its
own status writes. A reconcile starts from one instead of a GET (a quorum read through etcd: the commonest
request of this operator at scale, one per reconcile). It stays correct because its status write is
conditional on that body's resourceVersion: a body older than the API's is a 409, and the retry reads afresh.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from specpilot.controller.child_cache import Named, newer, slim


class Bodies:
    """Bodies by (namespace, name); written by the event loop (watch events) and by reconcile threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by: dict[Named, dict[str, Any]] = {}

    def offer(self, obj: dict[str, Any]) -> None:
        """Keep `obj` unless what is kept is newer (a watch event delivered after the answer to a later write)."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        with self._lock:
            if newer(self._by.get(key), obj):
                self._by[key] = slim(obj)

    def take(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the newest body (a reconcile edits what it reads), None when there is none."""
        with self._lock:
            body = self._by.get((namespace, name))
        return copy.deepcopy(body) if body is not None else None

    def drop(self, namespace: str, name: str) -> None:
        """Forget the body: the object is gone, or a write found it older than the API's."""
        with self._lock:
            self._by.pop((namespace, name), None)
