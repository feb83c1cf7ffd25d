"""Anyone allowed to write the status subresource can put any JSON into `status.tuning` and
`status.tournament`. Whatever they write, the operator's next window must neither raise (Kopf would retry
it for ever, and the deployment would stop being tuned) nor step a state the tuner never wrote: the status
is resumed, or named and restarted at spec N, and the tuner steps on.

The statuses mutated here are real ones, taken from simulated deployments mid-round (a canary running, a
schedule proposed, a method canary analysed), so a mutation reaches the fields a tuner actually reads. The
values are what an API server can hold: JSON, so no NaN or infinity (it refuses those), but finite
extremes (1e300, 5e-324) that overflow or divide by zero in the tuner's arithmetic."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpilot.api.models import Canary, SpeculativeDeployment, Tuning
from specpilot.canary import resume as tuning_resume
from specpilot.tuning import Observations, TunerState, step
from specpilot.tuning import tournament as tour
from specpilot.tuning import tournament_state as tour_state
from specpilot_harness.bench import strategies, tournament as bench_tournament
from specpilot_harness.bench.cli import __file__ as bench_cli
from specpilot_harness.sim.profile import load_profiles

PROFILES = Path(bench_cli).parent / "profiles"
WINDOWS = 36
# Deterministic in CI: the same examples every run, none remembered between runs.
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
    | st.sampled_from([5e-324, 1e-300, 1e300, -1e300, 1.7e308]),  # finite, but square to overflow
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)


def _paths(value: Any, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, at + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out += _paths(v, at + (i,))
    return out


def _mutated(data: st.DataObject, status: dict[str, Any]) -> dict[str, Any]:
    """`status` with one to three values anywhere in it replaced by arbitrary JSON (the root stays an object:
    a status.tuning that is not one is refused by name, tests/unit/test_tuning_resume.py)."""
    out = copy.deepcopy(status)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from([p for p in _paths(out) if p]))
        parent = out
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = data.draw(JSON)
    return out


@cache
def _n_tuner_runs() -> list[tuple[SpeculativeDeployment, Tuning, dict[str, Any], Observations, float]]:
    """(spec, tuning, status.tuning, the next window's observations, its time) along two simulated rounds."""
    out = []
    for file, name, mode in (("article.json", "qwen35-27b-mtp-gsm8k", "single"),
                             ("mixed-load.json", "mix-dense-dspark-2009", "schedule")):
        prof = load_profiles((PROFILES / file).read_text())[name]
        sd = SpeculativeDeployment.model_validate({
            "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat"},
            "spec": {"model": "m", "speculative": {"method": prof.method, "numSpeculativeTokens": prof.default_n},
                     "tuning": {"enabled": True, "mode": mode, "candidates": list(range(prof.max_n + 1))}}})
        tuning = strategies.bench_tuning(prof, mode)
        dep = strategies._deployment(prof, 0, WINDOWS)
        state = TunerState.new(prof.method, prof.default_n, now=dep.now)
        for _ in range(WINDOWS):
            status = {**state.to_status(), "specN": prof.default_n}
            obs = dep.window()
            out.append((sd, tuning, status, obs, dep.now))
            state, action = step(state, tuning, obs, dep.now)
            dep.apply(action)
    return out


@cache
def _tournament_run() -> tuple[list[tour_state.Contender], Tuning, list[tuple[dict, TunerState, Observations, float]]]:
    t = next(x for x in bench_tournament.load_tournaments((PROFILES / "tournaments-article.json").read_text())
             if x.name == "qwen3-8b-math500-eagle3-vs-dspark-vs-off")
    dep = bench_tournament._deployment(t, 0, WINDOWS)
    contenders, profiles = bench_tournament.contenders(t), t.ordered()
    tuning = Tuning(enabled=True, canary=Canary(analysis_window="5m"))
    state, inner = tour_state.Tournament.new(contenders, dep.now), TunerState.new(contenders[0].method, contenders[0].n)
    out = []
    for _ in range(WINDOWS):
        obs = dep.window()
        out.append((state.to_status(), inner.copy(), obs, dep.now))
        state, inner, action = tour.step(state, inner, tuning, contenders, obs, dep.now)
        dep.apply(action, profiles[action.contender] if action.contender is not None else None)
    return contenders, tuning, out


@FUZZ
@given(st.data())
def test_any_status_tuning_is_resumed_or_named_and_the_tuner_steps_on(data: st.DataObject) -> None:
    sd, tuning, status, obs, now = data.draw(st.sampled_from(_n_tuner_runs()))
    state, problem = tuning_resume.resume(_mutated(data, status), sd, now)
    if problem is not None:
        assert (state.stable_n, state.canary_n) == (sd.spec.speculative.num_speculative_tokens, None)
    for k in range(3):
        state, _ = step(state, tuning, obs, now + 300.0 * (k + 1))
    assert tuning_resume.problem({**state.to_status(), "specN": status["specN"]}, sd) is None


@FUZZ
@given(st.data())
def test_any_status_tournament_is_resumed_or_restarted_and_the_tournament_steps_on(data: st.DataObject) -> None:
    contenders, tuning, run = _tournament_run()
    status, inner, obs, now = data.draw(st.sampled_from(run))
    state = tour_state.Tournament.from_status(_mutated(data, status), contenders, now)
    inner = inner.copy()
    for k in range(3):
        state, inner, _ = tour.step(state, inner, tuning, contenders, obs, now + 300.0 * (k + 1))
    assert tour_state.Tournament.from_status(state.to_status(), contenders, now).to_status() == state.to_status()
