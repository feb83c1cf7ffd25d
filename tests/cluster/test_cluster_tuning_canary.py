"""Canaries that must not be promoted: one that never becomes ready is rolled back within its
progressDeadline, one that serves worse is rolled back after analysis; either way the stable track is
left exactly as it was (same Deployment generation, same pods)."""

from __future__ import annotations

from typing import Any

from cluster_kit import Cluster, wait_for
from tuning_kit import decisions, deployment, events, start_load, stop_load, tuned

N_LABEL = "specpilot.io/num-speculative-tokens"


def _stable(cluster: Cluster, ns: str, name: str) -> tuple[Any, ...]:
    """What identifies the stable track's rollout: Deployment uid, generation, N, and its pods."""
    dep = deployment(cluster, ns, name)
    assert dep is not None
    pods = sorted(p["metadata"]["name"] for p in cluster.items("pods", "-n", ns, "-l", "specpilot.io/track=stable"))
    return (dep["metadata"]["uid"], dep["metadata"]["generation"],
            dep["spec"]["template"]["metadata"]["labels"][N_LABEL], pods)


def _wait_stable_ready(cluster: Cluster, ns: str, name: str) -> tuple[Any, ...]:
    wait_for("the stable pod to be ready", lambda: (deployment(cluster, ns, name) or {}).get("status", {})
             .get("readyReplicas") == 1)
    return _stable(cluster, ns, name)


def test_canary_never_ready_is_rolled_back_within_progress_deadline(cluster: Cluster, ns: str) -> None:
    # The profile has no N=8, so the canary's engine refuses to start and its pod never becomes Ready.
    sd = tuned("stuck", "qwen35-122b-mtp-math500", candidates=[3, 8], canary={"progressDeadline": "6s"})
    assert cluster.apply(sd, ns).returncode == 0
    before = _wait_stable_ready(cluster, ns, "stuck")
    load = start_load(cluster, ns, "stuck", 60)
    try:
        rollback = wait_for("a rollback", lambda: decisions(cluster, ns, "stuck", "rollback"), timeout=50)[0]
    finally:
        stop_load(load)
    start = decisions(cluster, ns, "stuck", "start_canary")[0]
    assert start["n"] == 8 and rollback["n"] == 8
    assert "progressDeadline" in rollback["reason"]
    # Decided at the first window after the deadline (2 s windows, plus a scrape).
    assert rollback["time"] - start["time"] <= 6 + 2 * 2 + 1
    wait_for("the canary Deployment to go", lambda: deployment(cluster, ns, "stuck-canary") is None)
    assert _stable(cluster, ns, "stuck") == before
    warning = events(cluster, ns, "TuningRollback")
    assert warning and warning[0]["type"] == "Warning" and "progressDeadline" in warning[0]["message"]


def test_worse_canary_is_rolled_back_and_stable_untouched(cluster: Cluster, ns: str) -> None:
    # eagle3 at N=3; N=7 serves about 5% less here, though extrapolating S_1..S_3 makes it look worth a try.
    assert cluster.apply(tuned("worse", "minimax-m3-eagle3-humaneval", candidates=[3, 7]), ns).returncode == 0
    before = _wait_stable_ready(cluster, ns, "worse")
    load = start_load(cluster, ns, "worse", 60)
    try:
        rollback = wait_for("a rollback", lambda: decisions(cluster, ns, "worse", "rollback"), timeout=50)[0]
        wait_for("the canary Deployment to go", lambda: deployment(cluster, ns, "worse-canary") is None)
        assert _stable(cluster, ns, "worse") == before
    finally:
        stop_load(load)
    start = decisions(cluster, ns, "worse", "start_canary")[0]
    assert rollback["n"] == start["n"] == 7
    assert decisions(cluster, ns, "worse", "promote") == []
    verdict = rollback["numbers"]["verdict"]
    assert verdict["decision"] == "rollback" and verdict["gain_pct"] < 0  # measured worse than stable
    assert events(cluster, ns, "TuningRollback")
