"""Load levels the judge must cover, and those it need not: a canary halves the load each pod serves, so
the round's mix measured on the stable alone may sit one octave above anything the paired windows see; a
burst of a window or two next to a common level (all requests arriving at once when load starts) is not
part of the mix, a heavy level as rare but far from the rest is; a level with a pair or two of its own
counts with its neighbour's pairs."""

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


def _better_canary(start: int, count: int, load: float) -> tuple[list, list]:
    wobble = [1.0 + 0.004 * (-1) ** i for i in range(count)]
    stable = [record(start + i, "stable", snapshot(3, load, wobble=wobble[i]), 300.0) for i in range(count)]
    canary = [record(start + i, "canary", snapshot(5, load, wobble=wobble[i]), 300.0) for i in range(count)]
    return stable, canary


def test_a_start_up_burst_does_not_hold_the_verdict() -> None:
    burst = windows(3, 8.0, 2)  # two windows with every request in flight at once, an octave above the rest
    alone = windows(3, 4.0, 6, start=2)
    stable, canary = _better_canary(8, 8, 2.0)
    loads = [r.load for r in burst + alone + stable]
    verdict = judge(burst + alone + stable, canary, loads, "throughput", 0.02, 0.95, 6)
    assert "waiting for loads" not in verdict.reason and "never seen" not in verdict.reason, verdict
    assert verdict.decision in ("promote", "rollback")


def test_a_rare_heavy_level_far_from_the_rest_still_holds_the_verdict() -> None:
    heavy = windows(3, 64.0, 2)  # a heavy hour seen in two windows is part of the mix, not a burst
    alone = windows(3, 4.0, 6, start=2)
    stable, canary = _better_canary(8, 8, 4.0)
    loads = [r.load for r in heavy + alone + stable]
    verdict = judge(heavy + alone + stable, canary, loads, "throughput", 0.02, 0.95, 6)
    assert verdict.decision == "continue" and "waiting for loads" in verdict.reason, verdict


def test_a_level_with_one_pair_counts_with_its_neighbours_pairs() -> None:
    alone = windows(3, 2.0, 6) + windows(3, 4.0, 6, start=6)
    stable, canary = _better_canary(12, 8, 2.0)
    one_stable, one_canary = _better_canary(20, 1, 4.0)
    everything = alone + stable + one_stable
    verdict = judge(everything, canary + one_canary, [r.load for r in everything], "throughput", 0.02, 0.95, 6)
    assert "waiting for loads" not in verdict.reason, verdict
    assert verdict.decision in ("promote", "rollback")
