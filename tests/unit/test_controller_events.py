"""Events are posted in the background: the reconcile that records one does not wait for the API server,
a failure to post (or a lost Lease) never reaches it, and a flood is bounded."""

from __future__ import annotations

import threading
from typing import Any

from specpilot.controller import events as ev
from specpilot.controller.kube import KubeError, NotLeader

OBJ = {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
       "metadata": {"name": "sd-a", "namespace": "team", "uid": "u1"}}


class SlowKube:
    def __init__(self, fail: Exception | None = None) -> None:
        self.posted: list[dict[str, Any]] = []
        self.gate = threading.Event()
        self.fail = fail

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        self.posted.append(obj)
        return obj


def test_recording_returns_at_once_and_the_event_is_posted_after() -> None:
    kube = SlowKube()
    recorder = ev.EventRecorder(kube, "op-1")  # type: ignore[arg-type]
    recorder.normal(OBJ, "Created", "created Deployment sd-a")
    assert kube.posted == []  # the API server has not answered yet; the reconcile went on
    kube.gate.set()
    recorder.flush(5)
    assert [(e["reason"], e["message"], e["involvedObject"]["uid"]) for e in kube.posted] == \
        [("Created", "created Deployment sd-a", "u1")]


def test_a_failed_post_or_a_lost_lease_is_logged_not_raised(caplog: Any) -> None:
    for failure in (KubeError(500, "InternalError", "boom"), NotLeader("not the leader")):
        kube = SlowKube(fail=failure)
        kube.gate.set()
        recorder = ev.EventRecorder(kube, "op-1")  # type: ignore[arg-type]
        recorder.warning(OBJ, "InvalidSpec", "spec.model: is required")
        recorder.flush(5)
    assert caplog.text.count("could not post event InvalidSpec on sd-a") == 2


def test_a_flood_is_bounded(monkeypatch: Any, caplog: Any) -> None:
    monkeypatch.setattr(ev, "MAX_PENDING", 3)
    kube = SlowKube()
    recorder = ev.EventRecorder(kube, "op-1")  # type: ignore[arg-type]
    for i in range(5):
        recorder.normal(OBJ, "Updated", f"update {i}")
    kube.gate.set()
    recorder.flush(5)
    assert len(kube.posted) == 3 and caplog.text.count("dropped event Updated on sd-a") == 2
