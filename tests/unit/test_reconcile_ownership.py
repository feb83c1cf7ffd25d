"""A reconcile never takes over what the operator did not create: another object holding a child's name
blocks the whole reconcile (nothing written, nothing deleted) with a ChildConflict condition and a Warning
naming it and its owner, until it goes; a child the API server refuses is said in status, not only logged."""

from __future__ import annotations

import copy
from typing import Any

from specpilot.controller.kube import KubeError
from specpilot.api.names import DEPLOYMENT_LABEL

from test_reconcile_child_cache import FakeApi, _reconciler, _sd


def _conditions(api: FakeApi) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in api.sd["status"].get("conditions") or []}


def _stranger(kind: str, name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1" if kind != "Deployment" else "apps/v1", "kind": kind,
            "metadata": {"name": name, "namespace": "team", "resourceVersion": "7", "uid": f"u-{name}", **meta},
            "spec": {"selector": {"app": "shop"}}}


class RecordingEvents(FakeApi):
    def __init__(self, sd: dict[str, Any]) -> None:
        super().__init__(sd)
        self.events: list[dict[str, Any]] = []

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.events.append(obj)
        return obj


def test_another_teams_service_blocks_the_reconcile_until_it_goes() -> None:
    api = RecordingEvents(_sd())
    shop = _stranger("Service", "chat", managedFields=[{"manager": "kubectl-client-side-apply"}])
    api.children[("Service", "chat")] = copy.deepcopy(shop)
    reconciler = _reconciler(api)
    reconciler.born("team", "chat", "u-chat")
    assert reconciler.reconcile("team", "chat") == "conflict"
    assert api.children == {("Service", "chat"): shop}  # nothing created, nothing written to theirs
    assert not any(c.startswith(("apply", "delete")) for c in api.calls)
    conflict = _conditions(api)["ChildConflict"]
    assert conflict["status"] == "True" and conflict["reason"] == "NameTaken"
    assert "Service chat already exists" in conflict["message"] and "kubectl-client-side-apply" in conflict["message"]
    reconciler.events.flush(5)
    warnings = [e for e in api.events if e["type"] == "Warning"]
    assert [e["reason"] for e in warnings] == ["ChildConflict"] and "Service chat" in warnings[0]["message"]

    del api.children[("Service", "chat")]  # the other team renames theirs
    assert reconciler.reconcile("team", "chat") == "applied"
    assert sorted(kind for kind, _ in api.children) == ["ConfigMap", "ConfigMap", "Deployment", "Service"]
    conflict = _conditions(api)["ChildConflict"]
    assert conflict["status"] == "False" and conflict["reason"] == "NoConflict"


def test_an_object_owned_by_another_speculative_deployment_is_named_with_its_owner() -> None:
    api = FakeApi(_sd())
    other = _stranger("ConfigMap", "chat-engine", ownerReferences=[
        {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "name": "chat-old",
         "uid": "u-other", "controller": True}])
    api.children[("ConfigMap", "chat-engine")] = other
    reconciler = _reconciler(api)
    assert reconciler.reconcile("team", "chat") == "conflict"
    message = _conditions(api)["ChildConflict"]["message"]
    assert "ConfigMap chat-engine" in message and "SpeculativeDeployment chat-old (uid u-other)" in message


def test_a_child_whose_label_was_removed_is_still_ours_and_is_restored() -> None:
    api = FakeApi(_sd())
    reconciler = _reconciler(api)
    reconciler.born("team", "chat", "u-chat")
    reconciler.reconcile("team", "chat")
    dep = api.children[("Deployment", "chat")]
    del dep["metadata"]["labels"][DEPLOYMENT_LABEL]
    api.rv += 1
    dep["metadata"]["resourceVersion"] = str(api.rv)
    assert reconciler.cache.observe("MODIFIED", copy.deepcopy(dep)) == [("team", "chat")]
    assert reconciler.reconcile("team", "chat") == "applied"
    assert api.children[("Deployment", "chat")]["metadata"]["labels"][DEPLOYMENT_LABEL] == "chat"
    gone = api.children.pop(("Deployment", "chat"))
    del gone["metadata"]["labels"][DEPLOYMENT_LABEL]
    api.rv += 1
    gone["metadata"]["resourceVersion"] = str(api.rv)
    assert reconciler.cache.observe("DELETED", gone) == [("team", "chat")]  # found by owner, not by label
    assert reconciler.reconcile("team", "chat") == "applied"
    assert ("Deployment", "chat") in api.children


class Refusing(FakeApi):
    def apply(self, obj: dict[str, Any], field_manager: str = "specpilot", force: bool = True) -> dict[str, Any]:
        if obj["kind"] == "Deployment" and self.refuse:
            raise KubeError(422, "Invalid", 'Deployment.apps "chat" is invalid: spec.template.spec.tolerations[0]'
                                            '.tolerationSeconds: Invalid value: "soon"')
        return super().apply(obj, field_manager, force)

    refuse = True


def test_a_child_the_api_server_refuses_is_said_in_status_and_recovers() -> None:
    api = Refusing(_sd())
    reconciler = _reconciler(api)
    reconciler.born("team", "chat", "u-chat")
    assert reconciler.reconcile("team", "chat") == "refused"
    applied = _conditions(api)["ChildrenApplied"]
    assert applied["status"] == "False" and applied["reason"] == "Refused"
    assert "Deployment chat: 422 Invalid" in applied["message"] and "tolerationSeconds" in applied["message"]
    assert api.sd["status"]["readyReplicas"] == 0  # status written, not left empty
    api.refuse = False
    api.sd["metadata"]["generation"] = 2
    reconciler.bodies.offer(copy.deepcopy(api.sd))  # the watch delivers the edit
    assert reconciler.reconcile("team", "chat") == "applied"
    assert _conditions(api)["ChildrenApplied"]["status"] == "True"
