"""The tuning loop's pure half: what the cluster shows -> Observations; the tuner's answer -> the status
patch (which is what makes the reconciler create, roll or remove Deployments), the Tuning condition and
the Events."""

from __future__ import annotations

from specpilot.api.models import Speculative
from specpilot.controller.tuning import decision_events, observe, status as ts
from specpilot.canary.tracks import TrackPlan, plan_from
from specpilot.scrape.pods import PodScrape, PodTarget
from specpilot.scrape.windows import TrackDelta
from specpilot.tuning import Action, TrackWindow, TunerState
from specpilot_runtime.live import Arm, LiveConfig
from specpilot_runtime.vllm_metrics import Snapshot


def _deployment(track: str, n: int, replicas: int = 1) -> dict:
    return {"metadata": {"name": "chat" if track == "stable" else "chat-canary",
                         "labels": {"specpilot.io/track": track}},
            "spec": {"replicas": replicas,
                     "template": {"metadata": {"labels": {"specpilot.io/num-speculative-tokens": str(n)}}}}}


def _target(name: str, track: str, n: int, ready: bool = True) -> PodTarget:
    return PodTarget(name, f"uid-{name}", track, n, "http://x/metrics", ready)


DELTA = Snapshot(drafts=100, accepted_tokens=150, accepted_per_pos=(80.0, 50.0, 20.0), generation_tokens=400,
                 tpot_sum=1.0, tpot_count=100)


def test_observations_take_each_track_at_its_deployments_n() -> None:
    deps = [_deployment("stable", 3, replicas=2), _deployment("canary", 7)]
    targets = [_target("s1", "stable", 3), _target("s2", "stable", 3), _target("old", "stable", 5),
               _target("c1", "canary", 7)]
    deltas = {("stable", 3): TrackDelta(3, DELTA, 2, 0), ("stable", 5): TrackDelta(5, DELTA, 1, 0),
              ("canary", 7): TrackDelta(7, DELTA, 1, 1)}
    obs = observe.observations(deps, targets, deltas, window_s=6.0, replicas=2)
    assert obs.window_s == 6.0
    assert obs.stable is not None and (obs.stable.n, obs.stable.ready_pods, obs.stable.desired_pods) == (3, 2, 2)
    assert obs.stable_replicas == 2
    assert obs.canary is not None and (obs.canary.n, obs.canary.errors) == (7, 1.0)


def test_a_starting_canary_is_reported_with_no_ready_pods_and_no_counts() -> None:
    obs = observe.observations([_deployment("stable", 3), _deployment("canary", 7)],
                          [_target("s1", "stable", 3), _target("c1", "canary", 7, ready=False)],
                          {("stable", 3): TrackDelta(3, DELTA, 1, 0)}, 6.0, 1)
    assert obs.canary is not None and obs.canary.ready_pods == 0 and obs.canary.delta == Snapshot()


def test_no_canary_deployment_means_no_canary_track() -> None:
    obs = observe.observations([_deployment("stable", 3)], [_target("s1", "stable", 3)],
                          {("stable", 3): TrackDelta(3, DELTA, 1, 0)}, 6.0, 1)
    assert obs.canary is None


def test_under_switchback_a_canary_of_its_own_pods_is_observed_beside_the_switching_stable() -> None:
    # The table check's static pods (or a restart at a higher N): not an arm of the stable pods, a track.
    live = LiveConfig((Arm.uniform(3),), (2.0, 6.0), seed=1)
    plan = TrackPlan(3, 3, live=live, canary_static=True)
    obs = observe.observations([_deployment("stable", 7), _deployment("canary", 3)],
                               [_target("s1", "stable", 7), _target("c1", "canary", 3)],
                               {("stable", 7): TrackDelta(7, DELTA, 1, 0), ("canary", 3): TrackDelta(3, DELTA, 1, 0)},
                               6.0, 1, plan=plan)
    assert obs.stable is not None and obs.stable.n == 3 and not obs.switchback
    assert obs.canary is not None and (obs.canary.n, obs.canary.ready_pods) == (3, 1)


def test_failed_scrapes_are_named_in_the_problem() -> None:
    ok = PodScrape(_target("a", "stable", 3), Snapshot())
    bad = PodScrape(_target("b", "canary", 7), None, "timed out after 5.0s")
    assert observe.scrape_problem([ok]) is None
    assert observe.scrape_problem([ok, bad]) == "b: timed out after 5.0s"


def _state(**changes: object) -> TunerState:
    state = TunerState.new("mtp", 3, now=0.0)
    for key, value in changes.items():
        setattr(state, key, value)
    return state


def test_the_status_patch_drives_the_tracks_the_reconciler_renders() -> None:
    """start_canary -> canary at N; promote -> stable at the new N and no canary; rollback -> stable as it was."""
    cases = [(_state(phase="canary_starting", canary_n=7), (3, 7)),
             (_state(phase="promoting", stable_n=7), (7, None)),
             (_state(phase="rolling_back"), (3, None))]
    for state, (stable_n, canary_n) in cases:
        patch = ts.status_patch({}, state, 3, ("True", "Analysing", "m"), 1, None)
        plan = plan_from(True, patch)
        assert (plan.stable_n, plan.canary_n) == (stable_n, canary_n)
        assert plan_from(False, patch) == plan_from(False, {})  # tuning off: spec N, no canary


def test_status_patch_sets_the_tuning_condition_and_accepted_length() -> None:
    old = {"conditions": [{"type": "Ready", "status": "True", "reason": "AllReplicasReady", "message": "",
                           "lastTransitionTime": "t0"}]}
    patch = ts.status_patch(old, _state(), 3, ("True", "Observing", "observing the stable track"), 4,
                            TrackWindow(3, DELTA, 1, 1))
    assert patch["acceptedLength"] == 2.5
    assert patch["tuning"]["specN"] == 3 and patch["tuning"]["stableN"] == 3
    types = {c["type"]: c for c in patch["conditions"]}
    assert types["Ready"]["lastTransitionTime"] == "t0"
    assert (types["Tuning"]["status"], types["Tuning"]["reason"], types["Tuning"]["observedGeneration"]) \
        == ("True", "Observing", 4)


def test_metrics_problems_set_only_the_condition() -> None:
    patch = ts.condition_patch({}, ts.METRICS_UNAVAILABLE, "no decision this window: p: timed out", 2)
    assert set(patch) == {"conditions"}
    assert patch["conditions"][0]["reason"] == "MetricsUnavailable" and patch["conditions"][0]["status"] == "False"


def test_a_hand_edit_of_n_restarts_the_tuner_at_it_and_keeps_the_history() -> None:
    status = {"specN": 3, "stableN": 7}
    assert not ts.edited_by_hand(status, 3) and not ts.edited_by_hand({}, 5)
    assert ts.edited_by_hand(status, 5)
    state = _state(stable_n=7, phase="analysing", canary_n=5, round=2,
                   history=[{"action": "promote", "n": 7}])
    fresh = ts.restart_at_spec(state, Speculative(method=state.method, num_speculative_tokens=5), now=10.0)
    assert (fresh.stable_n, fresh.canary_n, fresh.phase, fresh.round) == (5, None, "observing", 1)
    assert fresh.history[0] == {"action": "promote", "n": 7} and fresh.history[-1]["action"] == "reset"


def test_tuning_condition_names_the_phase_and_the_tracks() -> None:
    status, reason, message = ts.tuning_condition(_state(phase="analysing", canary_n=7, round=2),
                                                  Action("keep_analysing", 7, "better by 3% so far"))
    assert (status, reason) == ("True", "Analysing")
    assert message == "round 2, stable N=3, canary N=7: better by 3% so far"
    _, _, message = ts.tuning_condition(_state(phase="analysing", canary_n=3, canary_static=True),
                                        Action("keep_analysing", 3, "table check: better by 9% so far"))
    assert message == "round 1, stable N=3, canary N=3 (static pods): table check: better by 9% so far"
    _, _, message = ts.tuning_condition(_state(stable_static=True), Action("hold", 3, "converged"))
    assert message == "round 1, stable N=3 (static pods): converged"


def test_new_history_entries_become_events_with_their_numbers() -> None:
    old = [{"seq": 1, "action": "start_canary", "n": 7}]
    rollback = {"seq": 5, "round": 1, "action": "rollback", "n": 7, "reason": "worse by 4.0%",
                "numbers": {"verdict": {"decision": "rollback", "gain_pct": -4.0}}}
    assert decision_events.new_entries(old, old + [rollback]) == [rollback]
    assert decision_events.new_entries(old, old) == []
    event = decision_events.decision_event(rollback)
    assert (event.event_type, event.reason) == ("Warning", "TuningRollback")
    assert "worse by 4.0%" in event.message and "gain_pct=-4.0" in event.message
    start = decision_events.decision_event({"action": "start_canary", "n": 7, "round": 1, "reason": "r",
                               "numbers": {"stable_n": 3, "gain_pct": {"0": -40.0, "7": 12.5}}})
    assert (start.event_type, start.reason) == ("Normal", "TuningStartCanary")
    assert "against stable N=3: N=0 -40.0%, N=7 +12.5%" in start.message
    placed = decision_events.decision_event({"action": "start_canary", "n": 7, "round": 1, "reason": "r"},
                               placement="1 pod in place of 1 of the 3 stable (canary.mode auto)")
    assert "r; 1 pod in place of 1 of the 3 stable (canary.mode auto)" in placed.message
    assert "canary.mode" not in decision_events.decision_event(rollback, placement="1 pod beside the 3 stable").message
    # A probe's rollback is no failure: the canary won, and what it measured points to a better one.
    probe = decision_events.decision_event({"action": "rollback", "n": 0, "round": 1, "probe": True,
                               "reason": "probe: schedule 1-2:2 3-16:1 17+:0 expected 59.7% over stable, N=0 55.8%"})
    assert (probe.event_type, probe.reason) == ("Normal", "TuningProbe") and "probe: schedule" in probe.message


def test_old_pods_at_the_same_n_are_not_the_tracks_during_a_rollout() -> None:
    # Another method at the same N rolls the stable Deployment: its pods at N=7 are not all the new template's.
    deployment = {**_deployment("stable", 7), "status": {"updatedReplicas": 1, "observedGeneration": 2}}
    deployment["metadata"] = {**deployment["metadata"], "generation": 2}
    targets = [_target(f"s{i}", "stable", 7) for i in range(3)]
    assert observe.track_window(deployment, targets, {}) is not None
    assert observe.observations([deployment], targets, {}, window_s=6.0, replicas=1).stable.ready_pods == 0  # no delta yet
    stale = {**deployment, "metadata": {**deployment["metadata"], "generation": 3}}
    delta = {("stable", 7): TrackDelta(7, DELTA, 3, 0)}
    assert observe.observations([stale], targets, delta, window_s=6.0, replicas=1).stable.ready_pods == 0
    assert observe.observations([deployment], targets, delta, window_s=6.0, replicas=1).stable.ready_pods == 1
