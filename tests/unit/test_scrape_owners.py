"""Only pods a SpeculativeDeployment's own Deployments made are scraped and counted: a pod that copies its
labels, or one made by a stranger's ReplicaSet that copies them too, is left out."""

from __future__ import annotations

from typing import Any

from specpilot.scrape.owners import StrangerNotice, owned_pods


def _obj(name: str, uid: str, controller_uid: str | None) -> dict[str, Any]:
    refs = [{"kind": "X", "name": "x", "uid": controller_uid, "controller": True}] if controller_uid else []
    return {"metadata": {"name": name, "uid": uid, "ownerReferences": refs}}


def test_only_pods_whose_owner_chain_leads_to_the_objects_deployments_are_its_own() -> None:
    deployments = [_obj("chat", "d1", "sd"), _obj("chat-canary", "d2", "sd")]
    replicasets = [_obj("chat-1", "rs1", "d1"), _obj("chat-canary-1", "rs2", "d2"),
                   _obj("forged-rs", "rs3", "d-stranger")]  # labelled like ours, another Deployment's
    pods = [_obj("chat-1-a", "p1", "rs1"), _obj("chat-canary-1-a", "p2", "rs2"),
            _obj("by-hand", "p3", None), _obj("forged", "p4", "rs3"), _obj("claims-our-deployment", "p5", "d1")]
    own, strangers = owned_pods(pods, replicasets, deployments)
    assert [p["metadata"]["name"] for p in own] == ["chat-1-a", "chat-canary-1-a"]
    assert [p["metadata"]["name"] for p in strangers] == ["by-hand", "forged", "claims-our-deployment"]


def test_with_no_deployments_known_no_pod_is_trusted() -> None:
    own, strangers = owned_pods([_obj("p", "p1", "rs1")], [_obj("rs", "rs1", "d1")], [])
    assert own == [] and len(strangers) == 1


def test_a_stranger_is_named_once_and_only_after_two_windows_running() -> None:
    notice = StrangerNotice()
    racing, stranger = _obj("chat-canary-1-a", "p2", "rs2"), _obj("by-hand", "p3", None)
    # A new canary's pod listed before its ReplicaSet: a stranger for one window only, never named.
    assert notice.to_name([racing, stranger]) == []
    assert [p["metadata"]["name"] for p in notice.to_name([stranger])] == ["by-hand"]
    assert notice.to_name([stranger]) == []  # named once
    assert notice.to_name([]) == [] and notice.to_name([stranger]) == []  # gone, then back: seen once again
    assert [p["metadata"]["name"] for p in notice.to_name([stranger])] == ["by-hand"]


def test_a_terminating_stranger_is_not_named() -> None:
    """A rolled-back canary's pod drains after its ReplicaSet is gone: a stranger by owners, but leaving."""
    notice = StrangerNotice()
    draining = _obj("chat-canary-1-a", "p2", None)
    draining["metadata"]["deletionTimestamp"] = "2026-12-07T09:54:03Z"
    assert notice.to_name([draining]) == [] and notice.to_name([draining]) == []
