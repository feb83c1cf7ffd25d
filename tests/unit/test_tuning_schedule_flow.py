"""Schedule mode end to end on a simulated deployment (the benchmark's): when the loads' best N are far
apart, the tuner canaries a batch-size schedule, the paired judge promotes it on measured goodput, and the
stable track then serves it; in single mode it never does."""

from __future__ import annotations

import pytest

from specpilot.api.models import TuningMode
from specpilot.tuning import ActionKind, TunerState, step
from specpilot_runtime.speculative import schedule_k

from specpilot_harness.bench.strategies import _deployment, bench_tuning
from specpilot_harness.sim.profile import Profile

WINDOWS = 48
SEEDS = range(4)
# A chain drafter over two loads: at 2 sequences a drafted token costs 2% of a step, so N=6 is best; at
# 32 it costs 60% (verification is compute-bound), so N=2 is. Single N: 6; per load: 10% more goodput.
PROFILE = Profile(name="two-loads", method="eagle3", max_n=6, survival=[0.85 ** (k + 1) for k in range(6)],
                  step_time_ms={2: [10.0 * (1 + 0.02 * n) for n in range(7)],
                                32: [20.0 * (1 + 0.6 * n) for n in range(7)]},
                  concurrency={2: 0.7, 32: 0.3}, noise=0.1, default_n=3)


def _goodput(n: int, schedule: list[list[int]] | None) -> float:
    """True goodput over the load mix of a track at N serving `schedule`."""
    return sum(w * PROFILE.goodput_at(schedule_k(schedule, n, int(b)), b) for b, w in PROFILE.concurrency.items())


def _run(seed: int, mode: TuningMode) -> tuple[TunerState, list[tuple[float, float]]]:
    """The tuner's final state, and (goodput before, after) of every promotion."""
    dep = _deployment(PROFILE, seed)
    tuning = bench_tuning(PROFILE, mode)
    state = TunerState.new(PROFILE.method, PROFILE.default_n, now=dep.now)
    promotions = []
    for _ in range(WINDOWS):
        state, action = step(state, tuning, dep.window(), dep.now)
        before = _goodput(dep.stable_n, dep.stable_schedule)
        dep.apply(action)
        if action.kind == ActionKind.PROMOTE:
            promotions.append((before, _goodput(dep.stable_n, dep.stable_schedule)))
    return state, promotions


def test_a_schedule_is_canaried_promoted_on_measurement_and_served() -> None:
    best_single = max(_goodput(n, None) for n in range(PROFILE.max_n + 1))
    served = 0
    for seed in SEEDS:
        state, promotions = _run(seed, "schedule")
        # No promotion, of a schedule or an N, loses goodput against what it replaced.
        assert all(after >= before * 0.995 for before, after in promotions), (seed, promotions)
        starts = [h for h in state.history if h["action"] == ActionKind.START_CANARY and h.get("schedule")]
        assert len(starts) <= 1 or len({h["round"] for h in starts}) == len(starts)  # one per round
        if state.stable_schedule is not None:
            served += 1
            assert state.stable_n == max(k for _, _, k in state.stable_schedule)
            assert _goodput(state.stable_n, state.stable_schedule) > best_single * 1.02
    assert served >= len(SEEDS) // 2, served


def test_single_mode_never_serves_a_schedule() -> None:
    for seed in SEEDS[:2]:
        state, _ = _run(seed, "single")
        assert state.stable_schedule is None and not any(h.get("schedule") for h in state.history)


@pytest.mark.parametrize("when", ["canary", "served"])
def test_switching_to_single_mode_rolls_back_a_schedule_canary_and_canaries_single_n_against_a_served_one(
        when: str) -> None:
    switched = 0
    for seed in SEEDS:
        dep = _deployment(PROFILE, seed, 4 * WINDOWS)
        tuning = bench_tuning(PROFILE, "schedule")
        state = TunerState.new(PROFILE.method, PROFILE.default_n, now=dep.now)
        single = None
        for _ in range(4 * WINDOWS):
            state, action = step(state, tuning, dep.window(), dep.now)
            dep.apply(action)
            now = (state.canary_schedule is not None and state.phase == "analysing" if when == "canary"
                   else state.stable_schedule is not None and state.canary_n is None)
            if single is None and now:
                # The user sets spec.tuning.mode: single while the tuner canaries (or serves) a schedule.
                single, switched = len(state.history), switched + 1
                tuning = bench_tuning(PROFILE, "single")
                state, action = step(state, tuning, dep.window(), dep.now)
                dep.apply(action)
                if when == "canary":
                    assert action.kind == ActionKind.ROLLBACK and "spec.tuning.mode is single" in action.reason
        after = state.history[single:] if single is not None else []
        # No schedule is canaried or promoted once the mode is single, and a served one is not held as
        # converged ("serving schedule") but canaried against: a proven single N replaces it.
        assert not any(h.get("schedule") for h in after if h["action"] in (ActionKind.START_CANARY,
                                                                           ActionKind.PROMOTE))
        assert not any("serving schedule" in h["reason"] for h in after)
    assert switched
