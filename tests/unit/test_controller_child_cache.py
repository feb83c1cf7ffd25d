"""The reconciler's view of children: fed by watch events and by its own applies, never older than what it
already knows, silent (None) where it knows nothing so that the reconcile asks the API, and keyed by the
owner reference (its uid), never by a label anyone may edit."""

from __future__ import annotations

from typing import Any

from specpilot.api.models import API_VERSION, KIND
from specpilot.controller.child_cache import ChildCache
from specpilot.api.names import DEPLOYMENT_LABEL

PARENT = ("team", "uid-a")


def owner(name: str = "sd-a", uid: str = "uid-a") -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": uid, "controller": True}


def child(name: str, rv: int, kind: str = "Deployment", n: int = 3) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": name, "namespace": "team", "resourceVersion": str(rv),
                         "labels": {DEPLOYMENT_LABEL: "sd-a"}, "ownerReferences": [owner()]},
            "spec": {"n": n}}


def test_nothing_known_is_none_and_a_seeded_empty_list_is_known_empty() -> None:
    cache = ChildCache()
    assert cache.get(PARENT, "Deployment") is None
    cache.seed(PARENT, "Deployment", [])
    assert cache.get(PARENT, "Deployment") == {}
    assert cache.get(PARENT, "Service") is None


def test_an_event_already_in_flight_does_not_undo_an_apply_and_the_echo_is_no_news() -> None:
    cache = ChildCache()
    assert cache.observe(None, child("sd-a", 10, n=3))
    cache.applied(PARENT, child("sd-a", 12, n=5))
    assert not cache.observe("MODIFIED", child("sd-a", 11, n=3))  # written before the apply, delivered after
    assert cache.get(PARENT, "Deployment")["sd-a"]["spec"]["n"] == 5
    assert not cache.observe("MODIFIED", child("sd-a", 12, n=5))  # the apply's own echo: nothing to do
    assert cache.observe("MODIFIED", child("sd-a", 13, n=4))  # a hand edit after it: reconcile
    assert cache.get(PARENT, "Deployment")["sd-a"]["spec"]["n"] == 4


def test_a_deleted_child_is_gone_until_a_newer_version_appears() -> None:
    cache = ChildCache()
    cache.observe(None, child("sd-a-canary", 20))
    cache.deleted(PARENT, child("sd-a-canary", 20))
    cache.observe("MODIFIED", child("sd-a-canary", 19))  # stale: must not resurrect it
    assert "sd-a-canary" not in cache.get(PARENT, "Deployment")
    cache.observe("ADDED", child("sd-a-canary", 30))  # created again
    assert cache.get(PARENT, "Deployment")["sd-a-canary"]["metadata"]["resourceVersion"] == "30"
    cache.observe("DELETED", child("sd-a-canary", 31))
    assert cache.get(PARENT, "Deployment") == {}


def test_a_list_does_not_overwrite_what_watches_reported_meanwhile() -> None:
    cache = ChildCache()
    cache.observe("DELETED", child("sd-a", 40))
    cache.seed(PARENT, "Deployment", [child("sd-a", 39)])  # the list was answered before the deletion
    assert cache.get(PARENT, "Deployment") == {}


def test_objects_no_speculative_deployment_controls_are_ignored_and_forget_drops_the_parent() -> None:
    cache = ChildCache()
    stray = child("other", 1)
    del stray["metadata"]["ownerReferences"]  # labelled as a child, owned by nobody: not a child
    assert cache.observe("ADDED", stray) == []
    not_controller = child("other2", 1)
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert cache.observe("ADDED", not_controller) == []
    assert cache.get(PARENT, "Deployment") is None
    cache.observe("ADDED", child("sd-a", 2, kind="Service"))
    cache.forget(PARENT)
    assert cache.get(PARENT, "Service") is None


def test_a_child_whose_label_was_removed_is_still_the_parents_and_its_deletion_is_news() -> None:
    cache = ChildCache()
    assert cache.observe(None, child("sd-a", 10)) == [("team", "sd-a")]
    unlabelled = child("sd-a", 11)
    del unlabelled["metadata"]["labels"]
    assert cache.observe("MODIFIED", unlabelled) == [("team", "sd-a")]
    assert "labels" not in cache.get(PARENT, "Deployment")["sd-a"]["metadata"]  # the reconcile sees the edit
    assert cache.observe("DELETED", child("sd-a", 12)) == [("team", "sd-a")]
    assert cache.get(PARENT, "Deployment") == {}


def test_a_child_whose_owner_reference_goes_leaves_its_parent() -> None:
    cache = ChildCache()
    cache.observe(None, child("sd-a", 10))
    disowned = child("sd-a", 11)
    disowned["metadata"]["ownerReferences"] = []
    assert cache.observe("MODIFIED", disowned) == [("team", "sd-a")]  # the parent finds its name taken
    assert cache.get(PARENT, "Deployment") == {}


def test_a_same_named_parent_with_another_uid_owns_nothing_of_its_predecessor() -> None:
    cache = ChildCache()
    cache.observe(None, child("sd-a", 10))
    cache.born(("team", "uid-new"), "sd-a", ("Deployment",))
    assert cache.get(("team", "uid-new"), "Deployment") == {}


def test_the_deletion_of_an_object_holding_a_childs_name_wakes_the_parent() -> None:
    cache = ChildCache()
    stranger = child("shop", 5, kind="Service")
    del stranger["metadata"]["ownerReferences"]
    cache.blocked(("team", "Service", "shop"), ("team", "shop"))
    assert cache.observe("MODIFIED", stranger) == []
    assert cache.observe("DELETED", stranger) == [("team", "shop")]


def test_only_a_deployment_status_change_a_reconcile_reads_asks_for_one() -> None:
    """kube-controller-manager rewrites a Deployment's status several times per rollout; only the counts and the
    Progressing reason that status.py reads wake the parent, yet the cache keeps the newest for the tuner."""
    cache = ChildCache()
    base = child("sd-a", 10)
    cache.observe(None, base)

    def with_status(rv: int, **status: Any) -> dict[str, Any]:
        obj = child("sd-a", rv)
        obj["status"] = status
        obj["metadata"]["managedFields"] = [{"manager": "kube-controller-manager", "time": f"t{rv}"}]
        return obj

    assert cache.observe("MODIFIED", with_status(11, observedGeneration=1, replicas=1, updatedReplicas=1))
    quiet = with_status(12, observedGeneration=1, replicas=1, updatedReplicas=1, unavailableReplicas=1,
                        conditions=[{"type": "Available", "status": "False", "lastUpdateTime": "t12"}])
    assert not cache.observe("MODIFIED", quiet)
    assert cache.get(PARENT, "Deployment")["sd-a"]["status"]["unavailableReplicas"] == 1
    assert cache.observe("MODIFIED", with_status(13, observedGeneration=1, replicas=1, updatedReplicas=1,
                                                 readyReplicas=1))
    stuck = with_status(14, observedGeneration=1, replicas=1, updatedReplicas=1, readyReplicas=1,
                        conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}])
    assert cache.observe("MODIFIED", stuck)
    edited = with_status(15, observedGeneration=1, replicas=1, updatedReplicas=1, readyReplicas=1,
                         conditions=stuck["status"]["conditions"])
    edited["metadata"]["annotations"] = {"someone": "edited"}
    assert cache.observe("MODIFIED", edited)  # anything outside status may be a hand edit to revert
