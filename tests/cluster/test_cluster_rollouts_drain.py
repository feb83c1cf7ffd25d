"""No request is dropped when pods are replaced: under `specpilot load` through the Service, a promotion
(stable rolls to the canary's N, the canary goes), a rollback (the canary goes) and a hand edit of N (stable
rolls) each complete with 0 failed requests. The sandbox terminates pods as Kubernetes does (endpoints drop
the pod, preStop, SIGTERM, grace period) and the simulated engine drains as vLLM's --shutdown-timeout does."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cluster_kit import REPO, Cluster, wait_for
from tuning_kit import decisions, deployment, stop_load, tuned, tuning

LOAD_S = 75.0
N_LABEL = "specpilot.io/num-speculative-tokens"


def _load(cluster: Cluster, ns: str, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    out = cluster.workdir / f"drain-{ns}-{name}.json"
    log = (cluster.workdir / f"drain-{ns}-{name}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "specpilot.cli", "load", "--deployment", name, "--namespace", ns,
         "--kubeconfig", str(cluster.kubeconfig), "--concurrency", "6", "--duration", str(LOAD_S),
         "--timeout", "30", "--max-tokens", "128", "--json", str(out)],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    return proc, out


def _pods(cluster: Cluster, ns: str, name: str) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.items("pods", "-n", ns, "-l", f"specpilot.io/deployment={name}")}


def _stable_n(cluster: Cluster, ns: str, name: str) -> str | None:
    dep = deployment(cluster, ns, name)
    return dep["spec"]["template"]["metadata"]["labels"][N_LABEL] if dep else None


def _replaced(before: set[str], now: set[str]) -> bool:
    """Every pod serving before the change is gone (terminated, not just terminating)."""
    return bool(now) and not before & now


def test_promotion_rollback_and_hand_edit_drop_no_request(cluster: Cluster, ns: str) -> None:
    objects: list[dict[str, Any]] = [
        tuned("promote", "qwen35-122b-mtp-math500", candidates=[3, 7]),        # N=7 wins: promoted
        tuned("rollback", "minimax-m3-eagle3-humaneval", candidates=[3, 7]),   # N=7 serves worse: rolled back
        tuned("edit", "qwen35-122b-mtp-math500", enabled=False),               # N edited by hand
    ]
    for obj in objects:
        assert cluster.apply(obj, ns).returncode == 0
    for name in ("promote", "rollback", "edit"):
        wait_for(f"{name} to be ready", lambda n=name: (deployment(cluster, ns, n) or {}).get("status", {})
                 .get("readyReplicas") == 1)
    loads = {name: _load(cluster, ns, name) for name in ("promote", "rollback", "edit")}
    started = time.monotonic()
    try:
        time.sleep(5)
        edit_before = _pods(cluster, ns, "edit")
        cluster.kubectl("patch", "sd", "edit", "-n", ns, "--type", "merge",
                        "-p", json.dumps({"spec": {"speculative": {"numSpeculativeTokens": 5}}}))
        wait_for("the hand edit to roll", lambda: _stable_n(cluster, ns, "edit") == "5"
                 and _replaced(edit_before, _pods(cluster, ns, "edit")), 40)
        wait_for("a promotion", lambda: decisions(cluster, ns, "promote", "promote"), 50)
        wait_for("the promoted stable to roll and the canary to go",
                 lambda: _stable_n(cluster, ns, "promote") == "7" and deployment(cluster, ns, "promote-canary") is None
                 and not any("canary" in p for p in _pods(cluster, ns, "promote")), 40)
        wait_for("a rollback", lambda: decisions(cluster, ns, "rollback", "rollback"), 50)
        wait_for("the rolled-back canary's pod to go",
                 lambda: not any("canary" in p for p in _pods(cluster, ns, "rollback")), 40)
        assert time.monotonic() - started < LOAD_S - 5, "the changes must complete while load still runs"
        for proc, _ in loads.values():
            proc.wait(LOAD_S + 30)
    finally:
        for proc, _ in loads.values():
            stop_load(proc)
    failed = {}
    for name, (_, out) in loads.items():
        summary = json.loads(out.read_text())
        total = summary["total"]
        print(f"{name}: {total['requests']} requests, {total['errors']} failed {summary['errors']}")
        failed[name] = total["errors"]
        assert total["requests"] > 50
    assert tuning(cluster, ns, "promote")["stableN"] == 7
    assert failed == {"promote": 0, "rollback": 0, "edit": 0}
