"""The state changes the method tournament's decisions make: start a method canary, end one (rolled back,
failed or promoted), rule on a canary of the stable's own method at N = 0, and hand the N tuner to a
promoted contender."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from specpilot_runtime.speculative import OFF

from .actions import Action, decide
from .constants import MAX_FAILURE
from .context import fitted_model
from .kinds import ActionKind, Phase, Ruling
from .method_estimates import stable_records
from .observations import WindowRecord
from .state import TunerState
from .tournament_state import Contender, Stage, Tournament

Pick = tuple[int, int, str]  # (contender, N, reason) of the method canary to start


def start(tour: Tournament, inner: TunerState, pick: Pick, now: float) -> Action:
    """Start the picked method canary; a contender measured before has had its second chance, and the
    stable's own method at N = 0 is canaried once."""
    i, n, reason = pick
    if i == tour.stable:
        tour.probed_off = True
    elif tour.entries[i].measured_n is not None:
        tour.entries[i].retried = True
    tour.canary, tour.canary_n, tour.records = i, n, []
    tour.analysis_from_seq = None
    tour.canaries += 1
    inner.canaries_in_round += 1
    tour.enter(Stage.STARTING, now)
    return decide(inner, now, Action(ActionKind.START_CANARY, n, reason, contender=i), {})


def fail(tour: Tournament, inner: TunerState, reason: str, now: float) -> Action:
    """The canary measured nothing (never Ready, unhealthy): a contender that fails so is not tried again
    (another checkpoint that does not load would fail every time); rolled back."""
    i, n = tour.canary, tour.canary_n
    if i is not None and i != tour.stable:
        entry = tour.entries[i]
        entry.measured_n = entry.measured_n if entry.measured_n is not None else n
        entry.failure = reason[:MAX_FAILURE]
    return end_canary(tour, inner, ActionKind.ROLLBACK, reason, now, {})


def end_canary(tour: Tournament, inner: TunerState, kind: ActionKind, reason: str, now: float,
               numbers: dict[str, Any]) -> Action:
    """End the method canary: the tournament rolls it back (rollback) or switches the stable to it."""
    i, n = tour.canary, tour.canary_n
    tour.canary, tour.canary_n, tour.analysis_from_seq, tour.records = None, None, None, []
    tour.enter(Stage.ROLLING_BACK if kind == ActionKind.ROLLBACK else Stage.SWITCHING, now)
    return decide(inner, now, Action(kind, n, reason, contender=i), numbers)


def off_probe(tour: Tournament, inner: TunerState, contenders: Sequence[Contender], v: Any, now: float,
              numbers: dict[str, Any]) -> Action:
    """The stable's own method at N = 0 was canaried: its windows are the N tuner's (acceptance, paired step
    times), and what an "off" contender would have measured; a win is an N promotion of the stable's method."""
    canary = tour.records
    for i, c in enumerate(contenders):
        if c.method == OFF and i != tour.stable:
            e = tour.entries[i]
            e.measured_n, e.best_n, e.accepted_length = 0, 0, 1.0
            e.gain, e.lower, e.upper, e.expected, e.sd = v.gain, v.lower, v.upper, tour.scale * (1.0 + v.gain), 0.0
    by_seq = {r.seq: r for r in stable_records(inner) if r.step_s}
    model = fitted_model(inner)
    for r in canary:
        s = by_seq.get(r.seq)
        inner.add_record(r)
        if s is not None and s.step_s and r.step_s and s.n == inner.stable_n:
            inner.add_pair(model.pair(r.n, s.n, (s.load + r.load) / 2, r.step_s, s.step_s))
    if v.decision == Ruling.ROLLBACK:
        inner.tried.append(0)
        return end_canary(tour, inner, ActionKind.ROLLBACK, f"N=0 (no speculation): {v.reason}", now, numbers)
    action = end_canary(tour, inner, ActionKind.PROMOTE, f"N=0 (no speculation): {v.reason}", now, numbers)
    # An N promotion of the stable's own method: the N tuner waits for the stable track to roll.
    tour.enter(Stage.IDLE, now)
    tour.scale *= 1.0 + v.gain
    inner.stable_n, inner.tried, inner.probed = 0, [], []
    inner.enter(Phase.PROMOTING, now)
    return dataclasses.replace(action, contender=None)


def switched(tour: Tournament, inner: TunerState, contenders: Sequence[Contender], promoted: list[WindowRecord],
             now: float) -> TunerState:
    """The N tuner for the new stable contender, starting from all it measured: the promoted canary's windows
    (the stable's now), any earlier canary's (at other N), and its step times against N = 0."""
    c, e = contenders[tour.stable], tour.entries[tour.stable]
    n = e.measured_n
    fresh = TunerState.new(c.method, c.n if n is None else n, c.block_size, now)
    # Tuning the new method's N is a round of its own, with its own budgets.
    fresh.seq, fresh.round, fresh.history = inner.seq, inner.round + 1, inner.history
    now_seqs = {r.seq for r in promoted}
    for r in e.records:
        if r.seq not in now_seqs:
            fresh.add_record(dataclasses.replace(r, track="canary"))
    for r in promoted:
        fresh.add_record(dataclasses.replace(r, track="stable"))
    for p in e.pairs:
        fresh.add_pair(p)
    return fresh
