"""Loads no pair saw are not alike: a longer N than the stable's pays less the busier the pod, so it may lose
at a heavier load however much it gained where it was measured; a shorter N may lose at a lighter one."""

from __future__ import annotations

import pytest

from specpilot.tuning.judge import judge
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.schedule import TrackDrafting


def _window(seq: int, track: str, n: int, load: float, tokens_per_step: float, step_s: float) -> WindowRecord:
    return WindowRecord(seq, track, n, 100.0 if n else 0.0, (50.0,) * min(n, 1), tokens_per_step, step_s, load)


def _round(stable_n: int, canary_n: int, light: float, heavy: float) -> tuple[list[WindowRecord], list[WindowRecord]]:
    """40 windows, one in ten at `heavy` sequences per pod, the others at `light`; the canary was paired
    in 12 light windows only, measuring +10% with a little noise."""
    stable, canary = [], []
    for i in range(40):
        load = heavy if i % 10 == 3 else light
        stable.append(_window(i, "stable", stable_n, load, 2.0, 0.02 * (load / light)))
        if load == light and len(canary) < 12:
            wobble = 1.0 + 0.01 * (-1) ** i
            canary.append(_window(i, "canary", canary_n, load, 2.0 * 1.1 * wobble, 0.02))
    return stable, canary


@pytest.mark.parametrize(("stable_n", "canary_n", "light", "heavy", "promoted"), [
    (0, 1, 4.0, 16.0, False),  # longer N, the heavy load unseen: it may lose there
    (1, 0, 4.0, 16.0, True),  # shorter N: heavier loads only favour it more
    (1, 0, 16.0, 4.0, False),  # shorter N, the light load unseen: it may lose there
    (0, 1, 16.0, 4.0, True),  # longer N: lighter loads only favour it more
])
def test_a_gain_seen_at_one_load_is_promoted_only_when_the_unseen_load_cannot_reverse_it(
        stable_n: int, canary_n: int, light: float, heavy: float, promoted: bool) -> None:
    stable, canary = _round(stable_n, canary_n, light, heavy)
    v = judge(stable, canary, [r.load for r in stable], "throughput", margin=0.02, confidence=0.95,
              max_windows=12)
    assert v.gain > 0.05
    assert (v.decision == Ruling.PROMOTE) == promoted, v


@pytest.mark.parametrize(("heavy_k", "promoted"), [(1, True), (2, False)])
def test_under_a_schedule_the_risky_side_is_where_the_canary_drafts_more(heavy_k: int, promoted: bool) -> None:
    # A schedule started at 2 against a stable N=1, measured +10% at 4 sequences per pod: at the unseen 16
    # it drafts the stable's 1 (nothing to lose there) or its own 2 (the longer N's risk).
    schedule = [[1, 8, 2], [9, 4096, heavy_k]]
    stable, canary = _round(1, 2, 4.0, 16.0)
    v = judge(stable, canary, [r.load for r in stable], "throughput", margin=0.02, confidence=0.95,
              max_windows=12, drafting=TrackDrafting("draft_model", 1, None, 2, schedule))
    assert v.gain > 0.05
    assert (v.decision == Ruling.PROMOTE) == promoted, v
