"""From the method's default N the tuning loop reaches the profile's best N (or near it, see NEAR_BEST):
simulated engines in the sandbox, load through the Service, canaries, promotions, all through the
operator. Three workloads at once: a sequential drafter that wants a longer N, a parallel drafter that
wants a longer N, and one where speculation off is best."""

from __future__ import annotations

import time

import pytest
from cluster_kit import Cluster, wait_for
from tuning_kit import default_n, profile, relative_goodput, served_loads, start_load, stop_load, tuned, tuning

CASES = [  # (object name, profile, spec.tuning changes)
    # mtp, default 3 (17% below the best), best 7; candidates 0..7: the profile has no N=8
    ("sequential", "qwen35-122b-mtp-math500", {"candidates": list(range(8))}),
    # dflash, default 7 (13-22% below at 4-8 sequences per pod), best 14, default candidates (0..15): the
    # profile accepts 5% less at 15 (the block is full), so after a canary at 15 the tuner must probe 14. It
    # takes three canaries or more, and the load per pod scatters, so a canary may be rolled back after 18
    # windows for loads it never saw: with the default budget of 48 windows a CI run stopped the round
    # during the next canary, at 15 (95% of the best). With one stable pod a canary takes half the traffic,
    # so the probe of 14 is worth its cost only when the judge can prove +5% (10 windows, 30 at most) and
    # the drop at 15 is measured near its true 5%: from 2 s windows (about a thousand drafts a pod) it read
    # 3.6-3.8% in 5% of simulated runs, 14 then looked +1% over 15, and CI runs converged at 15. 4 s
    # windows halve that noise (1 run in 80 simulated; one CI run of ~80 still ended at 15, 94.7%): this case
    # asks for the block's cliff edge (see NEAR_CLIFF), not the last 5%.
    ("parallel", "example-dflash-parallel", {"maxWindowsPerRound": 96,
                                             "canary": {"windows": 10, "analysisWindow": "4s"}}),
    # eagle3, default 3 (14% below), best 0: speculation off
    ("off-best", "qwen3-8b-eagle3-math500", {"candidates": list(range(8))}),
]
# The tuner spends no canary on an N it expects to gain less than the promotion margin (2% by default), and
# that expectation is the model's, with its error: a CI run held at 13 (98.0% of the best) because 14 was
# expected +1.4% over it, truly +2.1%. A default 13-17% below the best must end within the margin and a
# point of model error.
NEAR_BEST = 0.97
# The parallel case's N=15 is 93.8-95% of the best at 1-8 sequences a pod; from its default (78-87%) the loop
# must climb to 12-15.
NEAR_CLIFF = 0.93
FLOOR = {"parallel": NEAR_CLIFF}
CONVERGE_S = 420.0  # the parallel case's round may take 96 windows of 4 s; the others converge in ~60 s


# The longest round outlasts the suite's 300 s per test: the limit here is the round's, plus setup.
@pytest.mark.timeout(CONVERGE_S + 180)
def test_loop_reaches_the_best_n(cluster: Cluster, ns: str) -> None:
    for name, profile_name, changes in CASES:
        assert cluster.apply(tuned(name, profile_name, **changes), ns).returncode == 0
        p = profile(profile_name)
        assert relative_goodput(p, default_n(p), [4.0, 8.0]) < NEAR_BEST - 0.1  # far from the best
    loads = [start_load(cluster, ns, name, CONVERGE_S + 10) for name, _, _ in CASES]
    started = time.monotonic()
    try:
        def all_converged() -> bool:
            return all(tuning(cluster, ns, name).get("phase") == "converged" for name, _, _ in CASES)
        wait_for("every tuner to converge", all_converged, timeout=CONVERGE_S)
    finally:
        for proc in loads:
            stop_load(proc)
    results = {name: tuning(cluster, ns, name) for name, _, _ in CASES}
    for name, profile_name, _ in CASES:
        t, p = results[name], profile(profile_name)
        loads = served_loads(t)
        print(f"{profile_name}: N {default_n(p)} -> {t['stableN']}, goodput {relative_goodput(p, default_n(p), loads):.3f}"
              f" -> {relative_goodput(p, t['stableN'], loads):.3f} of the best at loads {min(loads):.1f}-"
              f"{max(loads):.1f}; canaries {t['tried']}, {t['seq']} windows, {time.monotonic() - started:.0f}s")
        for h in t["history"]:  # what each decision was based on, for a failure's report
            print(f"    window {h['seq']}: {h['action']} N={h['n']}: {h['reason']}")
    for name, profile_name, _ in CASES:
        t, p = results[name], profile(profile_name)
        floor = FLOOR.get(name, NEAR_BEST)
        assert relative_goodput(p, t["stableN"], served_loads(t)) >= floor, (profile_name, t["stableN"], t["history"])
        # What runs is what the tuner chose: the stable Deployment rolled to it, the canary is gone.
        deployment = cluster.get("deployment", name, "-n", ns)
        assert deployment is not None
        assert deployment["spec"]["template"]["metadata"]["labels"]["specpilot.io/num-speculative-tokens"] \
            == str(t["stableN"])
        assert cluster.get("deployment", f"{name}-canary", "-n", ns) is None
        promotions = [h for h in t["history"] if h["action"] == "promote"]
        assert promotions and all("verdict" in h["numbers"] for h in promotions)
