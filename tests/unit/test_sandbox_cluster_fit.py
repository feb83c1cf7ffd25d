"""The sandbox fits pods to the cluster as a real one does: per-node allocatable GPUs (kube-scheduler's
Unschedulable message), PodSecurity admission per namespace label, and rolling updates by maxSurge and
maxUnavailable. End to end with the operator: tests/cluster/test_cluster_fit.py."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.author_policy import AuthorPolicy
from specpilot.api.validate import Policy, load
from specpilot.controller.traffic import canary_weight
from specpilot.render import render, render_track
from specpilot.render.replicas import placement
from specpilot_harness.sandbox.errors import ApiError
from specpilot_harness.sandbox.pod_security import admit_pod
from specpilot_harness.sandbox.rollout import rolling_sizes
from specpilot_harness.sandbox.scheduling import gpu_nodes, place, usage


def pod(gpus: int, resource: str = "amd.com/gpu", node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "vllm", "resources": {"limits": {resource: gpus, "memory": "1Gi"}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": "Running"}}


def test_pods_fill_nodes_then_wait_with_the_schedulers_message() -> None:
    nodes = gpu_nodes(2, 4)
    used = usage([pod(4, node="sandbox-1"), pod(2, node="sandbox-2")])
    assert place(pod(2), nodes, used) == ("sandbox-2", "")
    assert place(pod(1), nodes, used) == (None, "0/2 nodes are available: 2 Insufficient amd.com/gpu.")


def test_a_resource_no_node_advertises_is_insufficient_everywhere() -> None:
    assert place(pod(1, "amd.com/gpu-cpx"), gpu_nodes(3, 8), {}) == (
        None, "0/3 nodes are available: 3 Insufficient amd.com/gpu-cpx.")
    assert place(pod(1, "amd.com/gpu-cpx"), gpu_nodes(1, 8, ("amd.com/gpu-cpx",)), {})[0] == "sandbox-1"


def serving_pod(profile: str, **spec: Any) -> dict[str, Any]:
    sd = load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
               "metadata": {"name": "qwen", "namespace": "llm"},
               "spec": {"model": "Qwen/Qwen3-8B", "accelerator": {"securityProfile": profile},
                        "speculative": {"method": "ngram", "numSpeculativeTokens": 3}, **spec}},
              Policy(author=AuthorPolicy(allow_unconfined=True)))  # recommended is granted on AMD
    deployment = next(o for o in render_track(sd) if o["kind"] == "Deployment")
    return {"metadata": {"name": "qwen-abc"}, "spec": deployment["spec"]["template"]["spec"]}


def namespace(level: str) -> dict[str, Any]:
    return {"metadata": {"name": "llm", "labels": {"pod-security.kubernetes.io/enforce": level}}}


def test_baseline_refuses_amds_recommended_pod_as_the_api_server_does() -> None:
    with pytest.raises(ApiError) as err:
        admit_pod(namespace("baseline"), serving_pod("recommended"))
    assert err.value.code == 403
    assert err.value.message == (
        'pods "qwen-abc" is forbidden: violates PodSecurity "baseline:latest": non-default capabilities '
        '(container "vllm" must not include "SYS_PTRACE" in securityContext.capabilities.add), seccompProfile '
        '(pod must not set securityContext.seccompProfile.type to "Unconfined")')


@pytest.mark.parametrize(("level", "profile"), [("baseline", "baseline"), ("restricted", "restricted"),
                                                ("privileged", "recommended"), ("baseline", "restricted")])
def test_each_profile_is_admitted_at_its_level(level: str, profile: str) -> None:
    admit_pod(namespace(level), serving_pod(profile, engine={"modelCache": {"claimName": "hf"}}))


def test_restricted_names_every_missing_control() -> None:
    with pytest.raises(ApiError) as err:
        admit_pod(namespace("restricted"), serving_pod("baseline"))
    for control in ("allowPrivilegeEscalation != false", 'capabilities.drop=["ALL"]', "runAsNonRoot != true",
                    '"RuntimeDefault" or "Localhost"'):
        assert control in err.value.message


def test_no_label_admits_everything() -> None:
    admit_pod({"metadata": {"name": "llm"}}, serving_pod("recommended"))


SURGE = {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
NO_SURGE = {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def test_no_surge_takes_an_old_pod_out_before_starting_a_new_one() -> None:
    assert rolling_sizes(2, NO_SURGE, (0, 0), [(2, 2)]) == (0, [1])
    assert rolling_sizes(2, NO_SURGE, (0, 0), [(1, 1)]) == (1, [1])
    assert rolling_sizes(2, NO_SURGE, (1, 1), [(1, 1)]) == (1, [0])
    assert rolling_sizes(2, NO_SURGE, (1, 1), [(0, 0)]) == (2, [0])


def test_surge_starts_a_new_pod_first_and_keeps_every_old_one_until_it_is_ready() -> None:
    assert rolling_sizes(1, SURGE, (0, 0), [(1, 1)]) == (1, [1])
    assert rolling_sizes(1, SURGE, (1, 0), [(1, 1)]) == (1, [1])
    assert rolling_sizes(1, SURGE, (1, 1), [(1, 1)]) == (1, [0])
    assert rolling_sizes(4, {}, (0, 0), [(4, 4)]) == (1, [3])  # Kubernetes' default 25% / 25%


def tuned_sd(mode: str, replicas: int = 3) -> Any:
    return load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "qwen", "namespace": "llm"},
                 "spec": {"model": "Qwen/Qwen3-8B", "replicas": replicas,
                          "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                          "tuning": {"enabled": True, "canary": {"mode": mode}}}})


def deployments(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["labels"]["specpilot.io/track"]: o["spec"] for o in objects if o["kind"] == "Deployment"}


def test_replace_mode_gives_the_canary_a_stable_replica_and_rolls_without_surge() -> None:
    running = deployments(render(tuned_sd("replace"), canary_n=5))
    assert (running["stable"]["replicas"], running["canary"]["replicas"]) == (2, 1)  # 3 GPUs, as without a canary
    assert running["stable"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert deployments(render(tuned_sd("replace")))["stable"]["replicas"] == 3
    assert canary_weight(tuned_sd("replace"), True) == 33  # traffic follows the replicas: 1 of 3 pods


def test_surge_mode_adds_the_canary_on_top() -> None:
    running = deployments(render(tuned_sd("surge"), canary_n=5))
    assert (running["stable"]["replicas"], running["canary"]["replicas"]) == (3, 1)
    assert running["stable"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert canary_weight(tuned_sd("surge"), True) == 25


def test_the_default_mode_replaces_where_a_stable_pod_keeps_serving_and_surges_where_none_would() -> None:
    # auto: three replicas give one up to the canary, as replace does; one replica cannot, and surges.
    running = deployments(render(tuned_sd("auto"), canary_n=5))
    assert (running["stable"]["replicas"], running["canary"]["replicas"]) == (2, 1)
    assert running["stable"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    alone = deployments(render(tuned_sd("auto", replicas=1), canary_n=5))
    assert (alone["stable"]["replicas"], alone["canary"]["replicas"]) == (1, 1)
    assert alone["stable"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "q", "namespace": "llm"},
                 "spec": {"model": "m", "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                          "tuning": {"enabled": True}}}).spec.tuning.canary.mode == "auto"
    # Its Event says which it became.
    assert placement(tuned_sd("auto")) == "1 pod in place of 1 of the 3 stable (canary.mode auto)"
    assert placement(tuned_sd("auto", replicas=1)) == "1 pod beside the 1 stable (canary.mode auto)"
