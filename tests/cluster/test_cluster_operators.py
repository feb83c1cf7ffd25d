"""Operator replicas and restarts: exactly one replica acts, and a restarted operator picks up where
the last one stopped without duplicating anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cluster_kit import UNREADY_FLAG_ENV, Cluster, example, start_cluster, stop_cluster, wait_for


def _ready_at(cluster: Cluster, ns: str, name: str, n: int) -> dict[str, Any] | None:
    sd = cluster.get("sd", "-n", ns, name)
    status = (sd or {}).get("status") or {}
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
    ok = ready and status.get("numSpeculativeTokens") == n and status.get("observedGeneration") == sd["metadata"]["generation"]
    return sd if ok else None


def _actors(cluster: Cluster, ns: str) -> set[str]:
    """Which operator replicas posted Events in the namespace (the scheduler and controllers post some too)."""
    return {e.get("reportingInstance") for e in cluster.items("events", "-n", ns)
            if e.get("reportingComponent") == "specpilot"}


def test_two_replicas_exactly_one_acts_and_the_standby_takes_over(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    first = c.start_operator("replica-a")
    c.wait_to_lead(first)
    second = c.start_operator("replica-b")
    wait_for("replica-b to stand by", lambda: "standing by" in second.logs())
    assert "specpilot_operator_leader 0.0" in second.metrics()

    ns = c.namespace("one")
    obj = example("eagle3")
    name = obj["metadata"]["name"]
    c.apply(obj, ns)
    n = obj["spec"]["speculative"]["numSpeculativeTokens"]
    wait_for("Ready", lambda: _ready_at(c, ns, name, n))
    assert _actors(c, ns) == {first.identity}
    assert "reconciled" not in second.logs()

    first.kill()  # no lease release: the standby must wait for it to expire
    c.wait_to_lead(second)
    ns2 = c.namespace("two")
    c.apply(obj, ns2)
    wait_for("Ready under the new leader", lambda: _ready_at(c, ns2, name, n))
    assert _actors(c, ns2) == {second.identity}
    assert len(c.items("deploy", "-n", ns)) == 1


def test_restarted_operator_creates_no_duplicates_and_keeps_status(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    op = c.start_operator("before")
    ns = c.namespace("restart")
    objs = [example(e) for e in ("eagle3", "mtp", "ngram")]
    for obj in objs:
        c.apply(obj, ns)
    for obj in objs:
        wait_for("Ready", lambda: _ready_at(c, ns, obj["metadata"]["name"],
                                            obj["spec"]["speculative"]["numSpeculativeTokens"]))
    children = {(x["kind"], x["metadata"]["name"]): x["metadata"]["uid"] for x in c.items("deploy,cm,svc", "-n", ns)}
    statuses = {sd["metadata"]["name"]: sd["status"] for sd in c.items("sd", "-n", ns)}
    op.kill()

    again = c.start_operator("after", lease_duration=4)
    c.wait_to_lead(again)
    # A change made while no operator ran is picked up on resume.
    changed = objs[0]["metadata"]["name"]
    new_n = objs[0]["spec"]["speculative"]["numSpeculativeTokens"] + 1
    c.kubectl("patch", "sd", "-n", ns, changed, "--type", "merge",
              "-p", f'{{"spec":{{"speculative":{{"numSpeculativeTokens":{new_n}}}}}}}')
    wait_for("the change applied", lambda: _ready_at(c, ns, changed, new_n))
    # The new operator resumed every object: each one reconciled and found its children as they should be.
    others = [o["metadata"]["name"] for o in objs[1:]]
    wait_for("the others resumed unchanged", lambda: all(
        f'reconciles_total{{deployment="{n}",namespace="{ns}",result="unchanged"}}' in again.metrics()
        for n in others))

    after = {(x["kind"], x["metadata"]["name"]): x["metadata"]["uid"] for x in c.items("deploy,cm,svc", "-n", ns)}
    assert after == children  # same objects: nothing deleted, nothing duplicated
    # What the reconciler owns is intact (the tuning loop's own fields may move on as its rounds do).
    tuning_owned = {"conditions", "tuning", "acceptedLength", "canaryNumSpeculativeTokens"}

    def reconciler_view(status: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
        return ({k: v for k, v in status.items() if k not in tuning_owned},
                [(x["type"], x["status"], x["lastTransitionTime"]) for x in status["conditions"] if x["type"] != "Tuning"])

    for sd in c.items("sd", "-n", ns):
        name = sd["metadata"]["name"]
        if name != changed:
            assert reconciler_view(sd["status"]) == reconciler_view(statuses[name])


def test_operator_watching_one_namespace_ignores_others(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    watched, other = c.namespace("watched"), c.namespace("other")
    c.wait_to_lead(c.start_operator("scoped", "--namespace", watched))
    obj = example("ngram")
    name = obj["metadata"]["name"]
    c.apply(obj, other)
    c.apply(obj, watched)
    wait_for("Ready in the watched namespace",
             lambda: _ready_at(c, watched, name, obj["spec"]["speculative"]["numSpeculativeTokens"]))
    assert c.items("deploy", "-n", other) == []
    assert "status" not in c.get("sd", "-n", other, name)


def test_pods_losing_readiness_degrade_and_recover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag = tmp_path / "unready"
    monkeypatch.setenv(UNREADY_FLAG_ENV, str(flag))
    c = start_cluster(tmp_path / "cluster", "--pod-runtime", "cluster_kit:FlagReady")
    try:
        c.start_operator("solo")
        ns = c.namespace("health")
        obj = example("mtp")
        name, n = obj["metadata"]["name"], obj["spec"]["speculative"]["numSpeculativeTokens"]
        c.apply(obj, ns)
        wait_for("Ready", lambda: _ready_at(c, ns, name, n))

        flag.touch()  # every pod fails its readiness probe
        sd = wait_for("Degraded", lambda: (s := c.get("sd", "-n", ns, name))["status"]["phase"] == "Degraded" and s)
        conds = {x["type"]: x for x in sd["status"]["conditions"]}
        assert conds["Degraded"]["status"] == "True" and conds["Degraded"]["reason"] == "ReplicasUnavailable"
        assert conds["Ready"]["status"] == "False" and sd["status"]["readyReplicas"] == 0

        flag.unlink()
        sd = wait_for("recovered", lambda: (s := _ready_at(c, ns, name, n)) and s["status"]["phase"] == "Running" and s)
        assert {x["type"]: x["status"] for x in sd["status"]["conditions"]}["Degraded"] == "False"
    finally:
        stop_cluster(c)
