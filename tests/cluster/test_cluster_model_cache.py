"""A ReadWriteOnce model cache claim that several pods mount (replicas > 1, or tuning's canary) is warned
about with the reason and the fix: the operator reads the claim (RBAC: persistentvolumeclaims get)."""

from __future__ import annotations

import json

from cluster_kit import Cluster, example, wait_for
from tuning_kit import condition, events

PVC = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "models"},
       "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}}}}


def _reason(cluster: Cluster, ns: str, name: str) -> str | None:
    return condition(cluster, ns, name, "ModelCache").get("reason")


def test_a_read_write_once_cache_mounted_by_several_pods_is_warned(cluster: Cluster, ns: str) -> None:
    sd = example("ngram", replicas=2, tuning={"enabled": False}, engine={"modelCache": {"claimName": "models"}})
    name = sd["metadata"]["name"]
    assert cluster.apply(sd, ns).returncode == 0
    # Applied before its claim exists (the usual order with a GitOps tool): not known yet, no Event.
    wait_for("ModelCache=Unknown/ClaimNotFound", lambda: _reason(cluster, ns, name) == "ClaimNotFound")
    assert cluster.apply(PVC, ns).returncode == 0
    cluster.kubectl("patch", "sd", name, "-n", ns, "--type", "merge", "-p", json.dumps({"spec": {"replicas": 3}}))
    wait_for("ModelCache=False/ReadWriteOnce", lambda: _reason(cluster, ns, name) == "ReadWriteOnce")
    cond = condition(cluster, ns, name, "ModelCache")
    assert cond["status"] == "False" and "replicas is 3" in cond["message"] and "ReadWriteMany" in cond["message"]
    # A resync between the two edits may have warned about 2 replicas first: the one for 3 is there.
    warned = wait_for("the Warning Event", lambda: [e for e in events(cluster, ns, "ModelCacheReadWriteOnce")
                                                    if e["message"] == cond["message"]])
    assert all(e["type"] == "Warning" for e in warned)
    before = len(events(cluster, ns, "ModelCacheReadWriteOnce"))
    assert "ReadWriteOnce" in cluster.kubectl("get", "pvc", "models", "-n", ns, "-o",
                                              "jsonpath={.spec.accessModes}").stdout
    # One pod and no canary: nothing to share, the condition goes.
    cluster.kubectl("patch", "sd", name, "-n", ns, "--type", "merge", "-p", json.dumps({"spec": {"replicas": 1}}))
    wait_for("the ModelCache condition to go", lambda: _reason(cluster, ns, name) is None)
    assert len(events(cluster, ns, "ModelCacheReadWriteOnce")) == before
