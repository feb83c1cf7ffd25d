"""Switchback on the real control plane: the tuner measures a draft length inside the serving pods through
the `<name>-live` ConfigMap, promotes it, and no pod restarts, no canary Deployment is ever made."""

from __future__ import annotations

import json
from typing import Any

from cluster_kit import Cluster, wait_for
from tuning_kit import decisions, deployment, events, start_load, status, stop_load, tuned, tuning


def _pods(cluster: Cluster, ns: str) -> list[tuple[str, str, int]]:
    """Every serving pod: name, uid and container restarts."""
    return sorted((p["metadata"]["name"], p["metadata"]["uid"],
                   sum(c.get("restartCount", 0) for c in p.get("status", {}).get("containerStatuses") or []))
                  for p in cluster.items("pods", "-n", ns, "-l", "app.kubernetes.io/managed-by=specpilot"))


def _arms(cluster: Cluster, ns: str, name: str) -> list[Any]:
    cm = cluster.get("configmap", f"{name}-live", "-n", ns) or {}
    return json.loads((cm.get("data") or {}).get("live.json") or "{}").get("arms") or []


def test_switchback_promotes_a_better_n_with_no_restart_and_no_canary_pod(cluster: Cluster, ns: str) -> None:
    # MTP on the 122B profile: N=7 serves far more than the default 3; candidates 3 and 7, started at 7.
    sd = tuned("live", "qwen35-122b-mtp-math500", candidates=[3, 7], measure="switchback")
    assert cluster.apply(sd, ns).returncode == 0
    wait_for("the stable pod to be ready", lambda: (deployment(cluster, ns, "live") or {}).get("status", {})
             .get("readyReplicas") == 1)
    wait_for("live.json serving N=3", lambda: _arms(cluster, ns, "live") == [[[1, 65536, 3]]])
    before = _pods(cluster, ns)
    template = (deployment(cluster, ns, "live") or {})["spec"]["template"]
    seen_arms: list[Any] = []
    load = start_load(cluster, ns, "live", 120)
    try:
        def promoted() -> list[dict[str, Any]]:
            arms = _arms(cluster, ns, "live")
            if len(arms) > len(seen_arms):
                seen_arms[:] = arms
            assert deployment(cluster, ns, "live-canary") is None  # a live arm is no Deployment
            return decisions(cluster, ns, "live", "promote")
        promote = wait_for("a promotion", promoted, timeout=100)[0]
    finally:
        stop_load(load)
    assert promote["n"] == 7 and decisions(cluster, ns, "live", "start_canary")[0]["n"] == 7
    assert seen_arms == [[[1, 65536, 3]], [[1, 65536, 7]]]  # the stable's arm and the canary's, alternated
    wait_for("live.json serving N=7", lambda: _arms(cluster, ns, "live") == [[[1, 65536, 7]]])
    assert _pods(cluster, ns) == before  # the same pods, never restarted
    assert (deployment(cluster, ns, "live") or {})["spec"]["template"] == template
    s = status(cluster, ns, "live")
    assert (s["numSpeculativeTokens"], s["startedNumSpeculativeTokens"], s["liveArms"]) == (7, 7, "1-65536:7")
    wide = cluster.kubectl("get", "sd", "-n", ns, "live", "-o", "wide").stdout.splitlines()
    row = dict(zip(["NAME", "METHOD", "N", "READY", "PHASE"], wide[1].split()))
    assert "ARMS" in wide[0] and "1-65536:7" in wide[1] and row["N"] == "7", wide
    verdict = promote["numbers"]["verdict"]
    assert verdict["decision"] == "promote" and verdict["gain_pct"] > 0
    started = events(cluster, ns, "TuningStartCanary")
    assert started and "measured live" in started[0]["message"] and "no pod restarted" in started[0]["message"]


def _engine_json(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    cm = cluster.get("configmap", name, "-n", ns) or {}
    return json.loads((cm.get("data") or {}).get("engine.json") or "{}")


def test_the_table_check_falls_back_to_static_pods_where_the_table_costs_more_than_switching_gains(
        cluster: Cluster, ns: str) -> None:
    # Its one candidate is the N it starts at, so the round converges at once and the table check follows:
    # static pods at N=7 against the switching pods, whose table makes every step 30% slower (the simulated
    # engine's specpilot.io/sim-table-cost; on GPUs, vLLM's piecewise CUDA graphs).
    sd = tuned("costly", "qwen35-122b-mtp-math500", n=7, candidates=[7], measure="switchback")
    sd["metadata"]["annotations"]["specpilot.io/sim-table-cost"] = "0.3"
    assert cluster.apply(sd, ns).returncode == 0
    wait_for("the stable pod to be ready", lambda: (deployment(cluster, ns, "costly") or {}).get("status", {})
             .get("readyReplicas") == 1)
    assert _engine_json(cluster, ns, "costly-engine")["live_file"]
    load = start_load(cluster, ns, "costly", 150)
    try:
        started = wait_for("the table check", lambda: decisions(cluster, ns, "costly", "start_canary"), timeout=60)[0]
        assert started["static"] is True and started["n"] == 7 and "table check" in started["reason"]
        canary = wait_for("its static pods", lambda: _engine_json(cluster, ns, "costly-canary-engine"), timeout=30)
        assert canary["speculative"].get("num_speculative_tokens_per_batch_size") is None
        assert not canary.get("live_file")
        try:
            wait_for("its pod Ready", lambda: (deployment(cluster, ns, "costly-canary") or {}).get("status", {})
                     .get("readyReplicas") == 1, timeout=30)
        except AssertionError as exc:
            pods = [(p["metadata"]["name"], p.get("status")) for p in cluster.items("pods", "-n", ns)]
            raise AssertionError(f"{exc}; pods: {json.dumps(pods)[:4000]}") from None
        try:
            promote = wait_for("the fall-back", lambda: decisions(cluster, ns, "costly", "promote"), timeout=120)[0]
        except AssertionError as exc:
            said = [(h["action"], h["n"], h.get("reason", "")[:160]) for h in tuning(cluster, ns, "costly")["history"]]
            raise AssertionError(f"{exc}; the tuner's decisions: {said}") from None
    finally:
        stop_load(load)
    assert promote["static"] is True and promote["n"] == 7 and "falling back to static N=7" in promote["reason"]
    assert promote["numbers"]["verdict"]["gain_pct"] > 10
    wait_for("the stable pods static", lambda: not _engine_json(cluster, ns, "costly-engine").get("live_file"),
             timeout=60)
    stable = _engine_json(cluster, ns, "costly-engine")
    assert stable["speculative"].get("num_speculative_tokens_per_batch_size") is None
    assert stable["speculative"]["num_speculative_tokens"] == 7
    assert status(cluster, ns, "costly")["tuning"]["stableStatic"] is True
    said = [e["message"] for e in cluster.items("events", "-n", ns) if "falling back" in e.get("message", "")]
    assert said, "no Event says the deployment fell back to static pods"
