"""A load level the canary has not been paired at borrows a neighbour's pairs only where that cannot hide a
loss (docs/tuner.md, "How it decides"): past the pairs on the side where the canary's draft length pays less
(heavier for a longer N, lighter for a shorter one) it waits for pairs of its own. Under switchback a live
arm's quick windows promoted an n-gram N=0 -> 1 on four pairs at 4 sequences per pod, +6.8% measured, -7.6%
over a mix half at 8 (docs/benchmark.md, "Switchback")."""

from __future__ import annotations

import pytest

from specpilot.tuning.judge import judge
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.schedule import TrackDrafting


def _mix(stable_n: int, canary_n: int, gain: float = 0.06) -> tuple[list[WindowRecord], list[WindowRecord]]:
    """Half the round's windows at 4 sequences per pod, half at 8; the canary paired at 4 only, `gain` there."""
    stable, canary = [], []
    for i in range(24):
        load = 4.0 if i % 2 else 8.0
        stable.append(WindowRecord(i, "stable", stable_n, 100.0, (50.0,) * min(stable_n, 1), 2.0,
                                   0.02 * load / 4.0, load))
        if load == 4.0 and i >= 12:
            wobble = 1.0 + 0.005 * (-1) ** (i // 2)
            canary.append(WindowRecord(i, "canary", canary_n, 100.0, (50.0,) * min(canary_n, 1),
                                       2.0 * (1.0 + gain) * wobble, 0.02, load))
    return stable, canary


def _verdict(stable: list[WindowRecord], canary: list[WindowRecord], drafting: TrackDrafting | None = None):
    return judge(stable, canary, [r.load for r in stable], "throughput", margin=0.005, confidence=0.95,
                 max_windows=6, drafting=drafting)


def test_a_longer_n_is_not_promoted_on_a_lighter_neighbour_s_pairs() -> None:
    # The heavier level, an octave up, is where a longer N pays more per step: it waits for pairs of its own.
    v = _verdict(*_mix(0, 1))
    assert v.decision == Ruling.CONTINUE and "waiting for loads" in v.reason and v.gain > 0.0, v


def test_a_shorter_n_still_borrows_its_lighter_neighbour_s_pairs() -> None:
    # A shorter N measured at the lighter level risks nothing at the heavier one: it borrows, as before.
    assert _verdict(*_mix(1, 0)).decision == Ruling.PROMOTE


def test_the_unseen_heavy_level_counts_with_its_downside_at_the_last_look() -> None:
    # Out of windows with the heavy level still unpaired: it is judged at the sceptical prior and the
    # downside of a longer N, not at the light level's +6%; not promoted.
    stable, canary = _mix(0, 1)
    v = judge(stable, canary, [r.load for r in stable], "throughput", margin=0.005, confidence=0.95,
              max_windows=2)
    assert v.decision != Ruling.PROMOTE and v.gain < 0.06, v


@pytest.mark.parametrize(("heavy_k", "promoted"), [(1, True), (2, False)])
def test_under_a_schedule_the_side_is_what_each_track_drafts_at_the_level(heavy_k: int, promoted: bool) -> None:
    # A schedule started at 2 against a stable N=1, +6% at 4 sequences per pod: at the unpaired 8 it drafts
    # the stable's 1 (nothing to lose there) or its own 2 (a longer N's risk).
    schedule = [[1, 5, 2], [6, 4096, heavy_k]]
    stable, canary = _mix(1, 2)
    v = _verdict(stable, canary, TrackDrafting("draft_model", 1, None, 2, schedule))
    assert (v.decision == Ruling.PROMOTE) == promoted, v
