"""A pod's metrics are anyone's to forge, and a status anyone's to write. Counts like 1e300 are finite (the
scrape and the API server take them) but square to overflow in the acceptance estimate: before, one such
window raised out of the tuner's step on every later window (Kopf retries, the deployment is never tuned
again), and one such count in status.tuning did the same after a restart. Now a window's numbers are held
to what an engine can report, and a status beyond them is named and restarted at spec N."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpilot.api.models import Canary, SpeculativeDeployment, Tuning
from specpilot.canary import resume as tuning_resume
from specpilot.controller.tuning import observe
from specpilot.controller.tuning.metrics import observed_goodput
from specpilot.tuning import Observations, Phase, TrackWindow, TunerState, step
from specpilot.tuning import tournament as tour
from specpilot.tuning import tournament_state as tour_state
from specpilot.tuning.machine import load_mix
from specpilot.tuning.observations import MAX_LOAD, MAX_STEP_S, WindowRecord, implausible, record
from specpilot_harness.bench import strategies, tournament as bench_tournament
from specpilot_harness.bench.cli import __file__ as bench_cli
from specpilot_harness.sim.profile import load_profiles
from specpilot_runtime.vllm_metrics import Snapshot

BIG = 1e300
SD = SpeculativeDeployment.model_validate({
    "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat"},
    "spec": {"model": "m", "speculative": {"method": "eagle3", "draftModel": "d", "numSpeculativeTokens": 3},
             "tuning": {"enabled": True, "candidates": list(range(8))}}})


def _honest(scale: float = 1.0) -> Snapshot:
    """A minute of an EAGLE-3 pod at N=3: 6000 tokens, 2.8 per step, 20 ms steps, 8 sequences."""
    tokens = 6000.0
    return Snapshot(drafts=1000.0 * scale, accepted_tokens=1800.0 * scale,
                    accepted_per_pos=(800.0 * scale, 600.0 * scale, 400.0 * scale),
                    generation_tokens=tokens * scale, tpot_sum=0.02 / 2.8 * tokens / 2.8, tpot_count=tokens / 2.8,
                    running=8.0)


FORGED = [
    _honest(BIG),
    Snapshot(drafts=1e-300, accepted_tokens=1e308, accepted_per_pos=(1e308, 1e308), generation_tokens=1e308,
             tpot_sum=1e308, tpot_count=1e-5, running=1e308),
    Snapshot(drafts=10.0, accepted_tokens=1e6, accepted_per_pos=(1e6, 5.0), generation_tokens=100.0,
             tpot_sum=1e-320, tpot_count=1.0, running=2.0),
    Snapshot(drafts=10.0, accepted_tokens=5.0, accepted_per_pos=(5.0,), generation_tokens=100.0, running=BIG),
    Snapshot(drafts=5e-324, accepted_per_pos=(0.0, 0.0, 0.0), generation_tokens=6000.0, tpot_sum=10.0,
             tpot_count=2000.0, running=8.0),  # squares to 0
]


@pytest.mark.parametrize("delta", FORGED)
def test_a_forged_window_is_held_to_what_an_engine_reports_and_reads_back(delta: Snapshot) -> None:
    r = record(1, "stable", TrackWindow(n=3, delta=delta, ready_pods=1, desired_pods=1), 60.0)
    assert 1.0 <= r.tokens_per_step <= 4.0  # 1 + at most N accepted per draft
    assert 1.0 <= r.load <= MAX_LOAD
    assert r.step_s is None or r.step_s <= MAX_STEP_S
    assert all(a <= r.drafts for a in r.accepted_per_pos)
    text = json.dumps(r.to_json(), allow_nan=False)  # what the API server takes
    assert WindowRecord.from_json(json.loads(text)) == r


def test_the_tuner_steps_on_through_forged_windows_and_its_status_resumes() -> None:
    tuning = Tuning.model_validate({"enabled": True, "candidates": list(range(8))})
    state = TunerState.new("eagle3", 3, now=0.0)
    forged = iter(FORGED * 4)
    for i in range(40):
        stable = next(forged) if i % 5 >= 3 else _honest()
        canary = None if state.canary_n is None else TrackWindow(n=state.canary_n, delta=_honest(), ready_pods=1,
                                                                 desired_pods=1)
        obs = Observations(window_s=60.0, stable=TrackWindow(n=state.stable_n, delta=stable, ready_pods=1,
                                                             desired_pods=1), canary=canary)
        state, _ = step(state, tuning, obs, now=60.0 * (i + 1))
        status = json.loads(json.dumps({**state.to_status(), "specN": 3}, allow_nan=False))
        assert tuning_resume.problem(status, SD) is None
    assert state.phase != Phase.OBSERVING or state.round > 0  # it kept tuning: a round was planned


@pytest.mark.parametrize("delta", FORGED)
def test_a_track_forging_every_window_leaves_the_tuner_stepping(delta: Snapshot) -> None:
    tuning = Tuning.model_validate({"enabled": True, "candidates": list(range(8))})
    state = TunerState.new("eagle3", 3, now=0.0)
    for i in range(12):
        obs = Observations(window_s=60.0, stable=TrackWindow(n=state.stable_n, delta=delta, ready_pods=1,
                                                             desired_pods=1))
        state, _ = step(state, tuning, obs, now=60.0 * (i + 1))
    assert tuning_resume.problem(json.loads(json.dumps({**state.to_status(), "specN": 3}, allow_nan=False)),
                                 SD) is None


@pytest.mark.parametrize("key, value", [("drafts", BIG), ("b", BIG), ("t", 5e-324), ("l", 1e6), ("acc", [BIG])])
def test_a_status_count_beyond_what_an_engine_reports_is_named(key: str, value: object) -> None:
    r = record(1, "stable", TrackWindow(n=3, delta=_honest(), ready_pods=1, desired_pods=1), 60.0).to_json()
    with pytest.raises(ValueError, match=f"record {key}"):
        WindowRecord.from_json({**r, key: value})


# Any finite counter values, typical and extreme, in windows of any length, with or without a canary.
_NUM = st.floats(0, 1e6) | st.sampled_from([0.0, 5e-324, 1e-300, 0.5, 1e15, BIG, 1.7e308])
_SNAP = st.builds(Snapshot, drafts=_NUM, accepted_tokens=_NUM, accepted_per_pos=st.lists(_NUM, max_size=10).map(tuple),
                  drafted_per_pos=st.none() | st.lists(_NUM, max_size=10).map(tuple), generation_tokens=_NUM,
                  tpot_sum=_NUM, tpot_count=_NUM, running=_NUM)
_WINDOW = st.tuples(st.sampled_from([1e-9, 1.0, 300.0, 1e9]), _SNAP, st.integers(0, 4), st.none() | _SNAP)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(_WINDOW, min_size=1, max_size=25), st.sampled_from(["single", "schedule"]))
def test_any_counters_leave_the_tuner_stepping_and_its_status_readable(windows: list, mode: str) -> None:
    tuning = Tuning.model_validate({"enabled": True, "mode": mode, "candidates": list(range(8))})
    state = TunerState.new("eagle3", 3, now=0.0)
    for i, (window_s, stable, pods, canary) in enumerate(windows):
        c = None if canary is None or state.canary_n is None else \
            TrackWindow(n=state.canary_n, delta=canary, ready_pods=1, desired_pods=1)
        obs = Observations(window_s=window_s, stable=TrackWindow(n=state.stable_n, delta=stable, ready_pods=pods,
                                                                 desired_pods=pods), canary=c, stable_replicas=1)
        state, _ = step(state, tuning, obs, now=300.0 * (i + 1))
        status = json.loads(json.dumps({**state.to_status(), "specN": 3}, allow_nan=False))
        assert tuning_resume.problem(status, SD) is None


def _random_counts(rng: random.Random) -> Snapshot:
    def num() -> float:
        return rng.choice([0.0, 5e-324, 1e-300, 1e15, BIG, rng.uniform(0, 10), rng.uniform(0, 1e6)])
    return Snapshot(drafts=num(), accepted_tokens=num(), generation_tokens=num(), tpot_sum=num(),
                    tpot_count=num(), running=num(),
                    accepted_per_pos=tuple(num() for _ in range(rng.randint(0, 10))))


@pytest.mark.parametrize("seed", range(3))
def test_a_method_tournament_on_any_counters_keeps_a_status_that_reads_back(seed: int) -> None:
    """Before, a method canary judged on nothing comparable kept bounds of -inf..inf, which no status holds."""
    t = next(x for x in bench_tournament.load_tournaments(
        (Path(bench_cli).parent / "profiles" / "tournaments-article.json").read_text())
        if x.name == "qwen3-8b-math500-eagle3-vs-dspark-vs-off")
    contenders = bench_tournament.contenders(t)
    tuning = Tuning(enabled=True, canary=Canary(analysis_window="5m"))
    state, inner = tour_state.Tournament.new(contenders, 0.0), TunerState.new(contenders[0].method, contenders[0].n)
    rng = random.Random(seed)
    for i in range(30):
        n = state.canary_n if state.canary is not None else inner.canary_n
        method = contenders[state.canary].method if state.canary is not None else inner.method
        canary = None if n is None else TrackWindow(n=n, delta=_random_counts(rng), ready_pods=1, desired_pods=1,
                                                    method=method)
        obs = Observations(window_s=rng.choice([1e-9, 60.0, 1e9]), canary=canary, stable_replicas=1,
                           stable=TrackWindow(n=inner.stable_n, delta=_random_counts(rng), ready_pods=1,
                                              desired_pods=1, method=inner.method))
        state, inner, _ = tour.step(state, inner, tuning, contenders, obs, 300.0 * (i + 1))
        status = json.loads(json.dumps(state.to_status(), allow_nan=False))
        assert tour_state.Tournament.from_status(status, contenders, 300.0 * (i + 1)).to_status() == status


@pytest.mark.parametrize("delta, why", [
    (_honest(BIG), "tokens or drafts a second per pod, more than any engine emits"),
    (Snapshot(drafts=10.0, accepted_tokens=1e6, accepted_per_pos=(1e6,), generation_tokens=100.0),
     "accepted tokens from 10 drafts of at most 3"),
    (Snapshot(drafts=10.0, accepted_tokens=5.0, accepted_per_pos=(2.0, 11.0), generation_tokens=100.0),
     "a position accepted more tokens than the 10 drafts"),
    (Snapshot(drafts=10.0, generation_tokens=100.0, tpot_sum=1e-320, tpot_count=1.0), "time per output token"),
    (Snapshot(drafts=10.0, generation_tokens=100.0, running=BIG), "running sequences per pod"),
    (Snapshot(drafts=10.0, generation_tokens=100.0, tpot_sum=float("nan"), tpot_count=1.0), "not finite"),
])
def test_a_window_no_engine_could_count_is_named_and_not_measured(delta: Snapshot, why: str) -> None:
    tuning = Tuning.model_validate({"enabled": True, "candidates": list(range(8))})
    state = TunerState.new("eagle3", 3, now=0.0)
    for i in range(3):
        state, _ = step(state, tuning, Observations(window_s=60.0, stable=TrackWindow(
            n=3, delta=_honest(), ready_pods=1, desired_pods=1)), now=60.0 * (i + 1))
    loads = load_mix(state)
    forged = Observations(window_s=60.0, stable=TrackWindow(n=3, delta=delta, ready_pods=1, desired_pods=1))
    assert why in observe.implausible_counters(forged)["stable"] and list(observe.implausible_counters(forged)) == ["stable"]
    assert observed_goodput(forged.stable, 60.0) is None  # nor is it exported as the track's goodput
    state, _ = step(state, tuning, forged, now=240.0)
    assert load_mix(state) == loads and all(r.seq != state.seq for r in state.records)


def test_every_simulated_window_is_one_an_engine_could_count() -> None:
    """The bound is for broken and forged counters only: no window of the simulated engines meets it."""
    profiles = load_profiles((Path(bench_cli).parent / "profiles" / "mixed-load.json").read_text())
    for prof in list(profiles.values())[:4]:
        dep = strategies._deployment(prof, 0, 48)
        state, tuning = TunerState.new(prof.method, prof.default_n, now=dep.now), strategies.bench_tuning(prof, "schedule")
        for _ in range(48):
            obs = dep.window()
            assert [w for w in (obs.stable, obs.canary) if w is not None and implausible(w, obs.window_s)] == []
            state, action = step(state, tuning, obs, dep.now)
            dep.apply(action)
