"""A `status.tuning` whose N are outside what the spec lets the tuner run is not the tuner's: the tuner only
ever serves spec N or an N of `spec.tuning.candidates` (else the method's range), and batch-size schedules
whose K are candidates. Anyone who may patch the status subresource could otherwise set `stableN: 11,
phase: converged` and the reconciler moved the pods to N=11 and the tuner held it as converged. Now the
reconciler renders spec N without a canary and the tuning loop restarts from spec N, naming the field
(Tuning=False/TuningStateInvalid, one Warning Event, a `reset` history entry)."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.models import SpeculativeDeployment
from specpilot.canary import resume as tuning_resume
from specpilot.canary.tracks import TrackPlan, plan_tracks
from specpilot.tuning import TunerState
from specpilot.tuning.kinds import Phase


def deployment(tuning: dict[str, Any], n: int = 3, **alternative: Any) -> SpeculativeDeployment:
    spec: dict[str, Any] = {"model": "m", "speculative": {"method": "ngram", "numSpeculativeTokens": n},
                            "tuning": {"enabled": True, **tuning}}
    if alternative:
        spec["tuning"]["alternatives"] = [alternative]
    return SpeculativeDeployment.model_validate({
        "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat"},
        "spec": spec})


SD = deployment({"candidates": [3, 5, 7]})


def written(stable_n: int = 5, canary_n: int | None = None, method: str = "ngram", **changes: Any) -> dict[str, Any]:
    """A state as the tuner writes it (converged at `stable_n`, or analysing a canary at `canary_n`)."""
    state = TunerState.new(method, stable_n, None, 100.0)
    state.phase, state.seq = (Phase.ANALYSING if canary_n is not None else Phase.CONVERGED), 12
    state.canary_n = canary_n
    return {**state.to_status(), "specN": 3, **changes}


@pytest.mark.parametrize(("tuning", "named"), [
    (written(11), "stableN 11 is not among the N the spec allows (3, 5, 7)"),
    (written(0), "stableN 0 is not among"),  # 0 (speculation off) is a candidate only when listed
    (written(5, 11), "canaryN 11 is not among the N the spec allows (3, 5, 7)"),
    (written(7, stableSchedule=[[1, 8, 6], [9, 4096, 5]]), "stableSchedule K=6 is not among"),
    (written(5, 7, canarySchedule=[[1, 8, 7], [9, 4096, 4]]), "canarySchedule K=4 is not among"),
])
def test_n_outside_the_candidates_is_named_and_the_tuner_restarts_at_spec_n(tuning: dict[str, Any],
                                                                           named: str) -> None:
    found = tuning_resume.problem(tuning, SD)
    assert found is not None and named in found, found
    state, problem = tuning_resume.resume(tuning, SD, 200.0)
    assert problem == found
    assert (state.stable_n, state.canary_n, state.phase, state.seq) == (3, None, "observing", 0)
    (entry,) = state.history
    assert entry["action"] == "reset" and named in entry["reason"] and "spec N=3" in entry["reason"]
    assert plan_tracks(SD, {"tuning": tuning}) == TrackPlan(None, None)  # the pods stay at spec N
    assert tuning_resume.problem({**state.to_status(), "specN": 3}, SD) is None  # the fresh state resumes


def test_the_n_the_tuner_writes_resume() -> None:
    for tuning in (written(5), written(7), written(5, 7), written(3, 5),
                   written(7, stableSchedule=[[1, 8, 7], [9, 4096, 5]]),
                   written(5, 7, canarySchedule=[[1, 8, 7], [9, 4096, 3]])):
        assert tuning_resume.problem(tuning, SD) is None, tuning
    assert plan_tracks(SD, {"tuning": written(5, 7)}) == TrackPlan(5, 7)


def test_spec_n_is_always_the_stables_even_outside_the_candidates() -> None:
    # The tuner starts at spec N, and a hand-set spec N restarts it there: listed or not.
    sd = deployment({"candidates": [5, 7]}, n=3)
    assert tuning_resume.problem(written(3), sd) is None
    assert tuning_resume.problem(written(3, 3), sd) == "canaryN 3 is not among the N the spec allows (5, 7)"


def test_without_candidates_the_methods_range_is_the_bound() -> None:
    sd = deployment({})  # ngram: 0..8
    assert tuning_resume.problem(written(8), sd) is None and tuning_resume.problem(written(0), sd) is None
    found = tuning_resume.problem(written(9), sd)
    assert found == "stableN 9 is not among the N the spec allows (0..8)", found


def test_an_alternatives_candidates_bound_its_state() -> None:
    sd = deployment({"candidates": [3, 5, 7]}, method="suffix", numSpeculativeTokens=4, candidates=[4, 6])
    suffix = sd.for_contender(1)
    assert tuning_resume.problem(written(6, method="suffix"), suffix) is None
    assert "stableN 5 is not among the N the spec allows (4, 6)" in (
        tuning_resume.problem(written(5, method="suffix"), suffix) or "")


def test_a_seam_write_outside_the_candidates_renders_spec_n() -> None:
    # status.tuning as another writer of the seam may put it (no method, no version) is rendered as written:
    # an N the spec does not allow is not.
    assert plan_tracks(SD, {"tuning": {"stableN": 11}}) == TrackPlan(None, None)
    assert plan_tracks(SD, {"tuning": {"stableN": 5, "canaryN": 6}}) == TrackPlan(None, None)
    assert plan_tracks(SD, {"tuning": {"stableN": 5, "canaryN": 7}}) == TrackPlan(5, 7)
    state, problem = tuning_resume.resume({"stableN": 11}, SD, 200.0)
    assert problem is not None and "stableN 11" in problem and state.stable_n == 3
