"""Each of the N tuner's rules on its own (tuning/rules/): what it decides, and when it leaves the decision
to the rules after it. The planner is a stub, so each rule sees exactly the plan it is tested on."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.models import Canary, Tuning
from specpilot.tuning import ActionKind, Observations, Phase, TrackWindow, TunerState
from specpilot.tuning.actions import Action
from specpilot.tuning.constants import CANARY_MIN_WINDOWS, CONVERGE_WINDOWS, PROBE_MIN_LEAD, PROMOTE_MIX_WINDOWS
from specpilot.tuning.context import Planner, Window
from specpilot.tuning.evidence import Evidence
from specpilot.tuning.judge import Verdict
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.planner import Plan
from specpilot.tuning.rules import analysing, converged, first, observing
from specpilot.tuning.schedule import ScheduleProposal
from specpilot_runtime.vllm_metrics import Snapshot

TUNING = Tuning(enabled=True, candidates=list(range(8)), canary=Canary(analysis_window="5m"), cooldown="10m")
STABLE = TrackWindow(3, Snapshot(), ready_pods=3, desired_pods=3)


def rec(seq: int, track: str = "stable", n: int = 3, load: float = 8.0) -> WindowRecord:
    return WindowRecord(seq, track, n, 100.0, (70.0, 50.0, 30.0)[:n], 2.5, 0.02, load)


def plan_of(next_canary: int | None, gain: dict[int, float] | None = None, near_tie: int | None = None) -> Plan:
    gain = gain or {n: 0.0 for n in range(8)}
    return Plan(3, gain, {n: 0.05 for n in gain}, {n: 0.01 for n in gain}, max(gain, key=gain.__getitem__),
                next_canary, near_tie)


def no_schedule(*args: Any) -> ScheduleProposal:
    return ScheduleProposal(3, ((1, 4096, 3),), 3, 0.0, 0.0)


def window(state: TunerState, plan: Plan | None = None, tuning: Tuning = TUNING, wait: str | None = None,
           canary: TrackWindow | None = None, propose: Any = no_schedule) -> Window:
    def planned(*args: Any) -> Plan:
        assert plan is not None, "this rule must not plan"
        return plan
    return Window(state, tuning, Observations(300.0, STABLE, canary), 1000.0, Planner(planned, propose), wait)


def observed(windows: int = 2) -> TunerState:
    state = TunerState.new("eagle3", 3)
    state.records = [rec(i) for i in range(windows)]
    state.seq = windows
    return state


# --- observing -------------------------------------------------------------------------------------------


def test_stable_first_holds_until_the_stable_has_its_windows() -> None:
    action = observing.stable_first(observing.Observing(window(observed(1))))
    assert action is not None and action.kind == ActionKind.HOLD and "stable track" in action.reason
    assert observing.stable_first(observing.Observing(window(observed(2)))) is None


def test_tournament_first_holds_while_a_method_canary_goes_first() -> None:
    action = observing.tournament_first(observing.Observing(window(observed(), wait="eagle3 untried")))
    assert action is not None and action.reason == "eagle3 untried"
    assert observing.tournament_first(observing.Observing(window(observed()))) is None


def test_canary_budget_spent_stops_the_round() -> None:
    state = observed()
    state.canaries_in_round = TUNING.max_canaries_per_round
    action = observing.canary_budget_spent(observing.Observing(window(state)))
    assert action is not None and action.kind == ActionKind.STOP and state.phase == Phase.CONVERGED
    assert observing.canary_budget_spent(observing.Observing(window(observed()))) is None


def test_window_budget_spent_stops_when_no_verdict_fits() -> None:
    state = observed()
    state.windows_in_round = TUNING.max_windows_per_round - CANARY_MIN_WINDOWS + 1
    action = observing.window_budget_spent(observing.Observing(window(state)))
    assert action is not None and action.kind == ActionKind.STOP and "window budget" in action.reason
    state = observed()
    state.windows_in_round = TUNING.max_windows_per_round - CANARY_MIN_WINDOWS
    assert observing.window_budget_spent(observing.Observing(window(state))) is None


def test_schedule_served_converges_once_the_round_s_schedule_is_promoted() -> None:
    state = observed()
    state.stable_schedule, state.schedule_tried = [[1, 4096, 3]], True
    schedule_mode = TUNING.model_copy(update={"mode": "schedule"})
    action = observing.schedule_served(observing.Observing(window(state, tuning=schedule_mode)))
    assert action is not None and action.kind == ActionKind.HOLD and state.phase == Phase.CONVERGED
    assert observing.schedule_served(observing.Observing(window(state))) is None  # single mode


def test_neighbour_unmeasured_checks_the_stable_s_neighbours_live_before_converging() -> None:
    live = TUNING.model_copy(update={"measure": "switchback"})
    state = observed()
    state.stable_n, state.tried, state.worse = 3, [2], []
    gain = {n: 0.0 for n in range(8)} | {4: -0.01}
    action = observing.neighbour_unmeasured(observing.Observing(window(state, plan_of(None, gain), live)))
    assert action is not None and action.kind == ActionKind.START_CANARY and action.n == 4  # 2 already tried
    state = observed()
    state.tried, state.worse = [2], [4]  # 4 measured worse: nothing above it is worth a look
    assert observing.neighbour_unmeasured(observing.Observing(window(state, plan_of(None, gain), live))) is None
    assert observing.neighbour_unmeasured(observing.Observing(window(observed(), plan_of(None, gain)))) is None  # canaries
    assert observing.neighbour_unmeasured(observing.Observing(window(observed(), plan_of(5, gain), live))) is None


def test_retry_unproven_starts_the_carried_canary_and_drops_one_the_spec_forbids() -> None:
    state = observed()
    state.round = 2
    state.carried = [Evidence(5, 3, 1, 0.08, (rec(0), rec(0, "canary", 5)))]
    action = observing.retry_unproven(observing.Observing(window(state)))
    assert action is not None and action.kind == ActionKind.START_CANARY and action.n == 5
    assert state.carried[0].retried and state.tried == [5] and state.phase == Phase.CANARY_STARTING
    state = observed()
    state.round = 2
    state.carried = [Evidence(9, 3, 1, 0.08, (rec(0), rec(0, "canary", 3)))]  # N=9 is no candidate
    assert observing.retry_unproven(observing.Observing(window(state))) is None and state.carried == []


def test_load_mix_young_holds_when_nothing_is_worth_a_canary_yet() -> None:
    action = observing.load_mix_young(observing.Observing(window(observed(), plan_of(None))))
    assert action is not None and action.kind == ActionKind.HOLD and "load mix" in action.reason
    assert observing.load_mix_young(observing.Observing(window(observed(), plan_of(5)))) is None
    old = observed(CONVERGE_WINDOWS)
    assert observing.load_mix_young(observing.Observing(window(old, plan_of(None)))) is None


def test_nothing_worth_a_canary_converges_noting_a_near_tie() -> None:
    state = observed(CONVERGE_WINDOWS)
    action = observing.nothing_worth_a_canary(observing.Observing(window(state, plan_of(None, near_tie=4))))
    assert action is not None and action.kind == ActionKind.HOLD and state.phase == Phase.CONVERGED
    assert state.near_tie is not None and "N=4" in state.near_tie
    assert observing.nothing_worth_a_canary(observing.Observing(window(observed(), plan_of(5)))) is None


def test_schedule_before_n_goes_first_after_the_round_s_first_canary() -> None:
    schedule_mode = TUNING.model_copy(update={"mode": "schedule"})

    def proposal(*args: Any) -> ScheduleProposal:
        return ScheduleProposal(5, ((1, 8, 5), (9, 4096, 2)), 3, 0.05, 0.20)
    state = observed()
    assert observing.schedule_before_n(observing.Observing(window(state, plan_of(5), schedule_mode,
                                                                  propose=proposal))) is None
    state.canaries_in_round = 1
    action = observing.schedule_before_n(observing.Observing(window(state, plan_of(5), schedule_mode,
                                                                    propose=proposal)))
    assert action is not None and action.kind == ActionKind.START_CANARY and action.schedule == [[1, 8, 5],
                                                                                                  [9, 4096, 2]]
    assert state.schedule_tried and state.canary_schedule == action.schedule


def test_canary_planned_starts_the_planner_s_choice() -> None:
    state = observed()
    action = observing.canary_planned(observing.Observing(window(state, plan_of(5))))
    assert action.kind == ActionKind.START_CANARY and action.n == 5 and state.tried == [5]
    assert state.canary_n == 5 and state.canaries_in_round == 1 and state.history[-1]["action"] == "start_canary"


def test_the_observing_rules_run_in_order() -> None:
    state = observed()
    assert first(observing.OBSERVING_RULES, observing.Observing(window(state, plan_of(5)))).n == 5
    assert observing.OBSERVING_RULES[0] is observing.stable_first
    assert observing.OBSERVING_RULES[-1] is observing.canary_planned


# --- analysing -------------------------------------------------------------------------------------------


def analysed(verdict: Verdict, plan: Plan | None = None, mix: int = PROMOTE_MIX_WINDOWS,
             canary: TrackWindow | None = TrackWindow(5, Snapshot(), 1, 1), **state_fields: Any) -> analysing.Analysis:
    state = observed(mix)
    state.phase, state.canary_n, state.analysis_from_seq, state.tried = Phase.ANALYSING, 5, mix - 4, [5]
    for k, v in state_fields.items():
        setattr(state, k, v)
    a = analysing.Analysis(window(state, plan, canary=canary))
    a.verdict = verdict  # the judge is tested in test_tuning_judge*.py: here the ruling is given
    a.pairs = []
    a.model = None  # type: ignore[assignment]
    a.numbers = {"verdict": verdict.to_json()}
    return a


def verdict(decision: Ruling, windows: int = 6, gain: float = 0.1, inconclusive: bool = False) -> Verdict:
    return Verdict(decision, gain, gain - 0.05, gain + 0.05, windows, f"ruled {decision}", inconclusive=inconclusive)


def test_health_gate_rolls_back_a_vanished_canary_without_a_ruling() -> None:
    a = analysed(verdict(Ruling.PROMOTE), canary=None)
    del a.verdict  # the health gate must not need the judge
    action = analysing.health_gate(a)
    assert action is not None and action.kind == ActionKind.ROLLBACK and action.reason == "canary pods disappeared"
    assert analysing.health_gate(analysed(verdict(Ruling.PROMOTE))) is None


def test_no_comparable_data_rolls_back_after_twice_the_windows() -> None:
    a = analysed(verdict(Ruling.CONTINUE, windows=1), seq=2 * TUNING.canary.windows + 20)
    a.w.state.analysis_from_seq = a.w.state.seq - 2 * TUNING.canary.windows + 1
    action = analysing.no_comparable_data(a)
    assert action is not None and action.kind == ActionKind.ROLLBACK and "comparable windows" in action.reason
    assert analysing.no_comparable_data(analysed(verdict(Ruling.CONTINUE, windows=1))) is None


def test_undecided_keeps_analysing() -> None:
    action = analysing.undecided(analysed(verdict(Ruling.CONTINUE)))
    assert action is not None and action.kind == ActionKind.KEEP_ANALYSING
    assert analysing.undecided(analysed(verdict(Ruling.ROLLBACK))) is None


def test_young_mix_waits_on_a_rollback_only_on_the_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysing, "young_mix_wait", lambda *args: "waiting: young mix")
    a = analysed(verdict(Ruling.ROLLBACK, gain=-0.1))
    a.drafting = None  # type: ignore[assignment]
    action = analysing.young_mix(a)
    assert action is not None and action.kind == ActionKind.KEEP_ANALYSING and action.reason == "waiting: young mix"
    assert analysing.young_mix(analysed(verdict(Ruling.ROLLBACK, inconclusive=True))) is None
    assert analysing.young_mix(analysed(verdict(Ruling.PROMOTE))) is None


def test_roll_back_keeps_an_inconclusive_gain_for_a_retry() -> None:
    a = analysed(verdict(Ruling.ROLLBACK, gain=0.08, inconclusive=True))
    a.retry = None
    state = a.w.state
    action = analysing.roll_back(a)
    assert action is not None and action.kind == ActionKind.ROLLBACK and state.phase == Phase.ROLLING_BACK
    assert [(e.n, e.stable_n) for e in state.carried] == [(5, 3)]
    assert analysing.roll_back(analysed(verdict(Ruling.PROMOTE))) is None


def test_roll_back_remembers_an_n_measured_worse_than_the_stable() -> None:
    a = analysed(verdict(Ruling.ROLLBACK, gain=-0.06))
    analysing.roll_back(a)
    assert a.w.state.worse == [5]
    better = analysed(verdict(Ruling.ROLLBACK, gain=0.01, inconclusive=True))
    analysing.roll_back(better)
    assert better.w.state.worse == []  # not measured worse: nothing beyond it is ruled out


def test_probe_rival_rolls_a_proven_canary_back_for_an_n_expected_ahead() -> None:
    gain = {3: 0.0, 5: 0.10, 6: 0.13}
    a = analysed(verdict(Ruling.PROMOTE), plan_of(None, gain))
    a.retry, a.rival = None, 6
    action = analysing.probe_rival(a)
    assert action is not None and action.kind == ActionKind.ROLLBACK and action.probe and "N=6" in action.reason
    assert a.w.state.probed == [5] and "plan" in a.numbers
    far = analysed(verdict(Ruling.PROMOTE), plan_of(None, {3: 0.0, 5: 0.10, 6: 0.40}))
    far.retry, far.rival = None, 6
    assert analysing.probe_rival(far) is None  # provable against the canary once promoted


def test_probe_rival_under_switchback_wants_a_lead_beyond_the_models_error() -> None:
    """Switchback's margin is 0.5%: half of it is the step model's noise between neighbours, and the probe
    would risk the proven N for it. A lead of PROBE_MIN_LEAD (1%) or more is still probed."""
    switchback = TUNING.model_copy(update={"measure": "switchback"})
    assert switchback.margin_for("eagle3") < 2 * PROBE_MIN_LEAD

    def probe_of(rival_gain: float) -> Action | None:
        a = analysed(verdict(Ruling.PROMOTE), plan_of(None, {3: 0.0, 5: 0.10, 6: rival_gain}))
        a.w = window(a.state, plan_of(None, {3: 0.0, 5: 0.10, 6: rival_gain}), tuning=switchback,
                     canary=TrackWindow(5, Snapshot(), 1, 1))
        a.retry, a.rival = None, 6
        return analysing.probe_rival(a)

    assert probe_of(0.104) is None  # 0.4% ahead: promoted, then N=6 is measured live against it
    action = probe_of(0.113)
    assert action is not None and action.probe and "N=6" in action.reason


def test_probe_for_schedule_asks_schedule_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysing, "schedule_probe", lambda w, c, gain: "probe: schedule")
    a = analysed(verdict(Ruling.PROMOTE), plan_of(None, {3: 0.0, 5: 0.1}))
    a.retry = None
    action = analysing.probe_for_schedule(a)
    assert action is not None and action.probe and action.reason == "probe: schedule"
    monkeypatch.setattr(analysing, "schedule_probe", lambda w, c, gain: None)
    b = analysed(verdict(Ruling.PROMOTE), plan_of(None, {3: 0.0, 5: 0.1}))
    b.retry = None
    assert analysing.probe_for_schedule(b) is None


def test_rival_plausible_keeps_analysing_while_the_rival_may_be_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    monkeypatch.setattr(analysing, "posterior_goodput", lambda *args: np.array([[1.1, 1.0], [0.9, 1.0]]))
    a = analysed(verdict(Ruling.PROMOTE, windows=2), plan_of(None, {3: 0.0, 5: 0.1, 6: 0.1}))
    a.rival = 6
    action = analysing.rival_plausible(a)
    assert action is not None and action.kind == ActionKind.KEEP_ANALYSING and "N=6 better still" in action.reason
    done = analysed(verdict(Ruling.PROMOTE, windows=TUNING.canary.windows), plan_of(None, {3: 0.0, 5: 0.1}))
    done.rival = 6
    assert analysing.rival_plausible(done) is None


def test_mix_not_seen_holds_a_promotion_until_the_mix_is_known() -> None:
    action = analysing.mix_not_seen(analysed(verdict(Ruling.PROMOTE), mix=4))
    assert action is not None and action.kind == ActionKind.KEEP_ANALYSING and "load mix" in action.reason
    assert analysing.mix_not_seen(analysed(verdict(Ruling.PROMOTE))) is None


def test_promote_canary_makes_the_canary_the_stable() -> None:
    a = analysed(verdict(Ruling.PROMOTE), plan_of(None))
    state = a.w.state
    action = analysing.promote_canary(a)
    assert action.kind == ActionKind.PROMOTE and action.n == 5 and state.stable_n == 5 and state.tried == []
    assert state.worse == [3]  # the N it replaced was just measured worse
    assert state.phase == Phase.PROMOTING and "plan" in state.history[-1]["numbers"]


def test_the_analysis_rules_run_in_order() -> None:
    assert analysing.ANALYSIS_RULES[0] is analysing.health_gate
    assert analysing.ANALYSIS_RULES[-1] is analysing.promote_canary
    a = analysed(verdict(Ruling.CONTINUE))
    assert first(analysing.ANALYSIS_RULES, a).kind == ActionKind.KEEP_ANALYSING


# --- converged -------------------------------------------------------------------------------------------


def settled(now_after: float = 3600.0) -> converged.Converged:
    state = observed(8)
    state.phase, state.converged_at, state.converged_seq = Phase.CONVERGED, 1000.0 - now_after, 0
    return converged.Converged(window(state, plan_of(None)))


def test_settle_reference_takes_the_first_windows_after_convergence() -> None:
    c = settled()
    converged.settle_reference(c)
    assert c.w.state.reference is not None and c.w.state.reference["windows"] == 6


def test_cooling_down_holds() -> None:
    action = converged.cooling_down(settled(now_after=60.0))
    assert action is not None and action.reason == "converged (cooldown)"
    assert converged.cooling_down(settled()) is None


def test_acceptance_drifted_starts_a_new_round(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(converged.drift, "detect", lambda *args: "acceptance moved")
    c = settled()
    c.w.state.reference = {"l": 2.5, "l_sd": 0.1, "windows": 6.0}
    action = converged.acceptance_drifted(c)
    assert action is not None and action.reason == "drift: acceptance moved" and c.w.state.round == 2
    assert converged.acceptance_drifted(settled()) is None  # no reference yet


def test_retry_due_starts_a_new_round_for_carried_evidence() -> None:
    c = settled()
    c.w.state.carried = [Evidence(5, 3, 1, 0.08, (rec(0), rec(0, "canary", 5)))]
    action = converged.retry_due(c)
    assert action is not None and action.reason.startswith("retry: N=5") and c.w.state.phase == Phase.OBSERVING
    assert converged.retry_due(settled()) is None


def test_schedule_served_holds_in_schedule_mode() -> None:
    c = settled()
    c.w.state.stable_schedule = [[1, 4096, 3]]
    c.w.tuning = TUNING.model_copy(update={"mode": "schedule"})
    action = converged.schedule_served(c)
    assert action is not None and "serving schedule" in action.reason
    assert converged.schedule_served(settled()) is None


def test_load_mix_moved_opens_a_round_only_for_a_mix_that_moved() -> None:
    c = settled()
    assert converged.load_mix_moved(c).reason == "converged"  # nothing worth a canary
    c = settled()
    c.w = window(c.w.state, plan_of(5))
    c.w.state.converged_loads = None
    assert converged.load_mix_moved(c).reason.startswith("drift: load mix moved")
    c = settled()
    c.w = window(c.w.state, plan_of(5))
    c.w.state.converged_loads = [8.0]  # the same plan on the old mix: the round ended on its budget
    assert converged.load_mix_moved(c).reason == "converged" and c.w.state.round == 1
