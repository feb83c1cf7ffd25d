"""The operator killed in the middle of a canary analysis and started again resumes the same round: the
same canary Deployment keeps running (no second canary), the tuner continues from the state it wrote
(window count, analysis start, records), and only the window in progress at the kill is lost."""

from __future__ import annotations

from cluster_kit import Cluster, settled, wait_for
from tuning_kit import DRAFT_MODELS, deployment, start_load, status, stop_load, tuned, tuning


def test_restart_mid_analysis_resumes_the_round(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    first = c.start_operator("first")
    c.wait_to_lead(first)
    ns = c.namespace("restart")
    assert c.apply(tuned("chat", "qwen35-122b-mtp-math500", candidates=[3, 7]), ns).returncode == 0
    load = start_load(c, ns, "chat", 90)
    try:
        analysing = wait_for("the canary analysis", lambda: (t := tuning(c, ns, "chat")).get("phase") == "analysing"
                             and t, timeout=60)
        canary = deployment(c, ns, "chat-canary")
        assert canary is not None
        first.kill()
        at_kill = settled(lambda: tuning(c, ns, "chat"))  # the last state the first operator wrote
        c.start_operator("second")
        resumed = wait_for("the second operator's first decision",
                           lambda: (t := tuning(c, ns, "chat"))["seq"] > at_kill["seq"] and t, timeout=40, fast=True)
        # Continued, not restarted: the next window of the same round and the same canary analysis.
        assert resumed["seq"] == at_kill["seq"] + 1, (at_kill["seq"], resumed["seq"], resumed["history"][-3:])
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


def test_restart_mid_method_canary_resumes_the_tournament(fresh_cluster: Cluster) -> None:
    """Killed while a method canary (DFlash beside the stable MTP) is analysed: the next operator keeps that
    canary and that analysis, and the tournament ends in the same promotion, with one canary of DFlash."""
    c = fresh_cluster
    first = c.start_operator("first")
    c.wait_to_lead(first)
    ns = c.namespace("restart-tournament")
    sd = tuned("chat", "qwen36-35b-a3b-mtp", candidates=list(range(8)))
    sd["metadata"]["annotations"]["specpilot.io/sim-profile-dflash"] = "qwen36-35b-a3b-dflash"
    sd["spec"]["tuning"]["alternatives"] = [{"method": "dflash", "draftModel": DRAFT_MODELS["dflash"],
                                             "blockSize": 16, "numSpeculativeTokens": 7}]
    assert c.apply(sd, ns).returncode == 0
    load = start_load(c, ns, "chat", 120)

    def tour() -> dict:
        return status(c, ns, "chat").get("tournament") or {}

    try:
        wait_for("the DFlash canary's analysis", lambda: tour().get("canary") == 1 and tour().get("stage") == "analysing",
                 timeout=90)
        canary = deployment(c, ns, "chat-canary")
        assert canary is not None
        first.kill()
        at_kill = settled(tour)
        c.start_operator("second")
        uids = set()

        def promoted() -> bool:
            dep = deployment(c, ns, "chat-canary")
            if dep is not None:
                uids.add(dep["metadata"]["uid"])
            return tour().get("stable") == 1

        wait_for("DFlash to take over the stable track", promoted, timeout=60)
    finally:
        stop_load(load)
    assert uids <= {canary["metadata"]["uid"]}  # the method canary was never re-created
    final = tuning(c, ns, "chat")
    dflash_canaries = [h for h in final["history"] if h["action"] == "start_canary" and h.get("contender") == 1]
    assert len(dflash_canaries) == 1
    assert tour()["canaries"] == at_kill["canaries"]  # nothing started twice
    assert status(c, ns, "chat").get("method") == "dflash"
