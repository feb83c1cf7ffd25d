"""Each of the method tournament's stage rules on its own (tuning/rules/tournament.py, STAGE_RULES): what
one window does in each stage of a method canary, and that `tournament.step` is their first decision."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.models import Canary, Tuning
from specpilot.tuning import ActionKind, Observations, Phase, TrackWindow, TunerState, machine, tournament
from specpilot.tuning.actions import Action
from specpilot.tuning.rules import tournament as stages
from specpilot.tuning.tournament_state import Contender, Stage, Tournament
from specpilot_runtime.vllm_metrics import Snapshot

TUNING = Tuning(enabled=True, canary=Canary(analysis_window="5m"), cooldown="10m")
CONTENDERS = [Contender("eagle3", 3), Contender("ngram", 4)]
STABLE = TrackWindow(3, Snapshot(), ready_pods=3, desired_pods=3)
READY_CANARY = TrackWindow(4, Snapshot(), ready_pods=1, desired_pods=1)


def window(stage: Stage, canary: TrackWindow | None = None, stable: TrackWindow | None = STABLE,
           tuning: Tuning = TUNING, now: float = 60.0, **tour_fields: Any) -> stages.TournamentWindow:
    inner = TunerState.new("eagle3", 3)
    inner.seq = 10
    tour = Tournament.new(CONTENDERS)
    tour.stage = stage
    if stage in (Stage.STARTING, Stage.ANALYSING):
        tour.canary, tour.canary_n = 1, 4
    for k, v in tour_fields.items():
        setattr(tour, k, v)
    return stages.TournamentWindow(tour, inner, tuning, CONTENDERS, Observations(300.0, stable, canary), now)


def test_no_tournament_drops_the_method_canary_and_leaves_n_to_the_n_tuner() -> None:
    x = window(Stage.ANALYSING, tuning=Tuning(enabled=False))
    st, action = stages.no_tournament(x)
    assert action.kind == ActionKind.STOP and x.tour.canary is None and x.tour.stage == Stage.IDLE
    assert stages.no_tournament(window(Stage.ANALYSING)) is None


def test_method_canary_picked_starts_the_pick_outside_the_round_s_budget() -> None:
    x = window(Stage.IDLE)
    x.pick = (1, 4, "ngram untried")
    st, action = stages.method_canary_picked(x)
    assert (action.kind, action.n, action.contender) == (ActionKind.START_CANARY, 4, 1)
    assert x.tour.stage == Stage.STARTING and st.seq == 11 and st.windows_in_round == 0
    idle = window(Stage.IDLE)
    idle.pick = None
    assert stages.method_canary_picked(idle) is None
    assert stages.method_canary_picked(window(Stage.ANALYSING)) is None


def test_n_tuner_decides_when_idle_waiting_for_an_untried_contender(monkeypatch: pytest.MonkeyPatch) -> None:
    waits = []

    def promote(state: TunerState, tuning: Tuning, obs: Observations, now: float,
                wait: str | None = None) -> tuple[TunerState, Action]:
        waits.append(wait)
        st = state.copy()
        st.history = [{"numbers": {"verdict": {"gain_pct": 10.0}}}]
        return st, Action(ActionKind.PROMOTE, 2)

    monkeypatch.setattr(machine, "step", promote)
    x = window(Stage.IDLE)
    _, action = stages.n_tuner_decides(x)
    assert action.kind == ActionKind.PROMOTE and x.tour.scale == pytest.approx(1.1)
    assert waits == ["ngram untried: it is canaried before N is tuned"]
    assert stages.n_tuner_decides(window(Stage.SWITCHING)) is None


def test_the_stable_switches_once_it_runs_the_winner_alone() -> None:
    mixed = window(Stage.SWITCHING, canary=READY_CANARY)
    st, action = stages.stable_switching(mixed)
    assert action.kind == ActionKind.HOLD and st.seq == 11 and not st.records and mixed.tour.stage == Stage.SWITCHING
    alone = window(Stage.SWITCHING)
    assert stages.stable_switching(alone) is None
    st, action = stages.stable_switched(alone)
    assert action.kind == ActionKind.HOLD and "runs eagle3 N=3" in action.reason and alone.tour.stage == Stage.IDLE
    assert stages.stable_switched(window(Stage.IDLE)) is None


def test_a_rolled_back_method_canary_is_waited_for_until_gone() -> None:
    going = window(Stage.ROLLING_BACK, canary=READY_CANARY)
    _, action = stages.method_canary_going(going)
    assert action.kind == ActionKind.HOLD and action.n is None
    gone = window(Stage.ROLLING_BACK)
    assert stages.method_canary_going(gone) is None
    st, action = stages.method_canary_gone(gone)
    assert action.reason == "method canary gone" and gone.tour.stage == Stage.IDLE and st.seq == 11


def test_a_starting_method_canary_is_analysed_from_the_window_after_it_is_ready() -> None:
    x = window(Stage.STARTING, canary=READY_CANARY)
    st, action = stages.method_canary_ready(x)
    assert action.kind == ActionKind.KEEP_ANALYSING and x.tour.stage == Stage.ANALYSING
    assert x.tour.analysis_from_seq == st.seq + 1 == 12
    assert stages.method_canary_ready(window(Stage.STARTING)) is None


def test_a_method_canary_not_ready_by_its_deadline_fails() -> None:
    late = window(Stage.STARTING, now=3600.0)
    _, action = stages.method_canary_late(late)
    assert action.kind == ActionKind.ROLLBACK and late.tour.entries[1].failure and late.tour.stage == Stage.ROLLING_BACK
    assert stages.method_canary_late(window(Stage.STARTING)) is None
    _, action = stages.method_canary_starting(window(Stage.STARTING))
    assert action.kind == ActionKind.KEEP_ANALYSING and action.reason == "waiting for the ngram canary"


def test_a_method_canary_whose_pods_are_refused_fails_at_once_saying_why() -> None:
    why = 'pods "sd-canary-x" is forbidden: violates PodSecurity "restricted:latest"'
    refused = window(Stage.STARTING, canary=TrackWindow(4, Snapshot(), ready_pods=0, desired_pods=1, refused=why))
    _, action = stages.method_canary_refused(refused)
    assert action.kind == ActionKind.ROLLBACK and why in action.reason and refused.tour.entries[1].failure
    assert refused.tour.stage == Stage.ROLLING_BACK
    assert stages.method_canary_refused(window(Stage.STARTING, canary=READY_CANARY)) is None
    assert stages.method_canary_refused(window(Stage.STARTING)) is None


def test_a_promoted_method_canary_hands_the_n_tuner_to_its_contender(monkeypatch: pytest.MonkeyPatch) -> None:
    def promoted(a: Any) -> Action:
        a.tour.stable, a.tour.entries[1].measured_n = 1, 4
        return Action(ActionKind.PROMOTE, 4, "won", contender=1)

    monkeypatch.setattr(stages, "METHOD_ANALYSIS_RULES", (promoted,))
    st, action = stages.method_canary_analysed(window(Stage.ANALYSING, canary=READY_CANARY))
    assert action.kind == ActionKind.PROMOTE and (st.method, st.stable_n, st.phase) == ("ngram", 4, Phase.OBSERVING)


def test_the_stage_rules_run_in_order_and_step_is_their_first_decision() -> None:
    assert stages.STAGE_RULES == (
        stages.no_tournament, stages.method_canary_picked, stages.n_tuner_decides, stages.stable_switching,
        stages.stable_switched, stages.method_canary_going, stages.method_canary_gone, stages.method_canary_ready,
        stages.method_canary_refused, stages.method_canary_late, stages.method_canary_starting,
        stages.method_canary_analysed)
    tour = Tournament.new(CONTENDERS)
    tour.stage = Stage.ROLLING_BACK
    new, st, action = tournament.step(tour, TunerState.new("eagle3", 3), TUNING, CONTENDERS,
                                      Observations(300.0, STABLE), 0.0)
    assert action.reason == "method canary gone" and new.stage == Stage.IDLE and tour.stage == Stage.ROLLING_BACK
