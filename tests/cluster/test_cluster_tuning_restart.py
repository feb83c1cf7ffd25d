"""The operator killed in the middle of a canary analysis and started again resumes the same round: the
same canary Deployment keeps running (no second canary), the tuner continues from the state it wrote
(window count, analysis start, records), and only the window in progress at the kill is lost."""

from __future__ import annotations

from cluster_kit import Cluster, wait_for
from tuning_kit import deployment, start_load, stop_load, tuned, tuning


def test_restart_mid_analysis_resumes_the_round(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    first = c.start_operator("first")
    wait_for("the first operator to lead", lambda: c.lease_holder() == "first")
    ns = c.namespace("restart")
    assert c.apply(tuned("chat", "qwen35-122b-mtp-math500", candidates=[3, 7]), ns).returncode == 0
    load = start_load(c, ns, "chat", 90)
    try:
        analysing = wait_for("the canary analysis", lambda: (t := tuning(c, ns, "chat")).get("phase") == "analysing"
                             and t, timeout=60)
        canary = deployment(c, ns, "chat-canary")
        assert canary is not None
        first.kill()
        at_kill = tuning(c, ns, "chat")  # the last state the first operator wrote
        c.start_operator("second")
        resumed = wait_for("the second operator's first decision",
                           lambda: (t := tuning(c, ns, "chat"))["seq"] > at_kill["seq"] and t, timeout=40)
        # Continued, not restarted: the next window of the same round and the same canary analysis.
        assert resumed["seq"] == at_kill["seq"] + 1
        for key in ("round", "canariesInRound", "tried", "analysisFromSeq"):
            assert resumed[key] == analysing[key], key
        assert [r for r in at_kill["records"] if r["track"] == "canary"] \
            == [r for r in resumed["records"] if r["track"] == "canary"][:len([r for r in at_kill["records"]
                                                                                if r["track"] == "canary"])]
        uids = set()

        def verdict() -> bool:
            dep = deployment(c, ns, "chat-canary")
            if dep is not None:
                uids.add(dep["metadata"]["uid"])
            return tuning(c, ns, "chat")["phase"] not in ("analysing", "canary_starting")

        wait_for("the canary's verdict", verdict, timeout=40)
    finally:
        stop_load(load)
    assert uids <= {canary["metadata"]["uid"]}  # never re-created
    final = tuning(c, ns, "chat")
    assert [h["action"] for h in final["history"]].count("start_canary") == 1
    assert final["canariesInRound"] == 1
