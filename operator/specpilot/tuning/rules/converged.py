"""Converged: the round is over; hold, watching for what starts the next one after the cooldown.

`settle_reference` first (the acceptance reference drift is measured against), then `CONVERGED_RULES`, in
order; the first to return an action decides the window. The table check (table_check.py) goes first: it
judges the round's outcome, not the next round.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from specpilot.api.models import duration_seconds

from .. import drift, evidence
from ..actions import Action, decide
from ..context import Window, fitted_model, load_mix
from ..kinds import ActionKind, Phase
from ..observations import WindowRecord
from ..schedule import schedule_text
from .table_check import table_check_due


@dataclass
class Converged:
    """One converged window."""

    w: Window

    @cached_property
    def recent(self) -> list[WindowRecord]:
        """The stable's windows at its N since the round converged."""
        s = self.w.state
        return [r for r in s.records if r.track == "stable" and r.n == s.stable_n and r.seq > (s.converged_seq or 0)]

    @cached_property
    def retry(self) -> evidence.Evidence | None:
        """An N the round left unproven though measured better: the next round retries it (evidence.py)."""
        s = self.w.state
        return evidence.pending(s.carried, s.stable_n, s.round + 1)


def settle_reference(c: Converged) -> None:
    """Take the acceptance reference from the first REFERENCE_WINDOWS stable windows after convergence."""
    state = c.w.state
    if state.reference is None and len(c.recent) >= drift.REFERENCE_WINDOWS:
        state.reference = drift.reference(c.recent[:drift.REFERENCE_WINDOWS])


def cooling_down(c: Converged) -> Action | None:
    """Hold during spec.tuning.cooldown after convergence (saying whether a retry follows)."""
    state, w = c.w.state, c.w
    if state.converged_at is not None and w.now - state.converged_at < duration_seconds(w.tuning.cooldown):
        then = f"; then a retry of {c.retry.describe()}" if c.retry else ""
        return Action(ActionKind.HOLD, state.stable_n, f"converged (cooldown{then})")
    return None


def acceptance_drifted(c: Converged) -> Action | None:
    """A new round when acceptance drifted (drift.detect): what was learnt about survival is stale (its
    records and any evidence go); the step-time model is not."""
    state = c.w.state
    reason = drift.detect(state.reference, c.recent[drift.REFERENCE_WINDOWS:], c.w.tuning.drift_threshold) \
        if state.reference else None
    if not reason:
        return None
    state.records = c.recent[-drift.ACCEPTANCE_WINDOWS:]
    state.carried = []
    return new_round(c.w, f"drift: {reason}")


def retry_due(c: Converged) -> Action | None:
    """A new round to retry an N the round left unproven though measured better (evidence.py)."""
    return new_round(c.w, f"retry: {c.retry.describe()}") if c.retry is not None else None


def schedule_served(c: Converged) -> Action | None:
    """Schedule mode: hold while a schedule is served; it already follows the load, and the planner's
    single-N view of it would not (in single mode single N are canaried against it)."""
    state = c.w.state
    if state.stable_schedule is not None and c.w.tuning.mode == "schedule":
        return Action(ActionKind.HOLD, state.stable_n, f"converged; serving schedule "
                                                       f"{schedule_text(state.stable_schedule)}")
    return None


def load_mix_moved(c: Converged) -> Action:
    """A new round when the planner finds a canary worth it on the recent load mix and, on the mix the round
    converged on, would not, or would for another best N; else hold. A round that ended on its budget, or a
    model that moved with more windows at the same N, is not the load mix moving, and a new round for it
    would only spend canaries the budget denied."""
    state, w = c.w.state, c.w
    model = fitted_model(state)
    p = w.plan(model, load_mix(state))
    if p.next_canary is None:
        state.near_tie = p.tie_reason or None
        return Action(ActionKind.HOLD, state.stable_n, f"converged; {p.tie_reason}" if p.tie_reason else "converged")
    if state.converged_loads is not None:
        back_then = w.plan(model, state.converged_loads)
        if back_then.next_canary is not None and back_then.best_n == p.best_n:
            return Action(ActionKind.HOLD, state.stable_n, "converged")
    return new_round(w, f"drift: load mix moved: a canary at N={p.next_canary} is worth it now (best N={p.best_n})")


CONVERGED_RULES = (table_check_due, cooling_down, acceptance_drifted, retry_due, schedule_served, load_mix_moved)


def new_round(w: Window, reason: str) -> Action:
    """Start a new round in observing, its budgets and tried lists fresh."""
    state = w.state
    state.round += 1
    state.near_tie = None
    state.schedule_tried = False
    state.canaries_in_round = 0
    state.windows_in_round = 0
    state.tried = []
    state.probed = []
    state.worse = []
    state.band_records = []
    state.reference = None
    state.enter(Phase.OBSERVING, w.now)
    return decide(state, w.now, Action(ActionKind.HOLD, state.stable_n, reason), {})
