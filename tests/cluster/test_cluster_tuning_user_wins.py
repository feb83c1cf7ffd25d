"""The user wins over the tuner: editing N by hand in the middle of a canary analysis drops the canary and
restarts tuning from the user's N; turning tuning off leaves spec N running with no canary."""

from __future__ import annotations

import json

from cluster_kit import Cluster, wait_for
from tuning_kit import condition, deployment, start_load, stop_load, tuned, tuning

N_LABEL = "specpilot.io/num-speculative-tokens"


def _n(cluster: Cluster, ns: str, name: str) -> str | None:
    dep = deployment(cluster, ns, name)
    return dep["spec"]["template"]["metadata"]["labels"][N_LABEL] if dep else None


def _patch(cluster: Cluster, ns: str, spec: dict) -> None:
    cluster.kubectl("patch", "sd", "chat", "-n", ns, "--type", "merge", "-p", json.dumps({"spec": spec}))


def test_hand_edit_and_tuning_off_win(cluster: Cluster, ns: str) -> None:
    assert cluster.apply(tuned("chat", "qwen35-122b-mtp-math500", candidates=[3, 7]), ns).returncode == 0
    load = start_load(cluster, ns, "chat", 90)
    try:
        wait_for("a canary under analysis", lambda: tuning(cluster, ns, "chat").get("phase") == "analysing", 45)
        _patch(cluster, ns, {"speculative": {"numSpeculativeTokens": 5}})
        wait_for("the tuner to restart from N=5", lambda: tuning(cluster, ns, "chat").get("stableN") == 5, 20)
        t = tuning(cluster, ns, "chat")
        assert t["history"][-1]["action"] == "reset" and t.get("canaryN") is None
        wait_for("the canary to go", lambda: deployment(cluster, ns, "chat-canary") is None, 20)
        wait_for("stable to run N=5", lambda: _n(cluster, ns, "chat") == "5", 20)
        wait_for("a new canary under analysis", lambda: tuning(cluster, ns, "chat").get("phase") == "analysing", 40)
        _patch(cluster, ns, {"tuning": {"enabled": False}})
        wait_for("Tuning=False/Disabled", lambda: condition(cluster, ns, "chat", "Tuning").get("reason") == "Disabled", 20)
    finally:
        stop_load(load)
    assert _n(cluster, ns, "chat") == "5" and deployment(cluster, ns, "chat-canary") is None
    # Turning tuning on again must not bring an old canary back: the tuner resumes by observing.
    wait_for("the tuner to drop its canary", lambda: tuning(cluster, ns, "chat").get("phase") == "observing", 10)
    assert tuning(cluster, ns, "chat").get("canaryN") is None
