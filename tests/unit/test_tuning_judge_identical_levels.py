"""A batch-size schedule canary drafts as the stable does at some loads: there the two tracks are one
configuration, so the judge knows their ratio (exactly 1) instead of estimating it from noisy pairs, and a
schedule that wins at light loads is proven from the light loads' windows."""

from __future__ import annotations

import math

import pytest

from specpilot.tuning.judge import judge, measured_gain
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.schedule import TrackDrafting

# Started at 6: K=6 up to 8 sequences, then the stable's 3.
SCHEDULE = [[1, 8, 6], [9, 4096, 3]]


def test_two_chain_tracks_drafting_the_same_k_around_a_load_are_identical_there() -> None:
    same = TrackDrafting("eagle3", 3, None, 6, SCHEDULE).identical
    assert same(64.0) and same(4096.0)
    # Around 4 the schedule drafts 6; around 8 a window's batches reach 4..16, across the schedule's edge.
    assert not same(4.0) and not same(8.0)
    # From 32 the band (16..64) is all K=3; from 16 it reaches down to 8, where K is 6.
    assert same(32.0) and not same(16.0)


def test_a_parallel_drafter_started_at_another_n_is_never_identical() -> None:
    # A block drafter's first K positions depend on the block it was started with.
    assert not TrackDrafting("dflash", 3, None, 6, SCHEDULE).identical(64.0)
    assert TrackDrafting("dflash", 6, [[1, 8, 6], [9, 4096, 2]], 6, SCHEDULE).identical(2.0)


def test_speculation_off_is_not_a_schedule_drafting_nothing() -> None:
    # A track started with a drafter holds its weights and KV cache even where it drafts K=0.
    assert not TrackDrafting("eagle3", 0, None, 4, [[1, 8, 4], [9, 4096, 0]]).identical(256.0)


def _window(seq: int, track: str, load: float, tokens_per_step: float, step_s: float) -> WindowRecord:
    return WindowRecord(seq, track, 3, 100.0, (50.0,), tokens_per_step, step_s, load)


def _schedule_canary(windows: int = 12) -> tuple[list[WindowRecord], list[WindowRecord]]:
    """Windows alternating between 2 and 32 sequences per pod: the canary twice as fast at 2 (with a little
    noise), and at 32 drafting as the stable does, where the pairs differ by +-10% of pure noise."""
    stable, canary = [], []
    for i in range(windows):
        light = i % 2 == 0
        load, step = (2.0, 0.02) if light else (32.0, 0.03)
        ratio = 2.0 * (1.0 + 0.01 * (-1) ** (i // 2)) if light else 1.0 + 0.1 * (-1) ** (i // 2)
        stable.append(_window(i, "stable", load, 2.0, step))
        canary.append(_window(i, "canary", load, 2.0 * ratio, step))
    return stable, canary


def test_the_judge_proves_a_schedule_from_the_loads_where_it_differs() -> None:
    stable, canary = _schedule_canary()
    loads = [r.load for r in stable] * 3
    drafting = TrackDrafting("eagle3", 3, None, 6, SCHEDULE)
    # The light level carries 200 / (200 + 2133) of the goodput: doubling it gains 8.6%.
    g_light, g_heavy = 2.0 * 2.0 / 0.02, 32.0 * 2.0 / 0.03
    truth = g_light / (g_light + g_heavy)
    known = measured_gain(list(zip(stable, canary)), stable, loads, "throughput", drafting)
    assert math.expm1(known.mean) == pytest.approx(truth, abs=0.01)
    assert known.covered == pytest.approx(1.0) and known.unseen == pytest.approx(0.0, abs=1e-9)
    proven = judge(stable, canary, loads, "throughput", margin=0.02, confidence=0.95, max_windows=6,
                   drafting=drafting)
    assert proven.decision == Ruling.PROMOTE
    # Without knowing that the heavy load's pairs compare one configuration with itself, their noise
    # (+-10% on most of the goodput) hides the gain.
    unsure = judge(stable, canary, loads, "throughput", margin=0.02, confidence=0.95, max_windows=6)
    assert unsure.decision == Ruling.CONTINUE


def test_a_schedule_drafting_as_the_stable_at_every_load_served_is_rolled_back() -> None:
    stable, canary = _schedule_canary()
    heavy = [(s, c) for s, c in zip(stable, canary) if s.load == 32.0]
    v = judge([s for s, _ in heavy], [c for _, c in heavy], [32.0] * 12, "throughput", margin=0.02,
              confidence=0.95, max_windows=6, drafting=TrackDrafting("eagle3", 3, None, 6, SCHEDULE))
    assert v.decision == Ruling.ROLLBACK and v.gain == 0.0
