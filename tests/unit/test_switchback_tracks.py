"""Switchback, controller side: the tuner's canary at an N the stable pods were started for becomes the
second arm of live.json, not a Deployment; the stable pods' window splits into the two arms' windows; the
status says what is served and what the pods were started at."""

from __future__ import annotations

import json
from typing import Any

from specpilot.api.models import SpeculativeDeployment
from specpilot.api.names import live_config_map_name
from specpilot.canary.tracks import plan_tracks
from specpilot.controller import status as st
from specpilot.controller.tuning.observe import observations
from specpilot.render import render
from specpilot.scrape.pods import PodTarget
from specpilot.scrape.windows import TrackDelta
from specpilot.tuning import TunerState
from specpilot_runtime.live import LIVE_FILE, SwitchbackCounters, exposition, parse_live
from specpilot_runtime.vllm_metrics import parse


def _sd(method: str = "mtp", **tuning: Any) -> SpeculativeDeployment:
    return SpeculativeDeployment.model_validate({
        "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
        "metadata": {"name": "chat", "namespace": "ml", "uid": "u1"},
        "spec": {"model": "m", "speculative": {"method": method, "numSpeculativeTokens": 3},
                 "tuning": {"enabled": True, "measure": "switchback", "candidates": [1, 3, 5, 7], **tuning}}})


def _status(**changes: Any) -> dict[str, Any]:
    state = TunerState.new("mtp", 3, None, 100.0)
    for key, value in changes.items():
        setattr(state, key, value)
    return {"tuning": {**state.to_status(), "specN": 3}}


def _kinds(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objects)


def test_a_canary_under_the_started_n_is_an_arm_not_a_deployment() -> None:
    plan = plan_tracks(_sd(), _status(phase="canary_starting", canary_n=5))
    assert plan.canary_live and plan.canary_pods_n is None and plan.live is not None
    assert [a.key for a in plan.live.arms] == ["1-65536:3", "1-65536:5"]
    objects = render(_sd(), plan.stable_n, plan.canary_pods_n, live=plan.live)
    assert ("Deployment", "chat-canary") not in _kinds(objects)
    live = next(o for o in objects if o["metadata"]["name"] == live_config_map_name("chat"))
    served = parse_live(live["data"][LIVE_FILE].encode(), 7, "mtp")
    assert [a.key for a in served.arms] == ["1-65536:3", "1-65536:5"]
    assert served.dwell_s == (2.0, 6.0)  # a 5-minute window: visits of 2-6 s


def test_promoting_an_arm_changes_live_json_and_not_the_pods() -> None:
    before = render(_sd(), *(lambda p: (p.stable_n, p.canary_pods_n))(plan_tracks(_sd(), _status())))
    plan = plan_tracks(_sd(), _status(stable_n=5))
    after = render(_sd(), plan.stable_n, plan.canary_pods_n, live=plan.live)
    deployment = [o for o in before if o["kind"] == "Deployment"]
    assert deployment == [o for o in after if o["kind"] == "Deployment"]
    assert plan.live is not None and [a.key for a in plan.live.arms] == ["1-65536:5"]


def test_a_parallel_drafter_s_n_is_a_canary_deployment() -> None:
    block = plan_tracks(_sd("dspark", candidates=[3, 5]), {"tuning": {**_dspark_status(), "specN": 3}})
    assert block.live is None and block.canary_pods_n == 5


def _dspark_status() -> dict[str, Any]:
    state = TunerState.new("dspark", 3, None, 100.0)
    state.phase, state.canary_n = "canary_starting", 5  # type: ignore[assignment]
    return state.to_status()


def test_the_stable_pods_window_splits_into_the_arms_windows() -> None:
    counters = SwitchbackCounters()
    for _ in range(502):
        counters.record_step("1-65536:3", 8, 0.010, 8 + 16, 24, 16)
    for _ in range(502):
        counters.record_step("1-65536:5", 8, 0.012, 8 + 24, 40, 24)
    snap = parse(exposition(counters, None, [], 7, []))
    plan = plan_tracks(_sd(), _status(phase="analysing", canary_n=5))
    deployment = {"metadata": {"labels": {"specpilot.io/track": "stable"}},
                  "spec": {"replicas": 1, "template": {"metadata": {"labels": {
                      "specpilot.io/num-speculative-tokens": "7"}}}}}
    target = PodTarget(name="p", uid="u", url="http://x", track="stable", n=7, ready=True)
    obs = observations([deployment], [target], {("stable", 7): TrackDelta(7, snap, 1, 0)}, 60.0, 1, plan=plan)
    assert obs.switchback and obs.stable is not None and obs.canary is not None
    assert (obs.stable.n, obs.canary.n) == (3, 5)
    s, c = obs.stable.delta, obs.canary.delta
    assert 1 + s.accepted_tokens / s.drafts == 3.0 and 1 + c.accepted_tokens / c.drafts == 4.0


def test_the_status_reports_the_arm_served_and_the_started_n() -> None:
    plan = plan_tracks(_sd(), _status(phase="analysing", canary_n=5))
    rollout = st.Rollout(desired=1, replicas=1, ready=1, updated=1, complete=True, deadline_exceeded=False,
                         stable_n=7, canary_n=None)
    served = st.served(rollout, plan)
    assert (served.stable_n, served.canary_n) == (3, 5)
    assert st.live_status(rollout, plan) == {"startedNumSpeculativeTokens": 7,
                                             "liveArms": "1-65536:3 | 1-65536:5"}
    assert json.dumps(st.live_status(rollout, plan_tracks(_sd(measure="canary"), _status())))  # fields cleared
