"""Each of the method tournament's rules on its own (tuning/rules/): which method canary an idle tournament
picks (method_pick.PICK_RULES), what a method canary's ruling leads to (method_analysis.METHOD_ANALYSIS_RULES),
and what each stage of a window does (tournament.STAGE_RULES)."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.models import Canary, Tuning
from specpilot.tuning import ActionKind, Observations, Phase, TrackWindow, TunerState
from specpilot.tuning.judge import Verdict
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.rules import method_analysis, method_pick
from specpilot.tuning.step_model import Pair
from specpilot.tuning.tournament_state import Contender, Stage, Tournament
from specpilot_runtime.vllm_metrics import Snapshot

TUNING = Tuning(enabled=True, canary=Canary(analysis_window="5m"), cooldown="10m")
CONTENDERS = [Contender("eagle3", 3), Contender("ngram", 4)]
STABLE = TrackWindow(3, Snapshot(), ready_pods=3, desired_pods=3)


def idle(phase: Phase = Phase.OBSERVING, anchored: bool = False, **entry: Any) -> method_pick.Idle:
    inner = TunerState.new("eagle3", 3)
    inner.phase = phase
    inner.records = [WindowRecord(i, "stable", 3, 100.0, (70.0, 50.0, 30.0), 2.5, 0.02, 8.0) for i in range(2)]
    if anchored:
        inner.pairs = [Pair(0, 3, 8.0, -0.2)]
    tour = Tournament.new(CONTENDERS)
    for k, v in entry.items():
        setattr(tour.entries[1], k, v)
    return method_pick.Idle(tour, inner, TUNING, CONTENDERS, Observations(300.0, STABLE))


def test_no_speculation_first_anchors_the_step_cost_before_trying_contenders() -> None:
    pick = method_pick.no_speculation_first(idle())
    assert pick is not None and pick[:2] == (0, 0)
    assert method_pick.no_speculation_first(idle(anchored=True)) is None


def test_untried_first_canaries_an_unmeasured_contender_at_its_own_n() -> None:
    pick = method_pick.untried_first(idle(anchored=True))
    assert pick is not None and pick[:2] == (1, 4) and "ngram untried" in pick[2]
    assert method_pick.untried_first(idle(measured_n=4)) is None


def test_second_chance_waits_for_the_stable_s_n_to_be_tuned() -> None:
    options = [(2, 1.5, 0.1)]  # N=2 expected 50% ahead of the start
    assert method_pick.second_chance(idle(measured_n=4, options=options)) is None  # observing
    pick = method_pick.second_chance(idle(Phase.CONVERGED, measured_n=4, options=options))
    assert pick is not None and pick[:2] == (1, 2)
    assert method_pick.second_chance(idle(Phase.CONVERGED, measured_n=4, options=options, retried=True)) is None


def test_the_pick_rules_run_in_order() -> None:
    assert method_pick.PICK_RULES == (method_pick.no_speculation_first, method_pick.untried_first,
                                      method_pick.second_chance)


def test_the_method_analysis_rules_run_in_order() -> None:
    assert method_analysis.METHOD_ANALYSIS_RULES == (
        method_analysis.method_health_gate, method_analysis.method_slo_gate, method_analysis.method_undecided,
        method_analysis.no_speculation_ruled, method_analysis.method_rolled_back, method_analysis.method_slo_unproven,
        method_analysis.method_promoted)


def analysed(decision: Ruling, canary: int = 1, obs_canary: TrackWindow | None = TrackWindow(4, Snapshot(), 1, 1),
             windows: int = 6) -> method_analysis.MethodAnalysis:
    inner = TunerState.new("eagle3", 3)
    inner.seq = 10
    tour = Tournament.new(CONTENDERS)
    tour.stage, tour.canary, tour.canary_n, tour.analysis_from_seq = Stage.ANALYSING, canary, 4, 9
    a = method_analysis.MethodAnalysis(tour, inner, TUNING, CONTENDERS, Observations(300.0, STABLE, obs_canary), 0.0)
    a.ruling = Verdict(decision, 0.2, 0.1, 0.3, windows, f"ruled {decision}")
    a.loads = [8.0]
    return a


def test_method_health_gate_fails_a_vanished_canary() -> None:
    a = analysed(Ruling.PROMOTE, obs_canary=None)
    action = method_analysis.method_health_gate(a)
    assert action is not None and action.kind == ActionKind.ROLLBACK and a.tour.entries[1].failure
    assert method_analysis.method_health_gate(analysed(Ruling.PROMOTE)) is None


def test_method_undecided_keeps_analysing_and_gives_up_without_data() -> None:
    action = method_analysis.method_undecided(analysed(Ruling.CONTINUE))
    assert action is not None and action.kind == ActionKind.KEEP_ANALYSING and action.contender == 1
    starved = analysed(Ruling.CONTINUE, windows=1)
    starved.tour.analysis_from_seq = starved.inner.seq - 2 * TUNING.canary.windows + 1
    assert starved.verdict.decision == Ruling.ROLLBACK and method_analysis.method_undecided(starved) is None
    assert starved.numbers["verdict"]["decision"] == Ruling.CONTINUE  # the history keeps the judge's ruling


def test_no_speculation_ruled_is_the_stable_method_s_n_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(method_analysis, "off_probe", lambda *args: seen.append(args) or "off")
    assert method_analysis.no_speculation_ruled(analysed(Ruling.ROLLBACK, canary=0)) == "off" and seen
    assert method_analysis.no_speculation_ruled(analysed(Ruling.ROLLBACK)) is None


def test_method_rolled_back_and_promoted_measure_the_contender(monkeypatch: pytest.MonkeyPatch) -> None:
    measured = []
    monkeypatch.setattr(method_analysis, "keep_measured", lambda entry, contender, *args: measured.append(contender.method))
    monkeypatch.setattr(method_analysis, "anchored_pairs", lambda *args: [])
    a = analysed(Ruling.ROLLBACK)
    action = method_analysis.method_rolled_back(a)
    assert action is not None and action.kind == ActionKind.ROLLBACK and measured == ["ngram"]
    assert method_analysis.method_rolled_back(analysed(Ruling.PROMOTE)) is None
    measured.clear()
    a = analysed(Ruling.PROMOTE)
    action = method_analysis.method_promoted(a)
    assert action.kind == ActionKind.PROMOTE and a.tour.stable == 1 and a.tour.scale == pytest.approx(1.2)
    assert measured == ["ngram", "eagle3"]  # the winner, then the old stable against it
