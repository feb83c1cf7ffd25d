"""Observing: no canary runs; plan the round's next canary, or converge.

`OBSERVING_RULES`, in order; the first to return an action decides the window.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

from .. import evidence
from ..actions import Action
from ..constants import CANARY_MIN_WINDOWS, CONVERGE_WINDOWS, OBSERVE_WINDOWS
from ..context import Window, candidates, fitted_model, load_mix
from ..kinds import ActionKind
from ..planner import Plan, bracketed
from ..schedule import schedule_text
from ..switchback import live_arm, switching
from ..transitions import converge, start_canary
from .per_band import band_canary


@dataclass
class Observing:
    """One observing window; the plan is made when a rule first needs it (after the budget rules)."""

    w: Window

    @cached_property
    def plan(self) -> Plan:
        """The planner on the tuner's measurements and the recent load mix; N tried this round excluded."""
        return self.w.plan(fitted_model(self.w.state), load_mix(self.w.state))


def stable_first(o: Observing) -> Action | None:
    """Hold until the stable track has OBSERVE_WINDOWS windows at its N: a plan needs its acceptance and
    step times."""
    state = o.w.state
    at_stable = [r for r in state.records if r.n == state.stable_n]
    if len(at_stable) < OBSERVE_WINDOWS or not any(r.track == "stable" for r in state.records):
        return Action(ActionKind.HOLD, state.stable_n, "observing the stable track")
    return None


def tournament_first(o: Observing) -> Action | None:
    """Hold while the method tournament has a canary of its own to run first (`Window.wait` says which)."""
    if o.w.wait:
        return Action(ActionKind.HOLD, o.w.state.stable_n, o.w.wait)
    return None


def canary_budget_spent(o: Observing) -> Action | None:
    """Stop the round once it has started spec.tuning.maxCanariesPerRound canaries."""
    if o.w.state.canaries_in_round >= o.w.tuning.max_canaries_per_round:
        return converge(o.w, "canary budget of the round spent", stop=True)
    return None


def window_budget_spent(o: Observing) -> Action | None:
    """Stop the round when fewer windows are left than a canary needs for a verdict: a canary started now
    would restart a pod and be stopped by the budget before any verdict."""
    left = o.w.tuning.max_windows_per_round - o.w.state.windows_in_round
    if left < CANARY_MIN_WINDOWS:
        return converge(o.w, f"window budget of the round spent: {max(left, 0)} windows left, "
                             f"a canary needs {CANARY_MIN_WINDOWS} for a verdict", stop=True)
    return None


def schedule_served(o: Observing) -> Action | None:
    """Schedule mode: converge once the stable serves the schedule this round canaried; it came from the
    round's single-N search and beat its result."""
    state = o.w.state
    if state.stable_schedule is not None and state.schedule_tried and o.w.tuning.mode == "schedule":
        return converge(o.w, f"serving schedule {schedule_text(state.stable_schedule)} "
                             f"(started N={state.stable_n})")
    return None


def retry_unproven(o: Observing) -> Action | None:
    """The round's first canary, when an earlier round left an N (or a schedule) measured better than the
    stable but unproven: that canary again, its windows pooled with the earlier ones (evidence.py). Evidence
    for a canary the spec no longer allows is dropped."""
    state, tuning, now = o.w.state, o.w.tuning, o.w.now
    ev = evidence.pending(state.carried, state.stable_n, state.round) if state.stable_schedule is None else None
    if ev is None:
        return None
    if ev.n not in candidates(state, tuning) or (ev.schedule is not None and tuning.mode != "schedule"):
        state.carried = [e for e in state.carried if e is not ev]
        return None
    state.carried = [dataclasses.replace(e, retried=True) if e is ev else e for e in state.carried]
    state.canary_schedule = ev.schedule
    if ev.schedule is None:
        state.tried.append(ev.n)
    else:
        state.schedule_tried = True  # the round's schedule canary
    return start_canary(state, now, ev.n, f"retry: {ev.describe()}; this canary's windows pool with those", {},
                        ev.schedule)


def load_mix_young(o: Observing) -> Action | None:
    """Hold when no canary is worth it yet and the round has seen fewer than CONVERGE_WINDOWS windows of
    load: the best N depends on the load mix (a canary can start earlier: it is itself a way to learn)."""
    p = o.plan
    if p.next_canary is None and len(load_mix(o.w.state)) < CONVERGE_WINDOWS:
        return Action(ActionKind.HOLD, o.w.state.stable_n, f"observing the load mix (best N so far {p.best_n})")
    return None


def neighbour_unmeasured(o: Observing) -> Action | None:
    """Switchback: before the round converges, measure the stable's nearest candidate on either side that no
    canary has measured or ruled out (`planner.bracketed`). A live trial restarts nothing, and next to the
    stable is where a shape the planner's model cannot express (a step-time cliff, a graph-capture cap, an
    acceptance collapse) hides a better N: the model says nothing is worth it, a measurement says so."""
    p, w = o.plan, o.w
    state = w.state
    if p.next_canary is not None or not switching(state, w.tuning):
        return None
    cands = candidates(state, w.tuning)
    ruled_out = {*state.tried, *state.probed, *bracketed(state.stable_n, state.worse, cands)}
    below = [c for c in cands if c < state.stable_n]
    above = [c for c in cands if c > state.stable_n]
    near = [c for c in (below[-1:] + above[:1]) if c not in ruled_out and live_arm(state, w.tuning, c)]
    if not near:
        return None
    n = max(near, key=lambda c: p.gain.get(c, 0.0))
    state.tried.append(n)
    return start_canary(state, w.now, n, f"neighbour of the stable N={state.stable_n}, measured live before the "
                                         f"round converges (model: {p.gain.get(n, 0.0):+.1%})", p.to_json())


def nothing_worth_a_canary(o: Observing) -> Action | None:
    """No single N is worth a canary: canary the batch-size schedule if one is (schedule mode), else
    converge, noting a near tie if the plan found one."""
    p = o.plan
    if p.next_canary is not None:
        return None
    scheduled = schedule_canary(o.w)
    if scheduled is not None:
        return scheduled
    o.w.state.near_tie = p.tie_reason or None
    return converge(o.w, p.tie_reason or f"no candidate worth a canary (best N={p.best_n})", numbers=p.to_json())


def schedule_before_n(o: Observing) -> Action | None:
    """After the round's first canary, a schedule expected to beat the best single N by half a margin goes
    first: with the loads' optima apart, single N between them measure no better than the stable."""
    if o.w.state.canaries_in_round < 1:
        return None
    p = o.plan
    return schedule_canary(o.w, beat=max(p.gain.values()) + o.w.tuning.margin_for(o.w.state.method) / 2)


def canary_planned(o: Observing) -> Action:
    """Start the canary the planner chose (the N of highest value net of cost)."""
    p, state = o.plan, o.w.state
    n = p.next_canary
    assert n is not None
    state.tried.append(n)
    reason = f"expected value {p.value[n]:.2%} over cost {p.cost[n]:.2%}"
    return start_canary(state, o.w.now, n, reason, p.to_json())


def schedule_canary(w: Window, beat: float = 0.0) -> Action | None:
    """Canary the schedule `Window.schedule_proposal` gives, if any; the paired judge then decides on what
    the canary measures, as for any N."""
    proposal = w.schedule_proposal(beat)
    if proposal is None:
        return None
    state = w.state
    state.schedule_tried = True
    state.canary_schedule = proposal.rows
    reason = (f"schedule {schedule_text(proposal.rows)} expected {proposal.stable_gain:.2%} over stable "
              f"N={state.stable_n} (best single N={proposal.best_single_n})")
    return start_canary(state, w.now, proposal.num_speculative_tokens, reason, {"schedule": proposal.to_json()},
                        proposal.rows)


OBSERVING_RULES = (stable_first, tournament_first, canary_budget_spent, window_budget_spent, band_canary,
                   schedule_served,
                   retry_unproven, load_mix_young, neighbour_unmeasured, nothing_worth_a_canary, schedule_before_n,
                   canary_planned)
