"""Acceptance stays honest under a batch-size schedule: each position's acceptance is divided by the drafts
that reached it (specpilot's drafted-per-position counter) when the pods export it, else by every draft."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from specpilot_runtime import vllm_metrics as vm
from specpilot.scrape.windows import add
from specpilot.tuning.observations import (DRAFTED_PER_POS_ABSENT, TrackWindow, WindowRecord, acceptance_note,
                                           record)
from specpilot.tuning.survival import estimate
from specpilot_harness.sim.engine import Engine
from specpilot_harness.sim.metrics import SimMetrics
from specpilot_harness.sim.profile import Profile

N = 4
TRUE_S = (0.8, 0.6, 0.45, 0.3)
# K = N at small batches, K = 1 from batch 5: the deep positions are drafted only at small batches.
SCHEDULE = ((1, 4, N), (5, 4096, 1))
STEPS = 100  # decode steps per batch size per window
WINDOWS = 4
PROFILE = Profile(name="p", method="mtp", max_n=N, survival=list(TRUE_S),
                  step_time_ms={1: [10.0, 11.0, 12.0, 13.0, 14.0], 16: [20.0, 22.0, 24.0, 26.0, 28.0]})


def rec(seq: int, drafts: float, acc: tuple[float, ...], dr: tuple[float, ...] | None,
        track: str = "stable", n: int = 2) -> WindowRecord:
    return WindowRecord(seq=seq, track=track, n=n, drafts=drafts, accepted_per_pos=acc, tokens_per_step=2.0,
                        step_s=0.02, load=4.0, drafted_per_pos=dr)


def run_batch(engine: Engine, metrics: SimMetrics, batch: int) -> None:
    """A fresh batch of `batch` requests for STEPS decode steps (its prefill step drafts nothing)."""
    for i in range(engine.running):
        engine.abort(f"r{i}")
    for i in range(batch):
        engine.submit(f"r{i}", prompt_tokens=4, max_tokens=1_000_000)
    for _ in range(STEPS + 1):
        metrics.record(engine.step())


def sim_windows(plugin: bool) -> list[WindowRecord]:
    """The tuner's records from a scheduled simulated engine, through /metrics, deltas and `record`:
    each window runs at batch 2 (K = 4), then at batch 8 (K = 1)."""
    engine = Engine(PROFILE, N, random.Random(11), schedule=SCHEDULE)
    metrics = SimMetrics("m", N, drafted_per_position=plugin)
    prev = vm.parse(metrics.exposition().decode())
    out = []
    for seq in range(1, WINDOWS + 1):
        start = engine.clock
        run_batch(engine, metrics, 2)
        run_batch(engine, metrics, 8)
        cur = vm.parse(metrics.exposition().decode())
        w = TrackWindow(n=N, delta=vm.delta(prev, cur), ready_pods=1, desired_pods=1)
        out.append(record(seq, "stable", w, engine.clock - start, scheduled=True))
        prev = cur
    return out


def test_a_schedule_biases_acceptance_low_unless_the_drafted_counter_divides() -> None:
    with_counter = estimate(sim_windows(plugin=True))
    without = estimate(sim_windows(plugin=False))
    deep = WINDOWS * 2 * STEPS  # drafts that reached positions 2..N: the batch-2 steps only
    every = WINDOWS * (2 + 8) * STEPS

    assert with_counter.depth == without.depth == N
    for k, s_k in enumerate(TRUE_S):
        reached = every if k == 0 else deep
        tolerance = 4 * math.sqrt(s_k * (1 - s_k) / reached)
        assert abs(with_counter.s[k] - s_k) < tolerance, (k, with_counter.s[k], s_k)
        if k == 0:  # every draft reaches position 1: both denominators agree
            assert without.s[0] == pytest.approx(with_counter.s[0])
        else:  # divided by every draft, a deep position reads deep / every of its true acceptance
            assert without.s[k] == pytest.approx(with_counter.s[k] * deep / every)
            assert without.s[k] < s_k / 2
    assert with_counter.expected_length(N) == pytest.approx(1 + sum(TRUE_S), abs=0.1)


def test_a_window_keeps_the_drafted_deltas_up_to_n() -> None:
    d = vm.Snapshot(drafts=10, accepted_per_pos=(8, 5, 2), drafted_per_pos=(10, 10, 4), generation_tokens=30)
    window = TrackWindow(n=2, delta=d, ready_pods=1, desired_pods=1)
    assert record(1, "stable", window, 60, scheduled=True).drafted_per_pos == (10, 10)
    off = TrackWindow(n=2, delta=replace(d, drafted_per_pos=None), ready_pods=1, desired_pods=1)
    assert record(1, "stable", off, 60, scheduled=True).drafted_per_pos is None
    # Without a schedule, short drafts are the drafter's own (suffix, n-gram): N buys acceptance over
    # every draft, so the drafted counter is not the denominator.
    assert record(1, "stable", window, 60).drafted_per_pos is None


def test_status_json_keeps_the_drafted_deltas_and_old_statuses_still_load() -> None:
    r = rec(3, 100, (80, 20), (100, 40))
    assert r.to_json()["dr"] == [100, 40]
    assert WindowRecord.from_json(r.to_json()) == r
    old = rec(3, 100, (80, 20), None).to_json()
    assert "dr" not in old  # what a status written before the counter was kept looks like
    assert WindowRecord.from_json(old).drafted_per_pos is None


def test_survival_divides_each_position_by_its_drafted_count_and_ends_where_nothing_was_drafted() -> None:
    s = estimate([rec(1, 100, (80, 20), (100, 40)), rec(2, 100, (80, 0), (100, 0))])
    assert s.s == (pytest.approx(0.8), pytest.approx(0.5))
    assert s.windows == (2, 1)  # a window that never drafted position 2 says nothing about it
    assert estimate([rec(1, 100, (80, 0), (100, 0))]).depth == 1
    # Without the counter (old records): every draft, as before.
    assert estimate([rec(1, 100, (80, 20), None)]).s == (pytest.approx(0.8), pytest.approx(0.2))


def test_a_pod_without_the_counter_leaves_its_track_without_one() -> None:
    a = vm.Snapshot(drafts=10, accepted_per_pos=(8, 5), drafted_per_pos=(10, 6))
    b = vm.Snapshot(drafts=10, accepted_per_pos=(9, 4), drafted_per_pos=None)
    assert add(a, b).drafted_per_pos is None and add(b, a).drafted_per_pos is None
    assert add(a, a).drafted_per_pos == (20, 12)


def test_the_status_says_when_a_scheduled_track_lacks_the_counter() -> None:
    records = [rec(1, 100, (80, 20), (100, 40)), rec(1, 100, (80, 20), None, track="canary"),
               rec(2, 100, (80, 20), None)]
    note = acceptance_note(records, scheduled={"stable"})
    assert note is not None and "stable" in note and "canary" not in note and vm.SPEC_DRAFTED_PER_POS in note
    assert "stable and canary" in (acceptance_note(records, scheduled={"stable", "canary"}) or "")
    assert acceptance_note(records, scheduled=set()) is None  # no schedule: every draft is N long
    assert acceptance_note(records[:1], scheduled={"stable", "canary"}) is None  # counter there; no canary yet
    assert DRAFTED_PER_POS_ABSENT == "DraftedPerPositionAbsent"
