"""The state changes a decision makes: start a canary, roll it back (or probe with it), promote it, converge
the round. Each moves the phase and logs the decision (`actions.decide`)."""

from __future__ import annotations

from typing import Any

from . import evidence
from .actions import Action, decide
from .context import Window, load_mix
from .judge import Verdict
from .kinds import ActionKind, Phase
from .observations import WindowRecord
from .state import TunerState, table_key


def start_canary(state: TunerState, now: float, n: int, reason: str, numbers: dict[str, Any],
                 schedule: list[list[int]] | None = None, static: bool = False) -> Action:
    """The canary track starts at `n` (serving `schedule`, which the caller sets as the state's canary
    schedule; `static`: static pods, the table check); it counts against the round's canary budget."""
    state.canary_n = n
    state.canary_static = static
    state.canaries_in_round += 1
    state.enter(Phase.CANARY_STARTING, now)
    return decide(state, now, Action(ActionKind.START_CANARY, n, reason, schedule, static=static), numbers)


def rollback(state: TunerState, now: float, reason: str, numbers: dict[str, Any], probe: bool = False) -> Action:
    """The canary goes; a retry's evidence is spent whatever ended it."""
    n = state.canary_n
    ev = evidence.running(state.carried, state.stable_n, n, state.canary_schedule)
    state.carried = [e for e in state.carried if e is not ev]
    if state.canary_static:  # the table check ended without proving static pods better: the table stays
        state.table_kept = table_key(state.stable_n, state.stable_schedule)
    state.canary_n = None
    state.canary_schedule = None
    state.canary_static = False
    state.analysis_from_seq = None
    state.warmup_until = None
    state.enter(Phase.ROLLING_BACK, now)
    return decide(state, now, Action(ActionKind.ROLLBACK, n, reason, probe=probe), numbers)


def probe(state: TunerState, now: float, c: int, reason: str, numbers: dict[str, Any], v: Verdict,
          pairs: list[tuple[WindowRecord, WindowRecord]]) -> Action:
    """Roll back the proven canary `c` as a probe. It stays a candidate: should what it points to fail, the
    planner may come back to a proven winner; should the round end first, its windows are evidence that the
    next round retries first (evidence.py)."""
    state.tried.remove(c)
    state.probed.append(c)
    if state.stable_schedule is None:
        state.carried = evidence.keep(state.carried, evidence.measured(c, None, state.stable_n, state.round,
                                                                      v.gain, pairs, proven=True))
    return rollback(state, now, reason, numbers, probe=True)


def carry(state: TunerState, margin: float, v: Verdict, ev: evidence.Evidence | None,
          pairs: list[tuple[WindowRecord, WindowRecord]]) -> None:
    """After a verdict: a first canary rolled back unproven while measuring better than the stable by the
    margin leaves its windows for a retry in a later round (a retry's own evidence is spent by `rollback`)."""
    if ev is None and v.inconclusive and v.gain >= margin and state.canary_n is not None \
            and state.stable_schedule is None:
        state.carried = evidence.keep(state.carried, evidence.measured(
            state.canary_n, state.canary_schedule, state.stable_n, state.round, v.gain, pairs))


def promote(state: TunerState, now: float, action: Action, numbers: dict[str, Any]) -> Action:
    """The canary's N and schedule (None: N at every batch size) become the stable track's."""
    assert action.n is not None
    # The N it replaces was just measured worse; with schedules or a method change, no N is bracketed.
    state.worse = [state.stable_n] if action.schedule is None and state.stable_schedule is None else []
    state.stable_n = action.n
    state.stable_schedule = action.schedule
    state.stable_static = state.stable_static or action.static
    state.canary_n = None
    state.canary_schedule = None
    state.canary_static = False
    state.analysis_from_seq = None
    state.warmup_until = None
    # An N rolled back against the old stable (or before the round had seen its whole load mix) may well
    # beat the new one: against it, only the planner's value and the round's budget rule it out.
    state.tried = []
    state.probed = []
    state.carried = []  # measured against the old stable N
    state.enter(Phase.PROMOTING, now)
    return decide(state, now, action, numbers)


def converge(w: Window, reason: str, stop: bool = False, numbers: dict[str, Any] | None = None) -> Action:
    """The round ends (`stop`: on its budget); in schedule mode the status keeps the proposed schedule."""
    state, now = w.state, w.now
    state.reference = None  # set from the steady state that follows (rules/converged.py)
    state.converged_at = now
    state.converged_seq = state.seq
    state.converged_loads = [round(b, 2) for b in load_mix(state)]
    numbers = dict(numbers or {})
    if w.tuning.mode == "schedule":
        state.schedule = w.propose().to_json()
        numbers["schedule"] = state.schedule
    state.enter(Phase.CONVERGED, now)
    return decide(state, now, Action(ActionKind.STOP if stop else ActionKind.HOLD, state.stable_n, reason), numbers)
