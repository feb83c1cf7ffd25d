"""pod_index.py: what the pod runner looks at in a pass. A change to a pod must reach its ReplicaSet, a
ReplicaSet's its Deployment, and the Endpoints of its namespace; the owner and label indexes follow every
change, deletes included."""

from __future__ import annotations

from typing import Any

from specpilot_harness.sandbox.pod_index import Dirty, PodIndex


def _obj(uid: str, owner: str | None = None, labels: dict[str, str] | None = None, ns: str = "a") -> dict[str, Any]:
    refs = [{"uid": owner, "controller": True}] if owner else []
    return {"metadata": {"uid": uid, "name": uid, "namespace": ns, "ownerReferences": refs, "labels": labels or {}}}


def test_changes_reach_the_owners_and_the_namespace() -> None:
    dirty = Dirty(full=False)
    dirty.mark("pod", "MODIFIED", _obj("p1", owner="rs1"))
    dirty.mark("rs", "MODIFIED", _obj("rs1", owner="d1"))
    dirty.mark("svc", "DELETED", _obj("s1", ns="b"))
    assert dirty.take("rs") == {"rs1"} and dirty.take("deploy") == {"d1"} and dirty.take("pod") == {"p1"}
    assert dirty.take_namespaces() == {"a", "b"} and set(dirty.take_gone_services()) == {("b", "s1")}
    assert dirty.take("rs") == set() and dirty.take_namespaces() == set()


def test_a_deleted_pod_still_marks_its_replicaset() -> None:
    dirty = Dirty(full=False)
    dirty.mark("pod", "DELETED", _obj("p1", owner="rs1"))
    assert dirty.take("pod") == set() and dirty.take("rs") == {"rs1"}


def test_owner_and_label_indexes_follow_changes() -> None:
    index = PodIndex()
    index.update("pod", "ADDED", _obj("p1", owner="rs1", labels={"app": "x", "track": "stable"}))
    index.update("pod", "ADDED", _obj("p2", owner="rs1", labels={"app": "x", "track": "canary"}))
    assert index.owned("pod", "rs1") == {"p1", "p2"}
    assert index.candidates("a", {"app": "x", "track": "canary"}) == {"p2"}
    index.update("pod", "MODIFIED", _obj("p2", owner="rs1", labels={"app": "y"}))
    assert index.candidates("a", {"app": "x"}) == {"p1"} and index.candidates("b", {"app": "x"}) == set()
    index.update("pod", "DELETED", _obj("p1", owner="rs1", labels={"app": "x"}))
    assert index.owned("pod", "rs1") == {"p2"} and index.candidates("a", {"app": "x"}) == set()
