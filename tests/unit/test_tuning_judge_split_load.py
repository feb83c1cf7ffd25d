"""A canary halves the load each pod serves: the judge still reaches a verdict when the round's mix was
measured on the stable alone, one octave above anything the paired windows can see."""

from __future__ import annotations

from test_tuning_decisions import record, snapshot, windows

from specpilot.tuning.judge import judge


def test_a_canary_that_halves_the_load_per_pod_is_still_judged() -> None:
    alone = windows(3, 4.0, 8)  # before the canary: the stable pod serves 4 sequences
    stable = [record(8 + i, "stable", snapshot(3, 2.0, wobble=1.0 + 0.004 * (-1) ** i), 300.0) for i in range(8)]
    canary = [record(8 + i, "canary", snapshot(5, 2.0, wobble=1.0 + 0.004 * (-1) ** i), 300.0) for i in range(8)]
    loads = [r.load for r in alone + stable]
    verdict = judge(alone + stable, canary, loads, "throughput", 0.02, 0.95, 6)
    assert "waiting for loads" not in verdict.reason and "never seen" not in verdict.reason
    assert verdict.decision in ("promote", "rollback")


def test_a_load_far_from_anything_paired_still_holds_the_verdict() -> None:
    # Most of the mix's goodput at 256 sequences and only light-load pairs: no verdict from those.
    heavy = windows(3, 256.0, 8)
    stable = windows(3, 4.0, 6, start=8)
    canary = [record(8 + i, "canary", snapshot(5, 4.0), 300.0) for i in range(6)]
    loads = [r.load for r in heavy + stable]
    verdict = judge(heavy + stable, canary, loads, "throughput", 0.02, 0.95, 6)
    assert verdict.decision == "continue" and "waiting for loads" in verdict.reason
