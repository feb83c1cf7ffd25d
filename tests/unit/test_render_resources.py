"""Serving pods request CPU and memory per accelerator profile (Burstable), and are Guaranteed when the user
limits both; the user's own requests win."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.validate import load
from specpilot.render import render_track
from specpilot.render.resources import as_guaranteed, container_resources, default_requests


def _pod(vendor: str = "amd", count: int = 1, resources: dict[str, Any] | None = None,
         runtime_from: str = "operatorImage") -> dict[str, Any]:
    sd = load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "q"},
               "spec": {"model": "m", "accelerator": {"vendor": vendor, "count": count}, "runtimeFrom": runtime_from,
                        "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                        "engine": {"resources": resources or {}}}})
    deployment = next(o for o in render_track(sd) if o["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def qos_class(pod: dict[str, Any]) -> str:
    """Kubernetes' QoS class of a pod (pkg/apis/core/v1/helper/qos), for CPU and memory."""
    containers = pod["containers"] + pod.get("initContainers", [])
    requests = [c.get("resources", {}).get("requests", {}) for c in containers]
    limits = [c.get("resources", {}).get("limits", {}) for c in containers]
    if not any(name in r for r in requests + limits for name in ("cpu", "memory")):
        return "BestEffort"
    if all(name in lim and r.get(name, lim[name]) == lim[name]
           for r, lim in zip(requests, limits) for name in ("cpu", "memory")):
        return "Guaranteed"
    return "Burstable"


@pytest.mark.parametrize("vendor,count,cpu,memory", [("amd", 1, "3", "40Gi"), ("amd", 8, "10", "264Gi"),
                                                      ("nvidia", 1, "3", "24Gi"), ("nvidia", 4, "6", "72Gi")])
def test_default_requests_follow_the_profile(vendor: str, count: int, cpu: str, memory: str) -> None:
    pod = _pod(vendor, count)
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": cpu, "memory": memory}
    assert qos_class(pod) == "Burstable"


def test_cpu_is_vllms_floor_of_two_plus_a_core_per_gpu() -> None:
    for gpus in (1, 2, 8):
        assert default_requests("nvidia", gpus)["cpu"] == str(2 + gpus)


def test_limits_on_both_make_the_pod_guaranteed_init_container_included() -> None:
    pod = _pod(resources={"limits": {"cpu": "12", "memory": "96Gi"}})
    res = pod["containers"][0]["resources"]
    assert res["requests"] == {"cpu": "12", "memory": "96Gi"}
    assert res["limits"] == {"cpu": "12", "memory": "96Gi", "amd.com/gpu": "1"}
    assert qos_class(pod) == "Guaranteed"
    installer = pod["initContainers"][0]["resources"]
    assert installer["requests"] == installer["limits"]


def test_guaranteed_without_an_init_container_too() -> None:
    pod = _pod(resources={"limits": {"cpu": "4", "memory": "32Gi"}}, runtime_from="servingImage")
    assert "initContainers" not in pod and qos_class(pod) == "Guaranteed"


def test_one_limit_requests_it_and_keeps_the_default_for_the_other() -> None:
    pod = _pod("nvidia", 2, resources={"limits": {"memory": "64Gi"}})
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "4", "memory": "64Gi"}
    assert qos_class(pod) == "Burstable"
    assert pod["initContainers"][0]["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"}


def test_user_requests_win_over_defaults_and_limits() -> None:
    pod = _pod(resources={"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "8Gi"}})
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "8Gi"}
    assert qos_class(pod) == "Burstable"


def test_render_does_not_mutate_the_users_resources() -> None:
    user = {"limits": {"memory": "8Gi"}}
    container_resources(user, "amd", 1, "amd.com/gpu")
    assert user == {"limits": {"memory": "8Gi"}}


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="spec.accelerator.vendor.*allowed: amd, nvidia"):
        default_requests("tpu", 1)
    with pytest.raises(ValueError, match="spec.accelerator.count"):
        default_requests("amd", 0)
    with pytest.raises(ValueError, match="resources.cpu"):
        as_guaranteed({"requests": {"memory": "1Gi"}})
