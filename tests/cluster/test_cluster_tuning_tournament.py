"""The method tournament through the operator: a deployment started on Qwen3.6-35B-A3B's MTP, with DFlash
as an alternative (the article: DFlash 2.06x, MTP 1.49x), ends up serving DFlash from its stable
Deployment; the status shows what each method measured, and Events name the method."""

from __future__ import annotations

import json

from cluster_kit import Cluster, wait_for
from tuning_kit import DRAFT_MODELS, events, start_load, status, stop_load, tuned

NAME = "tournament"
SWITCH_S = 150.0


def test_a_better_method_takes_over_the_stable_track(cluster: Cluster, ns: str) -> None:
    sd = tuned(NAME, "qwen36-35b-a3b-mtp", candidates=list(range(8)))
    sd["metadata"]["annotations"]["specpilot.io/sim-profile-dflash"] = "qwen36-35b-a3b-dflash"
    sd["spec"]["tuning"]["alternatives"] = [{"method": "dflash", "draftModel": DRAFT_MODELS["dflash"],
                                             "blockSize": 16, "numSpeculativeTokens": 7,
                                             "candidates": list(range(8))}]
    assert cluster.apply(sd, ns).returncode == 0
    load = start_load(cluster, ns, NAME, SWITCH_S + 10)
    try:
        wait_for("the stable track to run dflash",
                 lambda: (status(cluster, ns, NAME).get("tournament") or {}).get("stable") == 1
                 and status(cluster, ns, NAME).get("method") == "dflash", timeout=SWITCH_S)
    finally:
        stop_load(load)
    st = status(cluster, ns, NAME)
    history = st["tuning"]["history"]
    for h in history:  # for a failure's report
        print(f"    window {h['seq']}: {h['action']} N={h['n']} contender={h.get('contender')}: {h['reason']}")
    config = cluster.get("configmap", f"{NAME}-engine", "-n", ns)
    assert config is not None
    engine = json.loads(next(iter(config["data"].values())))
    assert engine["speculative"]["method"] == "dflash" and engine["speculative"]["model"] == DRAFT_MODELS["dflash"]
    rows = {r["method"]: r for r in st["tournament"]["standings"]}
    assert rows["dflash"]["role"] == "stable" and rows["dflash"]["acceptedLength"] > 1.5
    assert rows["mtp"]["role"] == "measured" and rows["mtp"]["measuredGain"] < 0
    promoted = [e for e in events(cluster, ns, "TuningPromote") if "dflash" in e.get("message", "")]
    assert promoted, "no Event names the method promotion"
