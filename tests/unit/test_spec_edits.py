"""A user may edit spec.tuning at any window: candidates, mode, margins, budgets, the canary's windows. Each
edit is a level the tuner must act on from the next window: no window raises (Kopf would retry it for ever),
and every canary started and every N promoted is one the spec allows at that time, a schedule only in
schedule mode. Runs on the benchmark's simulated deployments, edits drawn by Hypothesis."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpilot.api.models import Canary, Tuning
from specpilot.tuning import ActionKind, TunerState, step
from specpilot.tuning.machine import candidates
from specpilot_harness.bench import strategies
from specpilot_harness.bench.cli import __file__ as bench_cli
from specpilot_harness.sim.profile import Profile, load_profiles

WINDOWS = 48


@cache
def _profiles() -> list[Profile]:
    folder = Path(bench_cli).parent / "profiles"
    article = load_profiles((folder / "article.json").read_text())
    mixed = load_profiles((folder / "mixed-load.json").read_text())
    return [article["qwen35-27b-mtp-gsm8k"], article["qwen36-35b-a3b-dflash-busy"], mixed["mix-dense-dspark-2009"]]


def _tuning(data: st.DataObject, max_n: int) -> Tuning:
    ns = data.draw(st.lists(st.integers(0, max_n), min_size=1, max_size=max_n + 1, unique=True))
    return Tuning(enabled=data.draw(st.sampled_from([True, True, True, False])),
                  candidates=sorted(ns), objective=data.draw(st.sampled_from(["throughput", "latency"])),
                  canary=Canary(analysis_window="5m", windows=data.draw(st.integers(1, 20))),
                  promotion_margin=data.draw(st.sampled_from([0.0, 0.01, 0.02, 0.1])),
                  confidence=data.draw(st.sampled_from([0.5, 0.95, 0.99])),
                  cooldown=data.draw(st.sampled_from(["0s", "10m", "1h"])),
                  mode=data.draw(st.sampled_from(["single", "schedule"])),
                  max_canaries_per_round=data.draw(st.integers(1, 8)),
                  max_windows_per_round=data.draw(st.integers(1, 96)))


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_spec_tuning_edited_at_any_window_is_obeyed_from_the_next(data: st.DataObject) -> None:
    prof = data.draw(st.sampled_from(_profiles()))
    tuning = strategies.bench_tuning(prof, data.draw(st.sampled_from(["single", "schedule"])))
    dep = strategies._deployment(prof, data.draw(st.integers(0, 99)), WINDOWS)
    state = TunerState.new(prof.method, prof.default_n, now=dep.now)
    edits = set(data.draw(st.lists(st.integers(1, WINDOWS - 1), max_size=4)))
    for w in range(WINDOWS):
        if w in edits:
            tuning = _tuning(data, prof.max_n)
        state, action = step(state, tuning, dep.window(), dep.now)
        if action.kind in (ActionKind.START_CANARY, ActionKind.PROMOTE):
            assert action.n in candidates(state, tuning), (w, action, tuning.candidates)
            assert action.schedule is None or tuning.mode == "schedule", (w, action)
        dep.apply(action)
