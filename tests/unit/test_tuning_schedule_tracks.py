"""Schedule mode, controller side: a schedule the tuner chose reaches the track's engine config (vLLM's
num_speculative_tokens_per_batch_size), the Event and `kubectl get sd` say it, and a schedule in
status.tuning that vLLM would refuse is never rendered."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specpilot.api.models import SpeculativeDeployment
from specpilot.canary import resume as tuning_resume
from specpilot.controller.tuning import decision_events, status as ts
from specpilot.canary.tracks import TrackPlan, plan_from, plan_tracks
from specpilot.render import render
from specpilot.api.names import ENGINE_CONFIG_KEY, TRACK_LABEL
from specpilot.tuning import TunerState
from specpilot.tuning.observations import WindowRecord

SD = SpeculativeDeployment.model_validate({
    "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
    "metadata": {"name": "chat", "namespace": "ml"},
    "spec": {"model": "m", "speculative": {"method": "eagle3", "draftModel": "d", "numSpeculativeTokens": 3},
             "tuning": {"enabled": True, "mode": "schedule"}}})
SCHEDULE = [[1, 8, 5], [9, 63, 3], [64, 4096, 1]]


def _tuning(**changes: Any) -> dict[str, Any]:
    state = TunerState.new("eagle3", 3, None, 100.0)
    for key, value in changes.items():
        setattr(state, key, value)
    return {**state.to_status(), "specN": 3}


def _speculative(objects: list[dict[str, Any]], track: str) -> dict[str, Any]:
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["labels"][TRACK_LABEL] == track)
    return json.loads(cm["data"][ENGINE_CONFIG_KEY])["speculative"]


def test_the_canary_serves_its_schedule_and_the_stable_track_its_n() -> None:
    status = {"tuning": _tuning(phase="canary_starting", canary_n=5, canary_schedule=SCHEDULE)}
    plan = plan_tracks(SD, status)
    assert (plan.stable_n, plan.canary_n) == (3, 5)
    objects = render(SD, plan.stable_n, plan.canary_n, stable_schedule=None,
                     canary_schedule=[list(r) for r in plan.canary_schedule or ()])
    canary, stable = _speculative(objects, "canary"), _speculative(objects, "stable")
    assert canary["num_speculative_tokens"] == 5
    assert canary["num_speculative_tokens_per_batch_size"] == [list(r) for r in SCHEDULE]
    assert stable["num_speculative_tokens"] == 3 and not stable.get("num_speculative_tokens_per_batch_size")


def test_a_promoted_schedule_moves_to_the_stable_track_and_a_changed_one_rerenders() -> None:
    served = plan_from(True, {"tuning": _tuning(stable_n=5, stable_schedule=SCHEDULE)})
    assert served.canary_n is None and served.stable_schedule == tuple(tuple(r) for r in SCHEDULE)
    # The reconciler re-renders when the plan differs: a new schedule at the same N must count.
    other = plan_from(True, {"tuning": _tuning(stable_n=5, stable_schedule=[[1, 16, 5], [17, 4096, 2]])})
    assert other != served and other.stable_n == served.stable_n
    # With tuning off the spec's N runs, whatever the status says.
    assert plan_from(False, {"tuning": _tuning(stable_n=5, stable_schedule=SCHEDULE)}) == TrackPlan(None, None)


def test_status_says_the_served_schedule_and_the_event_names_it() -> None:
    state = TunerState.from_status(_tuning(stable_n=5, stable_schedule=SCHEDULE), method="eagle3", stable_n=3)
    patch = ts.status_patch({}, state, 3, ("True", "Converged", "m"), 1, None)
    assert patch["servedSchedule"] == "1-8:5 9-63:3 64+:1"
    assert ts.status_patch({}, TunerState.new("eagle3", 3), 3, ("True", "Observing", "m"), 1,
                           None)["servedSchedule"] is None
    entry = {"action": "start_canary", "n": 5, "round": 1, "reason": "expected 4%", "schedule": SCHEDULE}
    assert "N=5 schedule 1-8:5 9-63:3 64+:1" in decision_events.decision_event(entry).message


@pytest.mark.parametrize(("schedule", "named"), [
    ([[2, 8, 5], [9, 4096, 1]], "cannot run"),  # vLLM refuses a first range that does not start at 1
    ([[1, 8, 7]], "cannot run"),  # K above the started N
    ([[1, 8, 5], [4, 4096, 1]], "cannot run"),  # overlapping ranges
    ([[1, 8, "5"]], "canarySchedule holds a row"),
    ([[1, 8]], "canarySchedule holds a row"),
    ([[1, i, 1] for i in range(1, 40)], "at most 16 rows"),
    ({"1-8": 5}, "canarySchedule is not a list"),
])
def test_a_schedule_vllm_would_refuse_is_named_and_not_rendered(schedule: Any, named: str) -> None:
    tuning = _tuning(phase="analysing", canary_n=5)
    tuning["canarySchedule"] = schedule
    problem = tuning_resume.problem(tuning, SD)
    assert problem is not None and named in problem, problem
    assert plan_tracks(SD, {"tuning": tuning}) == TrackPlan(None, None)


def _window(seq: int, track: str, drafted: tuple[float, ...] | None) -> WindowRecord:
    return WindowRecord(seq=seq, track=track, n=5, drafts=100.0, accepted_per_pos=(80.0, 60.0, 30.0, 10.0, 5.0),
                        tokens_per_step=2.85, step_s=0.03, load=8.0, drafted_per_pos=drafted)


def test_status_says_when_a_scheduled_track_lacks_the_drafted_counter() -> None:
    def acceptance(state: TunerState) -> dict[str, Any] | None:
        patch = ts.status_patch({}, state, 3, ("True", "Analysing", "m"), 1, None)
        return next((c for c in patch["conditions"] if c["type"] == ts.ACCEPTANCE_MEASURED), None)

    blind = TunerState.new("eagle3", 3)
    blind.canary_n, blind.canary_schedule = 5, SCHEDULE
    blind.records = [_window(1, "stable", None), _window(1, "canary", None)]
    cond = acceptance(blind)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "DraftedPerPositionAbsent"
    assert cond["message"].startswith("canary pods serve a batch-size schedule")
    seen = blind.copy()
    seen.records = [_window(1, "canary", (100.0, 100.0, 40.0, 40.0, 40.0))]
    assert acceptance(seen)["status"] == "True"  # type: ignore[index]
    assert acceptance(TunerState.new("eagle3", 3)) is None  # no schedule served: nothing to say
