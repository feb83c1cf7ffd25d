"""The automatic drain on the real control plane: the operator reads the simulated engines' e2e latency
histogram, writes the drain it asks for to status.drain and the `<name>-drain` ConfigMap, and no pod restarts."""

from __future__ import annotations

import json
from typing import Any

from cluster_kit import Cluster, wait_for
from tuning_kit import default_n, deployment, events, profile, start_load, status, stop_load, tuned

from specpilot.api.drain import DEFAULT_DRAIN_SECONDS, MIN_AUTO_DRAIN_S, MIN_DRAIN_REQUESTS
from specpilot_runtime.drain import DRAIN_FILE

PROFILE = "qwen35-122b-mtp-math500"


def _pods(cluster: Cluster, ns: str) -> list[tuple[str, str, int]]:
    """Every serving pod: name, uid and container restarts."""
    return sorted((p["metadata"]["name"], p["metadata"]["uid"],
                   sum(c.get("restartCount", 0) for c in p.get("status", {}).get("containerStatuses") or []))
                  for p in cluster.items("pods", "-n", ns, "-l", "app.kubernetes.io/managed-by=specpilot"))


def _drain_file(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    cm = cluster.get("configmap", f"{name}-drain", "-n", ns)
    return json.loads(cm["data"][DRAIN_FILE]) if cm else None


def test_the_drain_follows_the_measured_p99_without_a_pod_restart(cluster: Cluster, ns: str) -> None:
    # Tuning on, with nothing to try (one candidate, the running N): its windows measure the drain.
    n = default_n(profile(PROFILE))
    sd = tuned("drain", PROFILE, candidates=[n])
    assert cluster.apply(sd, ns).returncode == 0
    wait_for("the stable pod to be ready", lambda: (deployment(cluster, ns, "drain") or {}).get("status", {})
             .get("readyReplicas") == 1)
    wait_for("the default drain in force",
             lambda: _drain_file(cluster, ns, "drain") == {"seconds": DEFAULT_DRAIN_SECONDS})
    assert status(cluster, ns, "drain")["drain"] == {"seconds": DEFAULT_DRAIN_SECONDS, "source": "default"}
    before = _pods(cluster, ns)
    template = (deployment(cluster, ns, "drain") or {})["spec"]["template"]
    load = start_load(cluster, ns, "drain", 90)

    def measured() -> dict[str, Any] | None:
        found = status(cluster, ns, "drain").get("drain") or {}
        return found if found.get("source") == "measured" else None
    try:
        drain = wait_for("a measured drain", measured, timeout=100)
    finally:
        stop_load(load)
    assert drain["requests"] >= MIN_DRAIN_REQUESTS and drain["p99Seconds"] > 0
    # Simulated requests take seconds: the drain drops from 120 s towards the 30 s floor.
    assert MIN_AUTO_DRAIN_S <= drain["seconds"] < 90
    wait_for("the ConfigMap following status.drain",
             lambda: _drain_file(cluster, ns, "drain") == {"seconds": drain["seconds"]})
    assert _pods(cluster, ns) == before  # the same pods, never restarted
    assert (deployment(cluster, ns, "drain") or {})["spec"]["template"] == template
    changed = events(cluster, ns, "DrainChanged")
    assert changed and f"drain {DEFAULT_DRAIN_SECONDS} s (default) -> {drain['seconds']} s (measured)" \
        in changed[0]["message"]
