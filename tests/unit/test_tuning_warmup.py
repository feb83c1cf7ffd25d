"""A canary's analysis starts once its step time has settled: a first window whose step time, relative to
the stable's in the same window, is above the next window's by more than the tolerance is warm-up, dropped,
at most WARMUP_MAX_WINDOWS of them."""

from __future__ import annotations

from specpilot.tuning.constants import WARMUP_MAX_WINDOWS, WARMUP_STEP_TOLERANCE
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.state import TunerState
from specpilot.tuning.warmup import analysis_start, relative_step, still_warming, warmup_until


def _rec(seq: int, step_s: float | None, track: str = "canary") -> WindowRecord:
    return WindowRecord(seq=seq, track=track, n=3, drafts=100.0, accepted_per_pos=(80.0, 60.0, 40.0),
                        tokens_per_step=2.8, step_s=step_s, load=8.0)


def _pair(seq: int, canary: float | None, stable: float | None = 0.05) -> list[WindowRecord]:
    return [_rec(seq, canary), _rec(seq, stable, "stable")]


def test_a_slower_first_window_is_warm_up_a_steady_or_faster_one_is_not() -> None:
    assert still_warming((1 + WARMUP_STEP_TOLERANCE) * 1.01, 1.0)
    assert not still_warming((1 + WARMUP_STEP_TOLERANCE) * 0.99, 1.0)
    assert not still_warming(0.6, 1.0)  # a cold engine is never faster


def test_without_both_tracks_step_times_the_window_is_kept() -> None:
    assert relative_step(_pair(5, 0.05, None), 5) is None and relative_step([_rec(5, 0.05)], 5) is None
    assert not still_warming(None, 1.0) and not still_warming(1.5, None)


def test_the_stable_cancels_what_the_load_did_to_both() -> None:
    # The load rose 16-fold in window 6: both tracks' step times doubled, the canary is as warm as before.
    recs = _pair(5, 0.05, 0.05) + _pair(6, 0.10, 0.10)
    assert analysis_start(5, 6, warmup_until(4), recs) == 5
    # The load fell instead: window 5 looks slower in raw step time, not against its stable.
    recs = _pair(5, 0.10, 0.10) + _pair(6, 0.05, 0.05)
    assert analysis_start(5, 6, warmup_until(4), recs) == 5


def test_analysis_moves_on_one_window_at_a_time_and_never_past_the_bound() -> None:
    ready = 4
    since, until = ready + 1, warmup_until(ready)
    assert until == ready + 1 + WARMUP_MAX_WINDOWS
    recs = [r for s in range(ready + 1, ready + 10) for r in _pair(s, 0.2 / (s - ready))]  # never settles
    for seq in range(ready + 1, ready + 10):
        since = analysis_start(since, seq, until, [r for r in recs if r.seq <= seq])
    assert since == until


def test_analysis_starts_at_the_first_settled_window() -> None:
    recs = _pair(5, 0.09) + _pair(6, 0.065) + _pair(7, 0.05) + _pair(8, 0.05)
    since = 5
    for seq in (5, 6, 7, 8):
        since = analysis_start(since, seq, warmup_until(4), [r for r in recs if r.seq <= seq])
    assert since == 7


def test_the_bound_survives_an_operator_restart() -> None:
    state = TunerState.new("ngram", 3)
    state.warmup_until = 9
    assert TunerState.from_status(state.to_status(), method="ngram", stable_n=3).warmup_until == 9
