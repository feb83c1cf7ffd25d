"""Kubernetes Events about SpeculativeDeployments (what `kubectl describe` shows under Events)."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from specpilot.controller.kube import Kube, KubeError

log = logging.getLogger(__name__)

COMPONENT = "specpilot"


class EventRecorder:
    def __init__(self, kube: Kube, instance: str) -> None:
        self.kube, self.instance = kube, instance

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
            "type": event_type, "reason": reason, "message": message[:1024],
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "reportingInstance": self.instance, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.kube.create(event)
        except KubeError as exc:
            # An Event is a courtesy: losing one must not fail the reconcile that produced it.
            log.warning("could not post event %s on %s: %s", reason, meta["name"], exc)
