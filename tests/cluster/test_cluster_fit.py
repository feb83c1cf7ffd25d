"""Fitting the cluster the pods land on: a sandbox of 2 nodes with 1 GPU each (`specpilot sandbox --nodes 2
--gpus-per-node 1`), PodSecurity enforced per namespace label, and the operator."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from cluster_kit import Cluster, example, start_cluster, stop_cluster, wait_for
from tuning_kit import condition, decisions, deployment, events, start_load, stop_load, tuned

PSA_LABEL = "pod-security.kubernetes.io/enforce"


@pytest.fixture(scope="module")
def fit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("fit"), "--nodes", "2", "--gpus-per-node", "1")
    try:
        c.wait_to_lead(c.start_operator("main", "--allow-unconfined"))  # AMD's recommended profile is granted here
        yield c
    finally:
        stop_cluster(c)


def labelled_namespace(c: Cluster, name: str, level: str) -> str:
    c.namespace(name)
    c.kubectl("label", "namespace", name, f"{PSA_LABEL}={level}")
    return name


def deployment_condition(c: Cluster, ns: str, name: str, ctype: str) -> dict[str, Any] | None:
    deploy = c.get("deployment", "-n", ns, name) or {}
    return next((x for x in (deploy.get("status") or {}).get("conditions") or [] if x["type"] == ctype), None)


def ready_pods(c: Cluster, ns: str) -> list[dict[str, Any]]:
    return [p for p in c.items("pods", "-n", ns) if any(
        x["type"] == "Ready" and x["status"] == "True" for x in (p.get("status") or {}).get("conditions") or [])]


def test_nodes_advertise_their_gpus(fit: Cluster) -> None:
    nodes = fit.items("nodes")
    assert [n["metadata"]["name"] for n in nodes] == ["sandbox-1", "sandbox-2"]
    assert all(n["status"]["allocatable"]["amd.com/gpu"] == "1" for n in nodes)


def test_baseline_namespace_refuses_recommended_pods_and_admits_baseline_ones(fit: Cluster) -> None:
    ns = labelled_namespace(fit, "psa-baseline", "baseline")
    # AMD's recommended profile (granted by --allow-unconfined): SYS_PTRACE and seccomp Unconfined.
    assert fit.apply(example("ngram", accelerator={"vendor": "amd", "count": 1, "securityProfile": "recommended"}),
                     ns).returncode == 0
    name = example("ngram")["metadata"]["name"]
    failure = wait_for("the ReplicaSet's FailedCreate", lambda: deployment_condition(fit, ns, name, "ReplicaFailure"))
    assert failure["reason"] == "FailedCreate"
    assert 'violates PodSecurity "baseline:latest": non-default capabilities (container "vllm" must not include ' \
           '"SYS_PTRACE"' in failure["message"]
    assert fit.items("pods", "-n", ns) == []
    # The fix the docs give: the baseline security profile.
    assert fit.apply(example("ngram", accelerator={"vendor": "amd", "count": 1, "securityProfile": "baseline"}),
                     ns).returncode == 0
    wait_for("a Ready pod under baseline", lambda: ready_pods(fit, ns))
    fit.kubectl("delete", "sd", "-n", ns, name, "--wait=true")
    wait_for("the GPUs to be free", lambda: fit.items("pods", "-n", ns) == [])


def test_restricted_namespace_admits_only_the_restricted_profile(fit: Cluster) -> None:
    ns = labelled_namespace(fit, "psa-restricted", "restricted")
    base = example("ngram", accelerator={"vendor": "amd", "count": 1, "securityProfile": "baseline"})
    name = base["metadata"]["name"]
    assert fit.apply(base, ns).returncode == 0
    failure = wait_for("the ReplicaSet's FailedCreate", lambda: deployment_condition(fit, ns, name, "ReplicaFailure"))
    assert 'violates PodSecurity "restricted:latest"' in failure["message"]
    assert "runAsNonRoot != true" in failure["message"]
    assert fit.apply(example("ngram", accelerator={"vendor": "amd", "count": 1, "securityProfile": "restricted"}),
                     ns).returncode == 0
    wait_for("a Ready pod under restricted", lambda: ready_pods(fit, ns))
    fit.kubectl("delete", "sd", "-n", ns, name, "--wait=true")
    wait_for("the GPUs to be free", lambda: fit.items("pods", "-n", ns) == [])


def test_full_cluster_surge_canary_says_why_and_is_rolled_back(fit: Cluster) -> None:
    """2 stable replicas take both GPUs: the surge canary is Unschedulable, the Tuning condition and an Event
    name the missing resource, the canary goes at progressDeadline and the stable track is untouched."""
    ns = fit.namespace("full-surge")
    sd = tuned("full", "minimax-m3-eagle3-humaneval", candidates=[3, 7],
               canary={"progressDeadline": "10s", "mode": "surge"})
    sd["spec"]["replicas"] = 2
    assert fit.apply(sd, ns).returncode == 0
    wait_for("2 stable pods Ready", lambda: len(ready_pods(fit, ns)) == 2)
    before = sorted(p["metadata"]["name"] for p in ready_pods(fit, ns))
    load = start_load(fit, ns, "full", 60)
    try:
        # The canary's own condition (a stable pod may have waited for an earlier test's GPUs at first).
        cond = wait_for("Tuning=False/InsufficientCapacity for the canary", lambda: (
            lambda c: c.get("reason") == "InsufficientCapacity" and "canary pod" in c.get("message", "") and c)(
            condition(fit, ns, "full", "Tuning")))
        assert cond["status"] == "False"
        assert "canary pod full-canary-" in cond["message"]
        assert "0/2 nodes are available: 2 Insufficient amd.com/gpu." in cond["message"]
        warning = wait_for("the InsufficientCapacity Event", lambda: events(fit, ns, "InsufficientCapacity"))[0]
        assert warning["type"] == "Warning" and "Insufficient amd.com/gpu" in warning["message"]
        rollback = wait_for("a rollback", lambda: decisions(fit, ns, "full", "rollback"), timeout=50)[0]
    finally:
        stop_load(load)
    assert "progressDeadline" in rollback["reason"]
    wait_for("the canary Deployment to go", lambda: deployment(fit, ns, "full-canary") is None)
    assert sorted(p["metadata"]["name"] for p in ready_pods(fit, ns)) == before
    fit.kubectl("delete", "sd", "-n", ns, "full", "--wait=true")
    wait_for("the GPUs to be free", lambda: fit.items("pods", "-n", ns) == [])


def test_the_default_canary_mode_replaces_a_stable_pod_on_a_full_cluster(fit: Cluster) -> None:
    """The same full cluster with the default tuning.canary.mode, auto, which is replace with two replicas: a
    stable pod makes room, the canary runs and serves, and the GPU count never exceeds the 2 the cluster has."""
    ns = fit.namespace("full-replace")
    sd = tuned("swap", "minimax-m3-eagle3-humaneval", candidates=[3, 7], canary={"progressDeadline": "30s"})
    sd["spec"]["replicas"] = 2
    assert fit.apply(sd, ns).returncode == 0
    wait_for("2 stable pods Ready", lambda: len(ready_pods(fit, ns)) == 2)
    load = start_load(fit, ns, "swap", 60)
    try:
        wait_for("a Ready canary pod", lambda: [p for p in ready_pods(fit, ns)
                                                if p["metadata"]["labels"]["specpilot.io/track"] == "canary"],
                 timeout=50)
    finally:
        stop_load(load)
    started = wait_for("the TuningStartCanary Event", lambda: events(fit, ns, "TuningStartCanary"))[0]
    assert "1 pod in place of 1 of the 2 stable (canary.mode auto)" in started["message"]
    stable = deployment(fit, ns, "swap")
    assert stable["spec"]["replicas"] == 1
    assert stable["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert len([p for p in fit.items("pods", "-n", ns) if p["spec"].get("nodeName")]) <= 2
    fit.kubectl("delete", "sd", "-n", ns, "swap", "--wait=true")


def test_resource_name_is_what_the_pods_request(fit: Cluster) -> None:
    """accelerator.resourceName replaces amd.com/gpu; no sandbox node advertises amd.com/gpu-cpx, so the
    scheduler says so."""
    ns = fit.namespace("partitioned")
    sd = example("ngram", accelerator={"vendor": "amd", "count": 1, "resourceName": "amd.com/gpu-cpx"})
    assert fit.apply(sd, ns).returncode == 0
    pod = wait_for("a Pending pod", lambda: fit.items("pods", "-n", ns))[0]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu-cpx": "1"}  # a quantity
    scheduled = wait_for("the scheduler's verdict", lambda: next(
        (c for c in (fit.items("pods", "-n", ns)[0].get("status") or {}).get("conditions") or []
         if c["type"] == "PodScheduled" and c["status"] == "False"), None))
    assert scheduled["reason"] == "Unschedulable"
    # kube-scheduler's own words (it goes on about preemption, which cannot help here)
    assert scheduled["message"].startswith("0/2 nodes are available: 2 Insufficient amd.com/gpu-cpx.")
    fit.kubectl("delete", "sd", "-n", ns, sd["metadata"]["name"], "--wait=true")
