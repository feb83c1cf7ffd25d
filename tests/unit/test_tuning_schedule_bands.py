"""Schedule mode under switchback: the live arm is judged band by band from the engines' per-band counters,
and the served table changes only at the bands proven better (tuning/bands.py, rules/per_band.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from specpilot.api.models import Tuning
from specpilot.controller.tuning.decision_events import decision_event
from specpilot.tuning import ActionKind, Observations, Phase, TrackWindow, TunerState, machine
from specpilot.tuning.bands import BandRecord, band_records, compose
from specpilot.tuning.constants import EXTEND, MAX_BATCH_SIZE
from specpilot.tuning.machine import step
from specpilot.tuning.schedule import ScheduleProposal
from specpilot_harness.bench import strategies
from specpilot_harness.bench.simulate import Fleet
from specpilot_harness.bench.strategies import MAX_WINDOWS
from specpilot_harness.sim.profile import Profile, load_profiles
from specpilot_runtime.live import BAND_COUNTERS, band_of, band_range
from specpilot_runtime.speculative import schedule_k
from specpilot_runtime.vllm_metrics import Snapshot

WINDOW_S = 300.0
TUNING = Tuning(enabled=True, candidates=list(range(8)), mode="schedule", measure="switchback")
LIGHT, HEAVY = "1-1", "64-127"


def band(batch: float, tokens_per_seq_step: float, step_s: float) -> tuple[float, ...]:
    """An arm's counters at one band over half a window (live.BAND_COUNTERS' order)."""
    steps = WINDOW_S / 2 / step_s
    seq_steps = steps * batch
    output = seq_steps * tokens_per_seq_step
    return (steps, steps * step_s, seq_steps, output, seq_steps * 3, output - seq_steps, output / 256)


def arm(n: int, bands: dict[str, tuple[float, ...]]) -> TrackWindow:
    """An arm's window as the operator reads it: a track's counters, and its per-band counters."""
    steps, seconds, seq_steps, output = (sum(b[i] for b in bands.values()) for i in range(4))
    per_seq = output / seq_steps
    snap = Snapshot(drafts=seq_steps, draft_tokens=seq_steps * n, accepted_tokens=output - seq_steps,
                    accepted_per_pos=(0.5 * seq_steps,) * n, generation_tokens=output,
                    tpot_sum=output / 256 * seconds / steps / per_seq, tpot_count=output / 256,
                    running=seq_steps / steps)
    return TrackWindow(n=n, delta=snap, ready_pods=1, desired_pods=1, bands=bands)


def window(rng: np.random.Generator, canary_n: int, light_gain: float, heavy_gain: float,
           light: bool = True) -> Observations:
    """Both arms at both bands (the heavy one only, `light` False): the canary's tokens per sequence-step
    `gain` above the stable's at the same step time, with 1% noise."""
    def jitter() -> float:
        return math.exp(0.01 * rng.standard_normal())
    stable = {LIGHT: band(1.0, 2.0 * jitter(), 0.010), HEAVY: band(80.0, 2.0 * jitter(), 0.030)}
    canary = {LIGHT: band(1.0, 2.0 * (1 + light_gain) * jitter(), 0.010),
              HEAVY: band(80.0, 2.0 * (1 + heavy_gain) * jitter(), 0.030)}
    if not light:
        del stable[LIGHT], canary[LIGHT]
    return Observations(window_s=WINDOW_S, stable=arm(3, stable), canary=arm(canary_n, canary), stable_replicas=1,
                        switchback=True)


def analysing(canary_n: int) -> TunerState:
    """Stable N=3 at every batch size, a live arm drafting `canary_n` at every batch size being analysed."""
    state = TunerState.new("mtp", 3)
    state.canary_n, state.phase, state.analysis_from_seq = canary_n, Phase.ANALYSING, 1
    return state


def test_a_band_proven_better_gets_its_k_while_an_unproven_band_keeps_its_own() -> None:
    rng = np.random.default_rng(0)
    state = analysing(5)
    for w in range(30):
        state, action = step(state, TUNING, window(rng, 5, light_gain=0.20, heavy_gain=-0.03), now=w * WINDOW_S)
        if action.kind != ActionKind.KEEP_ANALYSING:
            break
    assert action.kind == ActionKind.PROMOTE
    assert action.schedule is not None and state.stable_schedule == action.schedule
    assert schedule_k(action.schedule, action.n or 0, 1) == 5  # the light band took the canary's K
    assert schedule_k(action.schedule, action.n or 0, 80) == 3  # the heavy band kept the stable's
    assert "band 1-1: K=5 vs 3" in action.reason and "band 64-127" not in action.reason.split(":")[0]


def test_an_arm_proven_at_no_band_is_rolled_back_and_the_table_stays() -> None:
    rng = np.random.default_rng(1)
    state = analysing(5)
    for w in range(60):
        state, action = step(state, TUNING, window(rng, 5, light_gain=-0.08, heavy_gain=-0.10), now=w * WINDOW_S)
        if action.kind != ActionKind.KEEP_ANALYSING:
            break
    # Worse over the mix too: it ends on the canary judge's rollback, each band's verdict in the reason.
    assert action.kind == ActionKind.ROLLBACK and "band 1-1: K=5 vs 3" in action.reason
    assert state.stable_n == 3 and state.stable_schedule is None


def test_an_arm_worse_over_the_mix_with_no_promising_band_is_rolled_back_early() -> None:
    """The light band comes one window in four, too rarely to be decided for many windows; the arm, far
    worse at the heavy band every window sees, ends on the canary judge's rollback over the load mix, not
    after its EXTEND x canary.windows windows."""
    rng = np.random.default_rng(3)
    state = analysing(5)
    for w in range(EXTEND * TUNING.canary.windows):
        obs = window(rng, 5, light_gain=-0.03, heavy_gain=-0.30, light=w % 4 == 0)
        state, action = step(state, TUNING, obs, now=w * WINDOW_S)
        if action.kind != ActionKind.KEEP_ANALYSING:
            break
    assert action.kind == ActionKind.ROLLBACK and "no band promising" in action.reason
    assert w < TUNING.canary.windows
    assert state.stable_n == 3 and state.stable_schedule is None


def test_the_first_arm_where_the_proposal_is_the_stable_is_its_neighbours(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measurements propose the stable's own K at every band: the round's first arm drafts the stable's
    K one either side at each band the load visits, not a single N the planner would try."""
    profile = _profile("mix-tp-mtp-2004")
    fleet = Fleet(measure="switchback")
    dep = strategies._deployment(profile, 0, fleet=fleet)
    tuning = strategies.bench_tuning(profile, "schedule", fleet)
    k = profile.default_n
    monkeypatch.setattr(machine, "propose", lambda *_: ScheduleProposal(k, ((1, MAX_BATCH_SIZE, k),), k, 0.0, 0.0))
    state, loads = TunerState.new(profile.method, k, now=dep.now), []
    for _ in range(MAX_WINDOWS):
        obs = dep.window()
        loads.append(dep.costs[-1].load)
        state, action = step(state, tuning, obs, dep.now)
        dep.apply(action)
        if action.kind == ActionKind.START_CANARY:
            break
    assert action.kind == ActionKind.START_CANARY and action.schedule is not None, action.reason
    visited = {band_of(round(b)) for b in loads}
    assert {schedule_k(action.schedule, action.n or 0, band_range(b)[0]) for b in visited} <= {k - 1, k + 1}


def test_a_restart_from_status_resumes_the_per_band_evidence() -> None:
    """An operator restart between every window (status.tuning as JSON) decides as an uninterrupted run."""
    def run(restart: bool) -> list[tuple[str, str]]:
        rng = np.random.default_rng(2)
        state, out = analysing(5), []
        for w in range(30):
            if restart:
                state = TunerState.from_status(json.loads(json.dumps(state.to_status())), method="mtp", stable_n=3)
            state, action = step(state, TUNING, window(rng, 5, 0.20, -0.03), now=w * WINDOW_S)
            out.append((action.kind, action.reason))
            if action.kind != ActionKind.KEEP_ANALYSING:
                break
        return out

    resumed = run(restart=True)
    assert resumed == run(restart=False)
    assert resumed[-1][0] == ActionKind.PROMOTE


def test_band_labels_and_counts_no_engine_writes_are_ignored() -> None:
    good = band(80.0, 2.0, 0.03)
    hostile = {
        "64-127": good,
        "1-2": good,  # not a power-of-two band
        "0-0": good,
        "x" * 10_000: good,
        "64-127\n": good,
        "4-7": good,  # a batch of 80 sequences cannot be counted in band 4-7
        "128-255": tuple(math.nan for _ in BAND_COUNTERS),
        "256-511": (3.0, 0.1, 900.0, 1800.0, 0.0, 0.0, 1.0),  # three steps: a band passed through
        "512-1023": good[:3],  # too few counters
    }
    records = band_records(1, "canary", (5, None), hostile)
    assert [(r.band, r.k) for r in records] == [("64-127", 5)]


def test_a_status_band_record_no_tuner_writes_is_refused() -> None:
    ok = BandRecord(4, "stable", "16-31", 3, 2.0, 0.02, 20.0).to_json()
    assert BandRecord.from_json(json.loads(json.dumps(ok))) == BandRecord(4, "stable", "16-31", 3, 2.0, 0.02, 20.0)
    for bad in (ok[:6], [4, "other", *ok[2:]], [4, "stable", "16-30", *ok[3:]], [4, "stable", "16-31", 99, *ok[4:]],
                [4, "stable", "16-31", 3, 1e400, 0.02, 20.0], "16-31"):
        try:
            BandRecord.from_json(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r:.80}")


def test_a_composed_table_is_one_vllm_serves() -> None:
    stable = (5, [[1, 8, 5], [9, 4096, 2]])
    canary = (7, None)
    n, rows = compose(stable, canary, ["1-1", "16-31"])
    assert rows is not None and rows[0][0] == 1 and rows[-1][1] == 4096
    assert all(a[1] + 1 == b[0] for a, b in zip(rows, rows[1:]))  # rising, no gap, no overlap
    assert all(0 <= k <= n for _, _, k in rows)
    assert [schedule_k(rows, n, b) for b in (1, 2, 8, 9, 16, 31, 32)] == [7, 5, 5, 2, 7, 7, 2]
    assert compose((3, None), (5, None), []) == (3, None)


def test_the_events_show_each_band_s_estimate_and_interval() -> None:
    rng = np.random.default_rng(0)
    state = analysing(5)
    for w in range(30):
        state, action = step(state, TUNING, window(rng, 5, 0.20, -0.03), now=w * WINDOW_S)
        if action.kind != ActionKind.KEEP_ANALYSING:
            break
    message = decision_event(state.history[-1]).message
    assert "by band: 1-1 K=5 vs 3 promote" in message and "64-127 K=5 vs 3" in message


def test_the_bench_s_arms_count_at_the_band_of_their_window_s_load() -> None:
    """The simulator's switchback arms: one load level per window, so each arm counts every step in that
    level's band, with the tokens per sequence-step and step time of the arm's own window."""
    profile = _profile("mix-tp-mtp-2004")
    dep = strategies._deployment(profile, 0, fleet=Fleet(measure="switchback"))
    dep.start_canary(5, [[1, 8, 5], [9, 4096, 2]])
    for _ in range(6):
        obs = dep.window()
        level = dep.costs[-1].load
        assert obs.stable is not None and obs.canary is not None
        for w, (n, rows) in ((obs.stable, (dep.stable_n, None)), (obs.canary, (5, [[1, 8, 5], [9, 4096, 2]]))):
            (r,) = band_records(1, "stable", (n, rows), w.bands)
            assert r.band == band_of(level) and r.k == schedule_k(rows, n, level)
            d = w.delta
            assert math.isclose(r.tokens_per_step, d.generation_tokens / d.drafts if d.drafts else 1.0, rel_tol=1e-3)
            assert math.isclose(r.step_s, d.tpot_sum / d.tpot_count * r.tokens_per_step, rel_tol=1e-3)


def _profile(name: str) -> Profile:
    """A profile of the dev split (mixed-load.json)."""
    path = Path(__file__).parents[2] / "harness/specpilot_harness/bench/profiles/mixed-load.json"
    return load_profiles(path.read_text(), str(path))[name]
