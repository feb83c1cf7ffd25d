"""Kubernetes Events about SpeculativeDeployments (what `kubectl describe` shows under Events).

Posted in the background, as client-go's event broadcaster does: a reconcile that creates three children
would otherwise wait for three more round trips to the API server before its status write, and an Event
is a courtesy, not part of the state. At most MAX_PENDING wait; beyond that they are dropped with a log
line (an API server that slow has bigger problems to show).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from specpilot.controller.kube import EVENT_POSTERS, Kube, KubeError, NotLeader
from specpilot.display import bounded

log = logging.getLogger(__name__)

COMPONENT = "specpilot"
# Characters of an Event's message: events.k8s.io holds a note to 1 KiB, and `kubectl describe` stays readable.
MAX_MESSAGE = 1024
MAX_PENDING = 1000


class EventRecorder:
    def __init__(self, kube: Kube, instance: str) -> None:
        self.kube, self.instance = kube, instance
        self._pool = ThreadPoolExecutor(EVENT_POSTERS, "events")
        self._pending = 0
        self._lock = threading.Lock()

    def normal(self, obj: dict[str, Any], reason: str, message: str) -> None:
        self._post(obj, "Normal", reason, message)

    def warning(self, obj: dict[str, Any], reason: str, message: str) -> None:
        self._post(obj, "Warning", reason, message)

    def _post(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"],
                               "resourceVersion": meta.get("resourceVersion")},
            "type": event_type, "reason": reason, "message": bounded(message, MAX_MESSAGE),
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "reportingInstance": self.instance, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        with self._lock:
            if self._pending >= MAX_PENDING:
                log.warning("dropped event %s on %s: %d events already wait to be posted", reason, meta["name"],
                            self._pending)
                return
            self._pending += 1
        self._pool.submit(self._send, event)

    def _send(self, event: dict[str, Any]) -> None:
        try:
            self.kube.create(event)
        except (KubeError, NotLeader) as exc:
            # An Event is a courtesy: losing one must not fail anything (a standby posts none at all).
            log.warning("could not post event %s on %s: %s", event["reason"], event["involvedObject"]["name"], exc)
        finally:
            with self._lock:
                self._pending -= 1

    def flush(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the events already recorded to be posted (a clean stop)."""
        deadline = time.monotonic() + timeout_s
        while self._pending and time.monotonic() < deadline:
            time.sleep(0.05)
