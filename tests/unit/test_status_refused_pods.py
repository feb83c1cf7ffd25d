"""Pods the API server refuses to create (Pod Security admission, a quota, a webhook): kube-controller-manager
says so only in the Deployment's ReplicaFailure condition, and status says it at once instead of waiting for a
progress deadline."""

from __future__ import annotations

from typing import Any

from specpilot.controller import status as st
from specpilot.controller.child_cache import ChildCache

WHY = 'pods "sd-7d9" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false'


def _deployment(ready: int, failure: str | None, rv: int = 1) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]
    if failure is not None:
        conditions.append({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": failure})
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "sd", "namespace": "team", "generation": 1, "resourceVersion": str(rv),
                         "ownerReferences": [{"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                                              "name": "sd", "uid": "u", "controller": True}],
                         "labels": {"specpilot.io/track": "stable"}},
            "spec": {"replicas": 1, "template": {"metadata": {"labels": {"specpilot.io/num-speculative-tokens": "3"}}}},
            "status": {"observedGeneration": 1, "replicas": 0, "updatedReplicas": 0, "readyReplicas": ready,
                       "conditions": conditions}}


def test_refused_stable_pods_make_the_object_degraded_with_the_api_servers_words() -> None:
    rollout = st.rollout_of(_deployment(0, WHY), None, "specpilot.io/num-speculative-tokens")
    new = st.running_status({}, 1, "mtp", rollout, tuning_enabled=False)
    degraded = st.condition(new, st.DEGRADED) or {}
    assert degraded["status"] == "True" and degraded["reason"] == "PodsRefused" and WHY in degraded["message"]
    assert new["phase"] == st.PHASE_DEGRADED


def test_a_refusal_is_cut_to_a_bounded_message_and_without_one_nothing_is_said() -> None:
    assert st.refusal(_deployment(0, "x" * 100_000)) is not None
    assert len(st.refusal(_deployment(0, "x" * 100_000)) or "") <= st.MAX_REFUSAL
    assert st.refusal(_deployment(0, None)) is None and st.refusal(None) is None
    assert st.refusal({"status": {"conditions": "not a list"}}) is None
    healthy = st.running_status({}, 1, "mtp", st.rollout_of(_deployment(1, None), None, "x"), tuning_enabled=False)
    assert (st.condition(healthy, st.DEGRADED) or {}).get("reason") != "PodsRefused"


def test_a_refusal_appearing_on_a_child_wakes_its_parent() -> None:
    cache = ChildCache()
    cache.observe(None, _deployment(0, None, rv=1))
    assert cache.observe("MODIFIED", _deployment(0, WHY, rv=2)) == [("team", "sd")]
