"""The operator never takes over what it did not create, and trusts only its own pods (reproductions of
what an attacker and a careless neighbour did; each failed before the fix): another team's Service and ConfigMap with a child's name, a
name another object's canary takes, a child whose label was removed, a hand-labelled stranger pod."""

from __future__ import annotations

import json
from typing import Any

from cluster_kit import Cluster, example, wait_for


def _condition(cluster: Cluster, ns: str, name: str, ctype: str) -> dict[str, Any] | None:
    sd = cluster.get("speculativedeployment", "-n", ns, name) or {}
    return next((c for c in (sd.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def _ready(cluster: Cluster, ns: str, name: str) -> bool:
    return (_condition(cluster, ns, name, "Ready") or {}).get("status") == "True"


def _create(cluster: Cluster, ns: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(obj))


def test_another_teams_service_and_configmap_are_never_taken_over(cluster: Cluster, ns: str) -> None:
    _create(cluster, ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop"},
                          "spec": {"selector": {"app": "shop"}, "ports": [{"port": 80}]}})
    _create(cluster, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shop-engine"},
                          "data": {"theirs": "1"}})
    sd = example("ngram")
    sd["metadata"]["name"] = "shop"
    assert cluster.apply(sd, ns).returncode == 0
    conflict = wait_for("ChildConflict", lambda: _condition(cluster, ns, "shop", "ChildConflict"))
    assert conflict["status"] == "True" and conflict["reason"] == "NameTaken"
    assert "Service shop already exists" in conflict["message"] or "ConfigMap shop-engine" in conflict["message"]
    service = cluster.get("service", "-n", ns, "shop")
    config = cluster.get("configmap", "-n", ns, "shop-engine")
    assert service["spec"]["selector"] == {"app": "shop"} and not service["metadata"].get("ownerReferences")
    assert config["data"] == {"theirs": "1"} and not config["metadata"].get("ownerReferences")
    assert cluster.get("deployment", "-n", ns, "shop") is None  # nothing of ours half-made
    events = cluster.items("events", "-n", ns, "--field-selector", "involvedObject.name=shop")
    assert any(e["reason"] == "ChildConflict" and e["type"] == "Warning" for e in events)
    # Deleting the SpeculativeDeployment leaves the other team's objects alone (no owner reference).
    cluster.kubectl("delete", "sd", "-n", ns, "shop", "--wait=true")
    assert cluster.get("service", "-n", ns, "shop") is not None
    # Once their objects go, a new SpeculativeDeployment of that name is served.
    cluster.kubectl("delete", "-n", ns, "service/shop", "configmap/shop-engine")
    assert cluster.apply(sd, ns).returncode == 0
    wait_for("Ready", lambda: _ready(cluster, ns, "shop"))
    assert (_condition(cluster, ns, "shop", "ChildConflict") or {}).get("status") != "True"


def test_the_conflict_recovers_by_itself_when_the_name_is_freed(cluster: Cluster, ns: str) -> None:
    _create(cluster, ns, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                          "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                                   "template": {"metadata": {"labels": {"app": "web"}},
                                                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    sd = example("ngram")
    sd["metadata"]["name"] = "web"
    assert cluster.apply(sd, ns).returncode == 0
    wait_for("ChildConflict", lambda: (_condition(cluster, ns, "web", "ChildConflict") or {}).get("status") == "True")
    assert cluster.get("deployment", "-n", ns, "web")["spec"]["replicas"] == 2  # not taken over
    cluster.kubectl("delete", "deployment", "-n", ns, "web", "--wait=true")
    wait_for("Ready after the name was freed", lambda: _ready(cluster, ns, "web"))
    assert _condition(cluster, ns, "web", "ChildConflict")["status"] == "False"


def test_a_name_another_objects_canary_takes_is_refused(cluster: Cluster, ns: str) -> None:
    sd = example("ngram")
    sd["metadata"]["name"] = "chat-canary"
    done = cluster.apply(sd, ns)
    assert done.returncode != 0 and "must not end in -canary or -stable" in done.stderr


def test_a_child_whose_label_was_removed_and_then_deleted_comes_back(cluster: Cluster, ns: str) -> None:
    sd = example("ngram")
    name = sd["metadata"]["name"]
    assert cluster.apply(sd, ns).returncode == 0
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    cluster.kubectl("label", "deployment", "-n", ns, name, "specpilot.io/deployment-")
    cluster.kubectl("delete", "deployment", "-n", ns, name, "--wait=true")
    wait_for("the Deployment re-created", lambda: cluster.get("deployment", "-n", ns, name))
    wait_for("Ready again", lambda: _ready(cluster, ns, name))


def test_a_labelled_stranger_pod_is_not_served_nor_scraped(cluster: Cluster, ns: str) -> None:
    sd = example("ngram")
    name = sd["metadata"]["name"]
    assert cluster.apply(sd, ns).returncode == 0
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    ours = cluster.items("pods", "-n", ns)[0]
    _create(cluster, ns, {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": "stranger", "labels": {
                              # every label the spec implies; not the ReplicaSet's pod-template-hash, with
                              # which kube-controller-manager would adopt the pod and scale it away
                              k: v for k, v in ours["metadata"]["labels"].items()
                              if k not in ("specpilot.io/owner-uid", "pod-template-hash")}},
                          "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    stranger = wait_for("the stranger Ready", lambda: (lambda p: p if (p or {}).get("status", {}).get("podIP")
                                                       else None)(cluster.get("pod", "-n", ns, "stranger")))
    addresses = cluster.ready_addresses(ns, name)
    assert ours["status"]["podIP"] in addresses and stranger["status"]["podIP"] not in addresses


def test_a_pod_template_the_api_server_refuses_is_said_in_status(cluster: Cluster, ns: str) -> None:
    sd = example("ngram")
    name = sd["metadata"]["name"]
    # The CRD takes tolerations as free-form objects; kube-apiserver refuses the Deployment (422).
    sd["spec"].setdefault("engine", {})["tolerations"] = [
        {"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "soon"}]
    assert cluster.apply(sd, ns).returncode == 0
    refused = wait_for("ChildrenApplied=False", lambda: (lambda c: c if (c or {}).get("status") == "False" else None)(
        _condition(cluster, ns, name, "ChildrenApplied")))
    assert refused["reason"] == "Refused" and "Deployment" in refused["message"]
    assert "tolerationSeconds" in refused["message"] or "422" in refused["message"]
    events = cluster.items("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")
    assert any(e["reason"] == "ChildRefused" and e["type"] == "Warning" for e in events)
    # Fixed by the user: applied, and the condition says so.
    del sd["spec"]["engine"]["tolerations"]
    assert cluster.apply(sd, ns).returncode == 0
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    assert _condition(cluster, ns, name, "ChildrenApplied")["status"] == "True"
