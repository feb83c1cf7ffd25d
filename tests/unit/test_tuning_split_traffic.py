"""A surge canary takes its share of the Service's traffic: every pod runs lighter while it serves (with one
stable replica, at half). The tuner keeps the load the stable would serve alone for the load mix, and the
judge carries each pair from the load it ran at to that one."""

from __future__ import annotations

import math

import pytest
from test_tuning_decisions import record, snapshot

from specpilot_runtime.vllm_metrics import Snapshot
from specpilot.tuning import Observations, TrackWindow, TunerState
from specpilot.tuning.judge import judge, measured_gain
from specpilot.tuning.machine import load_mix, record_window
from specpilot.tuning.observations import WindowRecord, alone

# A CPU-like engine: a fixed cost per step and one per verified token, t = A + B_TOKEN x load x (1 + K).
A_MS, B_TOKEN_MS = 10.0, 0.491


def cpu_record(seq: int, track: str, n: int, load: float, tokens_per_step: float,
               alone_load: float | None = None, wobble: float = 1.0) -> WindowRecord:
    step_s = (A_MS + B_TOKEN_MS * load * (1 + n)) / 1000.0 * wobble
    return WindowRecord(seq=seq, track=track, n=n, drafts=1e5, accepted_per_pos=(), tokens_per_step=tokens_per_step,
                        step_s=step_s, load=load, alone_load=alone_load)


def test_the_stable_window_under_a_canary_keeps_the_load_it_would_serve_alone() -> None:
    r = record(1, "stable", snapshot(3, 2.0, pods=1), 300.0)
    c = record(1, "canary", snapshot(5, 2.0, pods=1), 300.0)
    both = alone(r, 1, c, 1)
    assert both.load == pytest.approx(2.0) and both.mix_load == pytest.approx(4.0)
    assert WindowRecord.from_json(both.to_json()) == both
    # Three stable replicas and one canary pod: each ran 3 of the 4 the stable pods would run alone.
    three = alone(record(1, "stable", snapshot(3, 3.0), 300.0), 3,
                  record(1, "canary", snapshot(5, 3.0, pods=1), 300.0), 1)
    assert three.mix_load == pytest.approx(4.0)


@pytest.mark.parametrize("bad", [0.5, -3, float("inf"), float("nan")])
def test_a_hostile_alone_load_in_a_status_is_refused_by_name(bad: float) -> None:
    d = {**cpu_record(1, "stable", 3, 2.0, 2.5, 4.0).to_json(), "a": bad}
    with pytest.raises(ValueError, match="record a"):
        WindowRecord.from_json(d)


def test_with_one_stable_replica_the_load_mix_is_the_load_the_stable_serves_alone() -> None:
    state = TunerState.new("mtp", 3)
    record_window(state, Observations(window_s=300.0, stable=snapshot(3, 4.0, pods=1)))
    state.canary_n = 5
    record_window(state, Observations(window_s=300.0, stable=snapshot(3, 2.0, pods=1),
                                      canary=snapshot(5, 2.0, pods=1)))
    assert load_mix(state) == pytest.approx([4.0, 4.0], rel=1e-3)
    assert state.records[-1].load == pytest.approx(2.0, rel=1e-3)  # what the pod ran, for the step-time model


def _pairs(alone_load: float | None) -> tuple[list[WindowRecord], list[WindowRecord]]:
    """The stable N=3 alone at 4 sequences per pod, then 12 windows beside a canary N=5 at 2 each: the canary
    accepts enough to be 5% faster at 2, and is 1.8% slower at 4 (its extra tokens cost more of a busier
    step)."""
    before = [cpu_record(i, "stable", 3, 4.0, 2.5, wobble=1.0 + 0.004 * (-1) ** i) for i in range(8)]
    l_canary = 1.05 * 2.5 * (A_MS + B_TOKEN_MS * 12) / (A_MS + B_TOKEN_MS * 8)
    during = [cpu_record(8 + i, "stable", 3, 2.0, 2.5, alone_load, wobble=1.0 + 0.004 * (-1) ** i)
              for i in range(12)]
    canary = [cpu_record(8 + i, "canary", 5, 2.0, l_canary, wobble=1.0 + 0.004 * (-1) ** (i + 1)) for i in range(12)]
    return before + during, canary


def test_a_canary_measured_at_half_the_load_is_judged_at_the_load_it_would_serve() -> None:
    truth = (A_MS + B_TOKEN_MS * 16) / (A_MS + B_TOKEN_MS * 24) * 1.05 * (A_MS + B_TOKEN_MS * 12) \
        / (A_MS + B_TOKEN_MS * 8) - 1.0
    assert truth == pytest.approx(-0.018, abs=0.002)
    stable, canary = _pairs(alone_load=4.0)
    loads = [r.mix_load for r in stable]
    est = measured_gain(list(zip(stable[8:], canary)), stable, loads, "throughput")
    # The stable's own slope across the octave (0.36) puts the canary's at 0.46: carried to 4 sequences
    # per pod the measured +5% is about the true -1.8%.
    assert math.expm1(est.mean) == pytest.approx(truth, abs=0.01)
    assert judge(stable, canary, loads, "throughput", 0.02, 0.95, 6).decision != "promote"
    # Judged at the load it ran at, as if the deployment served 2 sequences per pod, the same windows promote.
    light, canary = _pairs(alone_load=None)
    assert judge(light[8:], canary, [r.load for r in light[8:]], "throughput", 0.02, 0.95, 6).decision == "promote"


def test_a_replace_canary_leaves_the_load_the_stable_serves_alone_where_it_was() -> None:
    # Three replicas, canary mode replace: beside the canary the stable runs two pods, every pod at the load
    # the three ran before; nothing is to be carried, and the pair is judged at the load it ran at.
    state = TunerState.new("mtp", 3)
    record_window(state, Observations(window_s=300.0, stable=snapshot(3, 4.0), stable_replicas=3))
    state.canary_n = 5
    record_window(state, Observations(window_s=300.0, stable=snapshot(3, 4.0, pods=2),
                                      canary=snapshot(5, 4.0, pods=1), stable_replicas=3))
    # While the canary starts, the two pods left carry all three pods' load.
    record_window(state, Observations(window_s=300.0, stable=snapshot(3, 6.0, pods=2),
                                      canary=TrackWindow(5, Snapshot(), 0, 1), stable_replicas=3))
    assert load_mix(state) == pytest.approx([4.0, 4.0, 4.0], rel=1e-3)
    # Counted by the stable's ready pods alone, as before, the pair would be carried to 6 sequences per pod.
    both = alone(state.records[1], 2, record(2, "canary", snapshot(5, 4.0, pods=1), 300.0), 1)
    assert both.mix_load == pytest.approx(6.0, rel=1e-3)


def test_a_verdict_says_at_what_share_of_the_load_its_pairs_ran_and_how_far_they_were_carried() -> None:
    # A user reading "rolled back" should know the canary ran at half the load it would serve and that a
    # model carried it there (a replace canary would have been measured at the load itself).
    stable, canary = _pairs(alone_load=4.0)
    v = judge(stable, canary, [r.mix_load for r in stable], "throughput", 0.02, 0.95, 6)
    assert "paired at 50% of the load it will serve, carried -" in v.reason
    stable, canary = _pairs(alone_load=None)
    v = judge(stable, canary, [r.mix_load for r in stable], "throughput", 0.02, 0.95, 6)
    assert "paired at" not in v.reason


# An MoE target's step times (ms) at N = 0 and 7, by sequences per pod: the gain of drafting 7 is 38% at 1
# sequence, 6% at 2, 14% at 16 and 55% at 32; not monotone in load, as no linear cost model is.
MOE_T0 = {1: 6.86, 2: 8.33, 16: 20.59, 32: 30.76}
MOE_T7 = {1: 14.62, 2: 23.06, 16: 53.01, 32: 58.34}
MOE_L7 = 2.94


def moe_record(seq: int, track: str, n: int, load: int, alone_load: float | None = None,
               wobble: float = 1.0) -> WindowRecord:
    step_s = (MOE_T7 if n == 7 else MOE_T0)[load] / 1000.0 * wobble
    return WindowRecord(seq=seq, track=track, n=n, drafts=1e5, accepted_per_pos=(),
                        tokens_per_step=MOE_L7 if n == 7 else 1.0, step_s=step_s, load=float(load),
                        alone_load=alone_load)


def test_a_shorter_canary_is_never_carried_to_a_win_by_the_model() -> None:
    # One stable replica at N=7 serving 2 or 32 sequences per pod; a canary without speculation pairs at
    # half that. It measures 13% below the stable there; the linear cost model would carry it to +5% at the
    # full load, where it is truly 35% worse. The model may hold a canary back, never promote it.
    mix = [2, 32, 32, 2, 32, 32, 32, 2, 32, 32, 32, 2, 32, 32, 2, 32]
    before = [moe_record(i, "stable", 7, b, wobble=1 + 0.01 * (-1) ** i) for i, b in enumerate(mix)]
    during = [moe_record(16 + i, "stable", 7, b // 2, float(b), wobble=1 + 0.01 * (-1) ** i)
              for i, b in enumerate(mix[:12])]
    canary = [moe_record(16 + i, "canary", 0, b // 2, wobble=1 + 0.01 * (-1) ** (i + 1))
              for i, b in enumerate(mix[:12])]
    stable = before + during
    v = judge(stable, canary, [r.mix_load for r in stable], "throughput", 0.02, 0.95, 6)
    assert v.decision == "rollback" and v.gain < -0.1
    assert "paired at 50% of the load it will serve, not carried up the +" in v.reason
