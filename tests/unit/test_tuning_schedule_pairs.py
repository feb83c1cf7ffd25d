"""A track serving a batch-size schedule drafts the K its running batch size gets. Where one K holds over
a window's spread of loads its step time is a point of t(K), and the step-time model learns from it as from
any canary: a schedule that drafts 1 at heavy load measures what N=1 costs there. Where a row's edge falls
inside the spread its steps draft several K, and no pair is kept. Before, no track serving a schedule ever
gave a pair, so a deployment that promoted one stopped learning step times for good."""

from __future__ import annotations

import math

from specpilot.tuning import Observations, Phase, TrackWindow, TunerState
from specpilot.tuning.machine import record_window
from specpilot.tuning.schedule import steady_k
from specpilot_runtime.vllm_metrics import Snapshot

WINDOW_S = 300.0
ROWS = [[1, 32, 7], [33, 4096, 1]]


def window(n: int, k: int, load: float, step_ms: float) -> TrackWindow:
    """One pod's counters over a window in which every step drafted K tokens per sequence."""
    seqs = WINDOW_S * 1000 / step_ms * load
    acc = [seqs * 0.7 ** (i + 1) for i in range(k)]
    tokens = seqs + sum(acc)
    finished = tokens / 256
    snap = Snapshot(drafts=seqs if k else 0.0, draft_tokens=seqs * k, accepted_tokens=sum(acc),
                    accepted_per_pos=tuple(acc) + (0.0,) * (n - k), generation_tokens=tokens,
                    tpot_sum=finished * step_ms / 1000 * seqs / tokens, tpot_count=finished, running=load)
    return TrackWindow(n=n, delta=snap, ready_pods=1, desired_pods=1)


def analysing_schedule() -> TunerState:
    state = TunerState.new("mtp", 7)
    state.canary_n, state.canary_schedule = 7, ROWS
    state.phase, state.analysis_from_seq = Phase.ANALYSING, 1
    return state


def test_steady_k_holds_only_where_one_row_covers_half_to_twice_the_load() -> None:
    assert steady_k(ROWS, 7, 128.0) == 1
    assert steady_k(ROWS, 7, 4.0) == 7
    assert steady_k(ROWS, 7, 24.0) is None  # 12..48 crosses the edge at 33
    assert steady_k(None, 3, 24.0) == 3
    assert steady_k([[1, 4096, 9]], 5, 8.0) == 5  # K is clamped to the started N


def test_a_schedule_canary_pairs_its_step_times_at_the_k_it_drafts() -> None:
    state = analysing_schedule()
    record_window(state, Observations(window_s=WINDOW_S, stable=window(7, 7, 128.0, 90.0),
                                      canary=window(7, 1, 128.0, 40.0)))
    assert [(p.n_canary, p.n_stable) for p in state.pairs] == [(1, 7)]
    assert abs(state.pairs[0].log_ratio - math.log(40.0 / 90.0)) < 0.02


def test_no_pair_where_the_schedule_drafts_several_k_or_the_same_k_as_the_stable() -> None:
    state = analysing_schedule()
    record_window(state, Observations(window_s=WINDOW_S, stable=window(7, 7, 24.0, 30.0),
                                      canary=window(7, 7, 24.0, 30.0)))
    record_window(state, Observations(window_s=WINDOW_S, stable=window(7, 7, 4.0, 20.0),
                                      canary=window(7, 7, 4.0, 20.0)))
    assert state.pairs == []
