"""The table check (tuning/rules/table_check.py): once a switchback round converges, static pods at the K in
force are judged against the switching pods; proven better, the deployment falls back to static pods and
nothing is measured live any more; otherwise the table is kept and not checked again for that stable."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specpilot.api.models import Canary, Tuning
from specpilot.api.switchback import tuner_tuning
from specpilot.api.validate import load
from specpilot.canary.tracks import plan_tracks
from specpilot.render import render
from specpilot.tuning import ActionKind, Observations, Phase, TrackWindow, TunerState
from specpilot.tuning.constants import LIVE_ARM_SHARE, RESTART_WINDOWS
from specpilot.tuning.context import Planner, Window
from specpilot.tuning.judge import Verdict
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.machine import step
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.rules import analysing, converged
from specpilot.tuning.rules.table_check import static_n, table_check_due, table_check_ruled
from specpilot.tuning.switchback import live_arm, trial_costs
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.vllm_metrics import Snapshot

LIVE = Tuning(enabled=True, candidates=list(range(8)), measure="switchback", table_check="on",
              canary=Canary(analysis_window="5m"), cooldown="10m")
STABLE = TrackWindow(5, Snapshot(), ready_pods=2, desired_pods=2)


def _window(state: TunerState, tuning: Tuning = LIVE, canary: TrackWindow | None = None) -> Window:
    def no_plan(*args: Any) -> Any:
        raise AssertionError("the table check plans nothing")
    return Window(state, tuning, Observations(300.0, STABLE, canary), 5000.0, Planner(no_plan, no_plan))


def _converged(n: int = 5, schedule: list[list[int]] | None = None, loads: tuple[float, ...] = (8.0,)) -> TunerState:
    state = TunerState.new("mtp", n)
    state.stable_schedule = schedule
    state.records = [WindowRecord(i, "stable", n, 100.0, (0.8, 0.6, 0.4, 0.3, 0.2)[:n], 2.5, 0.02, load)
                     for i, load in enumerate(loads * 4)]
    state.seq = len(state.records)
    state.enter(Phase.CONVERGED, 4000.0)
    state.converged_at = 4000.0
    return state


def test_a_converged_switchback_round_checks_its_table_with_static_pods_first() -> None:
    state = _converged()
    action = converged.CONVERGED_RULES[0](converged.Converged(_window(state)))
    assert action is not None and action.kind == ActionKind.START_CANARY and action.static and action.n == 5
    assert "table check" in action.reason and state.canary_static and state.phase == Phase.CANARY_STARTING
    # The check is a restart, never a live arm of the switching pods.
    assert not live_arm(state, LIVE, 5)
    assert state.history[-1]["static"] is True


@pytest.mark.parametrize("tuning", [LIVE.model_copy(update={"table_check": "off"}),
                                    LIVE.model_copy(update={"measure": "canary"})])
def test_no_check_where_it_is_off_or_nothing_switches(tuning: Tuning) -> None:
    assert table_check_due(converged.Converged(_window(_converged(), tuning))) is None


def test_under_a_schedule_the_static_n_is_the_k_drafted_at_the_median_load() -> None:
    state = _converged(7, [[1, 8, 7], [9, 64, 3], [65, 65536, 1]], loads=(4.0, 20.0, 24.0))
    assert static_n(state) == 3
    action = table_check_due(converged.Converged(_window(state)))
    assert action is not None and action.n == 3 and "schedule" in action.reason


def _checking(decision: Ruling, gain: float = 0.08) -> analysing.Analysis:
    state = _converged()
    table_check_due(converged.Converged(_window(state)))
    state.enter(Phase.ANALYSING, 4100.0)
    state.analysis_from_seq = state.seq - 2
    a = analysing.Analysis(_window(state, canary=TrackWindow(5, Snapshot(), 1, 1)))
    a.verdict = Verdict(decision, gain, gain - 0.03, gain + 0.03, 8, f"ruled {decision}")
    return a


def test_static_pods_proven_better_are_promoted_and_nothing_is_measured_live_after() -> None:
    a = _checking(Ruling.PROMOTE)
    action = table_check_ruled(a)
    state = a.state
    assert action is not None and action.kind == ActionKind.PROMOTE and action.static and action.n == 5
    assert "costs more than switching gains" in action.reason and "falling back to static N=5" in action.reason
    assert state.stable_static and not state.canary_static and state.stable_n == 5
    assert not live_arm(state, LIVE, 3)  # a later N is a restarting canary, priced as one
    assert trial_costs(state, LIVE, 0.25) == (0.25, RESTART_WINDOWS)
    assert table_check_due(converged.Converged(_window(_converged_like(state)))) is None


def _converged_like(state: TunerState) -> TunerState:
    state.enter(Phase.CONVERGED, 5000.0)
    return state


def test_a_check_not_proven_keeps_the_table_and_is_not_run_again_for_that_stable() -> None:
    a = _checking(Ruling.ROLLBACK, gain=0.01)
    action = table_check_ruled(a)
    state = a.state
    assert action is not None and action.kind == ActionKind.ROLLBACK and "the table stays" in action.reason
    assert not state.stable_static and state.table_kept == {"n": 5, "schedule": None}
    assert live_arm(state, LIVE, 3) and trial_costs(state, LIVE, 0.25) == (LIVE_ARM_SHARE, 0.0)
    assert table_check_due(converged.Converged(_window(_converged_like(state)))) is None
    state.stable_n = 6  # a new stable configuration is checked again
    assert table_check_due(converged.Converged(_window(state))) is not None


def test_an_undecided_check_keeps_analysing_and_the_rule_leaves_other_canaries_alone() -> None:
    action = table_check_ruled(_checking(Ruling.CONTINUE))
    assert action is not None and action.kind == ActionKind.KEEP_ANALYSING and "table check" in action.reason
    plain = _checking(Ruling.PROMOTE)
    plain.state.canary_static = False
    assert table_check_ruled(plain) is None
    assert analysing.ANALYSIS_RULES.index(table_check_ruled) < analysing.ANALYSIS_RULES.index(analysing.probe_rival)


def test_the_check_is_judged_at_a_canarys_margin_and_spends_no_window_of_the_round() -> None:
    state = _converged()
    state.windows_in_round = LIVE.max_windows_per_round + 5  # the round converged on its window budget
    table_check_due(converged.Converged(_window(state)))
    state.enter(Phase.ANALYSING, 4100.0)
    state.analysis_from_seq = state.seq + 1
    after, action = step(state, LIVE, Observations(300.0, STABLE, TrackWindow(5, Snapshot(), 1, 1)), 4400.0)
    assert action.kind != ActionKind.STOP and after.canary_static and after.windows_in_round == state.windows_in_round


def test_the_state_survives_the_status_and_a_hostile_one_is_refused() -> None:
    state = _converged(7, [[1, 8, 7], [9, 65536, 3]])
    state.stable_static, state.canary_static, state.table_kept = True, True, {"n": 7, "schedule": [[1, 8, 7]]}
    back = TunerState.from_status(json.loads(json.dumps(state.to_status())), method="mtp", stable_n=3)
    assert (back.stable_static, back.canary_static, back.table_kept) == (True, True, {"n": 7, "schedule": [[1, 8, 7]]})
    for bad in ("yes", {"n": -1}, {"n": 65}, {"n": float("nan")}, {"n": 3, "schedule": "1-8:3"}):
        status = {**state.to_status(), "tableKept": bad}
        with pytest.raises((ValueError, TypeError)):
            TunerState.from_status(status, method="mtp", stable_n=3)
    assert TunerState.from_status({**state.to_status(), "stableStatic": "true"}, method="mtp",
                                  stable_n=3).stable_static is False


def _sd(args: list[str] | None = None, table_check: str | None = None) -> Any:
    tuning: dict[str, Any] = {"enabled": True, "measure": "switchback", "candidates": [1, 3, 5]}
    if table_check:
        tuning["tableCheck"] = table_check
    return load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "qwen", "namespace": "llm"},
                 "spec": {"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "nvidia"},
                          "speculative": {"method": "mtp", "numSpeculativeTokens": 3},
                          "engine": {"args": args or []}, "tuning": tuning}})


def test_auto_checks_where_the_pods_capture_cuda_graphs_only() -> None:
    assert tuner_tuning(_sd().spec).table_check == "on"
    assert tuner_tuning(_sd(["--enforce-eager"]).spec).table_check == "off"
    assert tuner_tuning(_sd(["--compilation-config", '{"cudagraph_mode": "NONE"}']).spec).table_check == "off"
    assert tuner_tuning(_sd(["--enforce-eager"], "on").spec).table_check == "on"
    assert tuner_tuning(_sd(table_check="off").spec).table_check == "off"


def _engines(objects: list[dict[str, Any]]) -> dict[str, EngineConfig]:
    return {o["metadata"]["name"]: EngineConfig.model_validate_json(o["data"]["engine.json"])
            for o in objects if o["kind"] == "ConfigMap" and "engine.json" in o.get("data", {})}


def test_the_check_runs_static_pods_beside_the_switching_ones_and_the_fall_back_stops_switching() -> None:
    sd = _sd()
    state = TunerState.new("mtp", 3)
    state.canary_n, state.canary_static, state.phase = 3, True, Phase.ANALYSING
    plan = plan_tracks(sd, {"tuning": state.to_status()})
    assert plan.canary_static and plan.canary_pods_n == 3 and plan.live is not None and not plan.canary_live
    engines = _engines(render(sd, plan.stable_n, plan.canary_pods_n, live=plan.live,
                              stable_static=plan.stable_static, canary_static=plan.canary_static))
    stable, canary = engines["qwen-engine"], engines["qwen-canary-engine"]
    assert stable.live_file and stable.speculative.num_speculative_tokens_per_batch_size
    assert canary.live_file is None and canary.speculative.num_speculative_tokens_per_batch_size is None
    assert canary.speculative.num_speculative_tokens == 3
    state.canary_n, state.canary_static, state.stable_static = 1, False, True
    plan = plan_tracks(sd, {"tuning": state.to_status()})
    assert plan.live is None and not plan.canary_live and plan.canary_pods_n == 1
    engines = _engines(render(sd, plan.stable_n, plan.canary_pods_n, live=plan.live,
                              stable_static=plan.stable_static, canary_static=plan.canary_static))
    for config in engines.values():
        assert config.live_file is None and config.speculative.num_speculative_tokens_per_batch_size is None
    assert [c.speculative.num_speculative_tokens for c in engines.values()] == [3, 1]


def test_the_judge_measures_static_pods_at_the_stables_k_rather_than_calling_them_one_configuration() -> None:
    a = _checking(Ruling.CONTINUE)
    del a.verdict
    assert not a.drafting.identical(8.0)
    a.state.canary_static = False  # a live arm at the stable's K is the stable itself
    del a.drafting
    assert a.drafting.identical(8.0)


@pytest.mark.parametrize("edit", [{"table_check": "off"}, {"measure": "canary"}])
def test_a_check_the_spec_no_longer_asks_for_is_rolled_back_at_once(edit: dict[str, str]) -> None:
    state = _converged()
    table_check_due(converged.Converged(_window(state)))
    after, action = step(state, LIVE.model_copy(update=edit),
                         Observations(300.0, STABLE, TrackWindow(5, Snapshot(), 0, 1)), 4400.0)
    assert action.kind == ActionKind.ROLLBACK and "table check is no longer asked for" in action.reason
    assert not after.canary_static and after.canary_n is None
