"""pod_index.py: what the pod runner looks at in a pass. A change to a pod must reach its ReplicaSet, a
ReplicaSet's its Deployment, and the Endpoints of the Services that select it; the owner, label and Service
indexes follow every change, deletes included."""

from __future__ import annotations

from typing import Any

from specpilot_harness.sandbox.pod_index import Dirty, PodIndex


def _obj(uid: str, owner: str | None = None, labels: dict[str, str] | None = None, ns: str = "a") -> dict[str, Any]:
    refs = [{"uid": owner, "controller": True}] if owner else []
    return {"metadata": {"uid": uid, "name": uid, "namespace": ns, "ownerReferences": refs, "labels": labels or {}}}


def test_changes_reach_the_owners_and_the_endpoints() -> None:
    dirty = Dirty(full=False)
    dirty.mark("pod", "MODIFIED", _obj("p1", owner="rs1"))
    dirty.mark("rs", "MODIFIED", _obj("rs1", owner="d1"))
    dirty.mark("svc", "DELETED", _obj("s1", ns="b"))
    assert dirty.take("rs") == {"rs1"} and dirty.take("deploy") == {"d1"} and dirty.take("pod") == {"p1"}
    assert dirty.take_endpoints() == ({("b", "s1")}, {"p1"}) and set(dirty.take_gone_services()) == {("b", "s1")}
    assert dirty.take("rs") == set() and dirty.take_endpoints() == (set(), set())


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


def _svc(name: str, selector: dict[str, str], ns: str = "a") -> dict[str, Any]:
    return {"metadata": {"uid": name, "name": name, "namespace": ns}, "spec": {"selector": selector}}


def test_services_that_may_select_a_pod_are_found_without_the_others() -> None:
    index = PodIndex()
    for i in range(50):  # a fleet: one shared label, one of their own
        index.update("svc", "ADDED", _svc(f"s{i}", {"managed-by": "op", "deployment": f"d{i}"}))
    pod = _obj("p1", labels={"managed-by": "op", "deployment": "d7", "track": "stable"})
    found = index.services_for(pod)
    assert ("a", "s7") in found and len(found) <= 2  # at most the first Service, indexed before any sharing
    index.update("svc", "MODIFIED", _svc("s7", {"deployment": "d8"}))
    assert ("a", "s7") not in index.services_for(pod)
    assert ("a", "s7") in index.services_for(_obj("p2", labels={"deployment": "d8"}))
    index.update("svc", "DELETED", _svc("s8", {}))
    assert ("a", "s8") not in index.services_for(_obj("p3", labels={"managed-by": "op", "deployment": "d8"}))
    assert index.services_for(_obj("p4", ns="b", labels={"managed-by": "op", "deployment": "d7"})) == set()
