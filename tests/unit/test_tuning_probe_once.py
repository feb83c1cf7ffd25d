"""A canary proven better is rolled back as a probe at most once per stable N: when the model keeps expecting
the other of two proven N to be ahead by more than half the margin, the first, proven again, is promoted
rather than both being probed in turn until the round's budget runs out (seen in a benchmark run as canaries
[0, 1, 0, 1] and no promotion); only when the model expects the rival ahead by a few margins at most, so a
large proven gain is banked first; and never towards an N whose own canary against this stable N was not
proven better, in an earlier round either (test_tuning_probe_returns.py: a probe rolled back brings
the proven N back)."""

from __future__ import annotations

import pytest

from specpilot.tuning import ActionKind, TunerState, machine, step
from specpilot.tuning.judge import Verdict
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.planner import Plan
from specpilot.tuning.rules import analysing

from test_tuning_machine import TUNING, FakeDeployment

FLIP = {0: 1, 1: 0}  # each N's rival: the model always expects the other one to be 1.5% ahead


def fickle_plan(method, records, model, candidates, stable_n, loads, objective, margin, share, exclude=(),
                power=None, restart_windows=1.0) -> Plan:
    canary = next((r.n for r in reversed(records) if r.track == "canary"), None)
    ahead = FLIP.get(canary, 1)
    gain = {n: 0.0 for n in candidates} | {0: 0.20, 1: 0.20, ahead: 0.215}
    gain[stable_n] = 0.0
    nxt = next((n for n in (ahead, FLIP[ahead]) if n not in exclude and n != stable_n), None)
    return Plan(stable_n, gain, {n: 0.1 for n in candidates}, {n: 0.01 for n in candidates},
                max(gain, key=gain.__getitem__), nxt)


def proven(*args, **kwargs) -> Verdict:
    return Verdict(Ruling.PROMOTE, 0.2, 0.1, 0.3, 6, "measured better by 20.0% (lower bound 10.0%)")


@pytest.fixture
def fickle_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "plan", fickle_plan)
    monkeypatch.setattr(analysing, "judge", proven)
    monkeypatch.setattr(analysing, "known", lambda method, records: {0, 1, 3})
    monkeypatch.setattr(analysing, "PROMOTE_MIX_WINDOWS", 0)


def first_decisions(count: int, new_round_after_rollback: bool = False) -> tuple[list, TunerState]:
    """The first `count` canary starts, rollbacks and promotions of a tuner whose stable runs N=3. With
    `new_round_after_rollback`, each rollback ends the round, as drift or a moved load mix would: what was
    tried is forgotten, the step-time pairs are not."""
    dep = FakeDeployment(stable_n=3)
    state = TunerState.new("eagle3", 3)
    decisions: list[tuple[ActionKind, int | None]] = []
    for _ in range(60):
        state, action = step(state, TUNING, dep.observe(), dep.now())
        dep.apply(action)
        if action.kind in (ActionKind.START_CANARY, ActionKind.PROMOTE, ActionKind.ROLLBACK):
            decisions.append((action.kind, action.n))
        if action.kind == ActionKind.ROLLBACK and new_round_after_rollback:
            state.tried, state.round = [], state.round + 1
        if len(decisions) == count:
            break
    return decisions, state


def test_two_proven_canaries_the_model_ranks_each_behind_the_other_end_in_a_promotion(fickle_model: None) -> None:
    dep = FakeDeployment(stable_n=3)
    state = TunerState.new("eagle3", 3)
    for _ in range(40):
        state, action = step(state, TUNING, dep.observe(), dep.now())
        dep.apply(action)
        if action.kind == ActionKind.PROMOTE:
            break
    probes = [h["n"] for h in state.history if h["reason"].startswith("probe:")]
    assert action.kind == ActionKind.PROMOTE and action.n in (0, 1), state.history
    assert probes == [1, 0] and action.n == 1  # each probed once; the first, proven again, is promoted
    assert state.to_status()["probed"] == [] and state.tried == []


def far_ahead_plan(method, records, model, candidates, stable_n, loads, objective, margin, share, exclude=(),
                   power=None, restart_windows=1.0) -> Plan:
    # The canary (N=0 or 1) is proven +20%; the model expects N=1 a further 10% ahead of N=0: five margins.
    gain = {n: 0.0 for n in candidates} | {0: 0.20, 1: 0.32}
    gain[stable_n] = 0.0
    nxt = next((n for n in (0, 1) if n not in exclude and n != stable_n), None)
    return Plan(stable_n, gain, {n: 0.1 for n in candidates}, {n: 0.01 for n in candidates},
                max(gain, key=gain.__getitem__), nxt)


def test_a_proven_canary_far_behind_the_model_s_best_is_promoted_before_that_n_is_tried(
        fickle_model: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Rolling N=0 back to probe N=1 would give up a proven +20% for the model's word: should the probe's round
    # run out, the stable stays 20% behind. Promoted, N=1 is then a canary against it, provable at +10%.
    monkeypatch.setattr(machine, "plan", far_ahead_plan)
    decisions, state = first_decisions(3)
    # Canary 0, promoted at once (no probe in between), then 1 canaried against the new stable N=0.
    assert decisions == [(ActionKind.START_CANARY, 0), (ActionKind.PROMOTE, 0), (ActionKind.START_CANARY, 1)], \
        state.history
    assert not any(h["reason"].startswith("probe:") for h in state.history)


def rival_plan(method, records, model, candidates, stable_n, loads, objective, margin, share, exclude=(),
               power=None, restart_windows=1.0) -> Plan:
    # The model always expects 0 a little ahead of 1 (by more than half the margin); 0 is canaried first.
    gain = {n: 0.0 for n in candidates} | {0: 0.215, 1: 0.20}
    gain[stable_n] = 0.0
    nxt = 1 if any(r.track == "canary" and r.n == 0 for r in records) else 0
    return Plan(stable_n, gain, {n: 0.1 for n in candidates}, {n: 0.01 for n in candidates}, 0,
                None if nxt in exclude else nxt)


def zero_loses(stable, canary, *args, **kwargs) -> Verdict:
    if canary and canary[-1].n == 0:
        return Verdict(Ruling.ROLLBACK, -0.05, -0.1, 0.01, 6, "cannot beat stable by 2%")
    return proven()


def test_an_n_rolled_back_in_an_earlier_round_is_not_probed_for_the_model_s_word(
        fickle_model: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "plan", rival_plan)
    monkeypatch.setattr(analysing, "judge", zero_loses)
    decisions, state = first_decisions(4, new_round_after_rollback=True)
    assert decisions == [(ActionKind.START_CANARY, 0), (ActionKind.ROLLBACK, 0), (ActionKind.START_CANARY, 1),
                         (ActionKind.PROMOTE, 1)], state.history
