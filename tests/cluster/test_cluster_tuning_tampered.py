"""A hand-edited `status.tuning` (anyone who may write the status subresource can) is reported once, in
one Warning Event and the tuner's history, and the tuner restarts from spec N; the operator does not log
a failure every window."""

from __future__ import annotations

import json

from cluster_kit import Cluster, wait_for
from tuning_kit import events, tuned, tuning

INVALID = "TuningStateInvalid"


def test_a_tampered_tuning_state_is_reported_once_and_tuning_restarts_from_spec_n(cluster: Cluster, ns: str) -> None:
    assert cluster.apply(tuned("chat", "qwen35-122b-mtp-math500", n=3, candidates=[3, 7]), ns).returncode == 0
    wait_for("the tuner's first windows", lambda: tuning(cluster, ns, "chat").get("seq", 0) >= 1, 60)
    log_before = len(cluster.operators[0].logs())
    tampered = {"status": {"tuning": {"stableN": "seven", "phase": "winning"}}}
    cluster.kubectl("patch", "sd", "chat", "-n", ns, "--subresource=status", "--type", "merge",
                    "-p", json.dumps(tampered))
    wait_for("the tuner to restart", lambda: (tuning(cluster, ns, "chat").get("history") or [{}])[-1]
             .get("action") == "reset", 30)
    restarted = tuning(cluster, ns, "chat")
    assert restarted["stableN"] == 3 and restarted.get("canaryN") is None
    assert "status.tuning was not the tuner's" in restarted["history"][-1]["reason"]
    seq = restarted["seq"]
    wait_for("three more windows", lambda: tuning(cluster, ns, "chat").get("seq", 0) >= seq + 3, 30)
    (warning,) = events(cluster, ns, INVALID)
    assert warning["type"] == "Warning" and warning.get("count", 1) == 1, warning
    assert "stableN 'seven'" in warning["message"] or "phase 'winning'" in warning["message"], warning["message"]
    logged = cluster.operators[0].logs()[log_before:]
    assert "window failed" not in logged and " ERROR " not in logged, logged[-2000:]
