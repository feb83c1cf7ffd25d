"""Fitting the cluster the pods land on: a sandbox of 2 nodes with 1 GPU each (`specpilot sandbox --nodes 2
--gpus-per-node 1`), PodSecurity enforced per namespace label, and the operator."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from cluster_kit import Cluster, example, start_cluster, stop_cluster, wait_for

PSA_LABEL = "pod-security.kubernetes.io/enforce"


@pytest.fixture(scope="module")
def fit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("fit"), "--nodes", "2", "--gpus-per-node", "1")
    try:
        c.start_operator("main")
        wait_for("the operator to take the lease", lambda: c.lease_holder() == "main")
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
    # AMD's recommended profile (the default): SYS_PTRACE and seccomp Unconfined.
    assert fit.apply(example("ngram", accelerator={"vendor": "amd", "count": 1}), ns).returncode == 0
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
