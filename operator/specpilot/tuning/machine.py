"""The tuner's state machine: one pure `step()` per analysis window.

    state = TunerState.from_status(status.get("tuning"), method=..., stable_n=..., block_size=...)
    state, action = step(state, spec.tuning, observations, now)
    status["tuning"] = state.to_status()

Phases: observing -> canary_starting -> analysing -> promoting | rolling_back -> observing ... -> converged;
drift after convergence (and the cooldown) starts a new round in observing. `step` never mutates its
input state and depends on nothing but its arguments.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import numpy as np

from specpilot.api.models import Tuning, duration_seconds
from specpilot_runtime.speculative import METHODS, Family, max_n

from . import drift, evidence
from .judge import (EXTEND, MIN_WINDOWS, Verdict, health_problem, judge, load_octaves, out_of_room, paired,
                    promotion_power)
from .kinds import CANARY_PHASES, ActionKind, Phase, Ruling
from .observations import Observations, WindowRecord, alone, measurable, record
from .planner import Plan, plan, posterior_goodput
from .schedule import ScheduleProposal, TrackDrafting, propose, schedule_text, steady_k
from .state import ANALYSIS_KEPT, LOADS_KEPT, TunerState
from .step_model import StepModel, timings
from .transfer import known

# Stable windows at the current N needed before the first plan of a round.
OBSERVE_WINDOWS = 2
# Windows of load seen in a round before it may converge: the best N depends on the load mix, and two
# windows may not have seen it yet (a canary can start earlier: it is itself a way to learn).
CONVERGE_WINDOWS = 6
# Windows in the load mix (`load_mix`: recent stable windows, kept across rounds unless acceptance drifted)
# before a canary the judge found better is promoted (at its last look it is promoted anyway): a heavy
# level 10% of the time, which may carry most of the goodput, is missed by 8 windows 2 times in 5, by 16 1
# time in 6. A parallel drafter +38% at 1-4 sequences per pod was promoted after 9 windows, all light; at
# 64 and 256 it loses 16-21%, -5.4% over the mix.
PROMOTE_MIX_WINDOWS = 16
# Default candidate ceiling when the spec lists none: the source article's sweeps (docs/references.md §1)
# for sequential and lookup drafters went to 7; parallel drafters are bounded by their block size instead.
DEFAULT_MAX_CANDIDATE: dict[Family, int] = {Family.SEQUENTIAL: 8, Family.NEAR_FREE: 8}
# A canary needs the judge's MIN_WINDOWS paired windows (those it spends starting are not the budget's).
CANARY_MIN_WINDOWS = MIN_WINDOWS
# A proven canary is rolled back to probe a better N only while that N's expected lead over it is at most
# this many margins: a larger lead is provable against the canary once promoted, and promoting first banks
# the proven gain (N=2 proven +32% was rolled back to probe N=1, expected 10% ahead of it; the probe ran
# out of round, and the stable stayed 27% worse than N=1 for the run).
PROBE_LEAD_MARGINS = 3.0


@dataclass(frozen=True)
class Action:
    """What the controller should do after this window.

    hold: nothing changes. start_canary: create the canary track at `n`. keep_analysing: leave the canary
    running. promote: roll the stable track to `n` and remove the canary. rollback: remove the canary.
    stop: remove any canary and stop tuning this round (disabled, or the round's budget is spent).
    """

    kind: ActionKind
    n: int | None = None
    reason: str = ""
    schedule: list[list[int]] | None = None  # start_canary/promote: the track's batch-size schedule
    # start_canary/promote/rollback of a method canary: the contender (0 = spec.speculative, i >= 1 =
    # spec.tuning.alternatives[i - 1]) the track runs; None: the stable track's own method (tournament.py).
    contender: int | None = None
    # rollback: the canary was proven better, and goes so that what it measured points to can be canaried
    # against the same stable (a probe); not a failure.
    probe: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n, "reason": self.reason, "schedule": self.schedule,
                "contender": self.contender, "probe": self.probe}


def candidates(state: TunerState, tuning: Tuning) -> list[int]:
    """N values the tuner may choose: the spec's list, else 0..the method's useful limit."""
    limit = max_n(state.method, state.block_size)
    if tuning.candidates:
        return sorted({n for n in tuning.candidates if 0 <= n <= limit})
    family = METHODS[state.method].family
    return list(range(0, min(limit, DEFAULT_MAX_CANDIDATE.get(family, limit)) + 1))


def fitted_model(state: TunerState) -> StepModel:
    return StepModel(METHODS[state.method].family, state.pairs, timings(state.records))


def load_mix(state: TunerState) -> list[float]:
    return [r.mix_load for r in state.records if r.track == "stable"][-LOADS_KEPT:]


def _share(tuning: Tuning, obs: Observations) -> float:
    """Fraction of traffic a canary takes (traffic splits by replicas)."""
    stable_pods = obs.stable.desired_pods if obs.stable else 1
    return tuning.canary.replicas / (tuning.canary.replicas + max(stable_pods, 1))


def judge_power(model: StepModel, tuning: Tuning) -> Callable[[np.ndarray], np.ndarray]:
    """The judge's chance of promoting a true gain, with the per-window spread the paired step times show."""
    noise_sd = math.sqrt(model.noise_var)
    return partial(promotion_power, margin=tuning.promotion_margin, confidence=tuning.confidence,
                   noise_sd=noise_sd, windows=tuning.canary.windows)


def _plan(state: TunerState, tuning: Tuning, obs: Observations, model: StepModel, loads: list[float]) -> Plan:
    """The planner on the tuner's measurements, for the load mix `loads`; N tried this round excluded."""
    return plan(state.method, state.records, model, candidates(state, tuning), state.stable_n, loads,
                tuning.objective, tuning.promotion_margin, _share(tuning, obs), exclude=state.tried,
                power=judge_power(model, tuning))


def mix_wait(state: TunerState, tuning: Tuning, v: Verdict) -> str | None:
    """Why a canary the judge would promote keeps analysing for now (None: promote): the load mix holds
    fewer than PROMOTE_MIX_WINDOWS windows, and the canary has windows left."""
    seen = len(load_mix(state))
    if seen >= PROMOTE_MIX_WINDOWS or v.windows >= EXTEND * tuning.canary.windows:
        return None
    return f"{v.reason}; load mix seen in {seen} of the {PROMOTE_MIX_WINDOWS} windows a promotion waits for"


def young_mix_wait(loads: list[float], drafting: TrackDrafting, tuning: Tuning, v: Verdict) -> str | None:
    """Why a canary the judge would roll back on its numbers keeps analysing for now (None: roll back):
    the load mix holds fewer than PROMOTE_MIX_WINDOWS windows and has shown more than one level (a steady
    load is not waited on), the canary has windows left, and it would gain at the loads not seen yet that
    weigh most in the objective. The judge weighs only the loads the mix has shown; a heavy hour not shown
    yet may carry most of the throughput (a parallel drafter's N=2, truly +3.6% over its N=7 with 30% of the
    windows at 64-256 sequences per pod, measured -29% in 4 windows at 1-4 and was never tried again that
    round). Throughput weighs a window by the tokens its pods served, so heavier loads than seen matter and
    a canary drafting less there may gain; latency weighs each sequence's speed, fastest at light loads, so
    lighter ones matter and a canary drafting more there may gain."""
    if len(loads) >= PROMOTE_MIX_WINDOWS or v.windows >= EXTEND * tuning.canary.windows \
            or len(load_octaves(loads)[0]) < 2:
        return None
    if tuning.objective == "throughput":
        if drafting.direction(max(loads) * 2.0) >= 0:
            return None
        where = "less at loads heavier than seen"
    else:
        lighter = min(loads) / 2.0
        if lighter < 1.0 or drafting.direction(lighter) <= 0:
            return None
        where = "more at loads lighter than seen"
    return (f"{v.reason}; waiting: load mix seen in {len(loads)} of the {PROMOTE_MIX_WINDOWS} windows, and the "
            f"canary speculates {where}, where it may gain")


def decide(state: TunerState, now: float, action: Action, numbers: dict[str, Any]) -> Action:
    entry = {"time": now, "seq": state.seq, "round": state.round, "phase": state.phase,
             "action": action.kind, "n": action.n, "reason": action.reason, "numbers": numbers}
    if action.schedule is not None:
        entry["schedule"] = action.schedule
    if action.contender is not None:
        entry["contender"] = action.contender
    if action.probe:
        entry["probe"] = True
    state.log(entry)
    return action


def _observe(state: TunerState, tuning: Tuning, obs: Observations, now: float, wait: str | None = None) -> Action:
    at_stable = [r for r in state.records if r.n == state.stable_n]
    if len(at_stable) < OBSERVE_WINDOWS or not any(r.track == "stable" for r in state.records):
        return Action(ActionKind.HOLD, state.stable_n, "observing the stable track")
    if wait:
        return Action(ActionKind.HOLD, state.stable_n, wait)
    if state.canaries_in_round >= tuning.max_canaries_per_round:
        return _converge(state, tuning, now, "canary budget of the round spent", stop=True)
    left = tuning.max_windows_per_round - state.windows_in_round
    if left < CANARY_MIN_WINDOWS:
        # A canary started now would restart a pod and be stopped by the budget before any verdict.
        return _converge(state, tuning, now, f"window budget of the round spent: {max(left, 0)} windows left, "
                                             f"a canary needs {CANARY_MIN_WINDOWS} for a verdict", stop=True)
    if state.stable_schedule is not None and state.schedule_tried and tuning.mode == "schedule":
        # The schedule came from this round's single-N search and beat its result: the round is done.
        return _converge(state, tuning, now, f"serving schedule {schedule_text(state.stable_schedule)} "
                                             f"(started N={state.stable_n})")
    retry = _retry(state, tuning, now)
    if retry is not None:
        return retry
    model = fitted_model(state)
    p = _plan(state, tuning, obs, model, load_mix(state))
    if p.next_canary is None and len(load_mix(state)) < CONVERGE_WINDOWS:
        return Action(ActionKind.HOLD, state.stable_n, f"observing the load mix (best N so far {p.best_n})")
    if p.next_canary is None:
        scheduled = _schedule_canary(state, tuning, now)
        if scheduled is not None:
            return scheduled
        state.near_tie = p.tie_reason or None
        return _converge(state, tuning, now, p.tie_reason or f"no candidate worth a canary (best N={p.best_n})",
                         numbers=p.to_json())
    n = p.next_canary
    if state.canaries_in_round >= 1:
        # A schedule expected to beat the best single N by half a margin goes first: with the loads' optima
        # apart, single N between them are measured as no better than the stable, round after round.
        scheduled = _schedule_canary(state, tuning, now, beat=max(p.gain.values()) + tuning.promotion_margin / 2)
        if scheduled is not None:
            return scheduled
    state.canary_n = n
    state.canaries_in_round += 1
    state.tried.append(n)
    state.enter(Phase.CANARY_STARTING, now)
    reason = f"expected value {p.value[n]:.2%} over cost {p.cost[n]:.2%}"
    return decide(state, now, Action(ActionKind.START_CANARY, n, reason), p.to_json())


def _retry(state: TunerState, tuning: Tuning, now: float) -> Action | None:
    """The round's first canary, when an earlier round left an N (or a schedule) measured better than the
    stable but unproven: that canary again, its windows pooled with the earlier ones (evidence.py)."""
    ev = evidence.pending(state.carried, state.stable_n, state.round) if state.stable_schedule is None else None
    if ev is None:
        return None
    if ev.n not in candidates(state, tuning) or (ev.schedule is not None and tuning.mode != "schedule"):
        state.carried = [e for e in state.carried if e is not ev]  # the spec no longer allows that canary
        return None
    state.carried = [dataclasses.replace(e, retried=True) if e is ev else e for e in state.carried]
    state.canary_n = ev.n
    state.canary_schedule = ev.schedule
    state.canaries_in_round += 1
    if ev.schedule is None:
        state.tried.append(ev.n)
    else:
        state.schedule_tried = True  # the round's schedule canary
    state.enter(Phase.CANARY_STARTING, now)
    return decide(state, now, Action(ActionKind.START_CANARY, ev.n, f"retry: {ev.describe()}; this canary's "
                                                                    f"windows pool with those", ev.schedule), {})


def _schedule_proposal(state: TunerState, tuning: Tuning, beat: float = 0.0) -> ScheduleProposal | None:
    """Schedule mode, once per round: the batch-size schedule the measurements propose (started N +
    schedule) when it may be canaried: it has two or more ranges, differs from what the stable serves, and is
    expected to beat the stable track by the margin and by `beat` (so its `stable_gain` is set); None
    otherwise."""
    if tuning.mode != "schedule" or state.schedule_tried \
            or state.canaries_in_round >= tuning.max_canaries_per_round:
        return None
    proposal = propose(state.method, state.records, fitted_model(state), candidates(state, tuning), load_mix(state),
                       tuning.objective, state.stable_n, state.stable_schedule)
    gain = proposal.stable_gain
    if len(proposal.entries) < 2 or proposal.num_speculative_tokens < 1 or gain is None \
            or gain < max(tuning.promotion_margin, beat) or proposal.rows == state.stable_schedule:
        return None
    return proposal


def _schedule_canary(state: TunerState, tuning: Tuning, now: float, beat: float = 0.0) -> Action | None:
    """Canary the schedule `_schedule_proposal` gives, if any; the paired judge then decides on what the
    canary measures, as for any N."""
    proposal = _schedule_proposal(state, tuning, beat)
    if proposal is None:
        return None
    state.schedule_tried = True
    state.canary_n = proposal.num_speculative_tokens
    state.canary_schedule = proposal.rows
    state.canaries_in_round += 1
    state.enter(Phase.CANARY_STARTING, now)
    reason = (f"schedule {schedule_text(proposal.rows)} expected {proposal.stable_gain:.2%} over stable "
              f"N={state.stable_n} (best single N={proposal.best_single_n})")
    return decide(state, now, Action(ActionKind.START_CANARY, state.canary_n, reason, proposal.rows),
                   {"schedule": proposal.to_json()})


def _converge(state: TunerState, tuning: Tuning, now: float, reason: str, stop: bool = False,
              numbers: dict[str, Any] | None = None) -> Action:
    state.reference = None  # set from the steady state that follows (see _converged)
    state.converged_at = now
    state.converged_seq = state.seq
    state.converged_loads = [round(b, 2) for b in load_mix(state)]
    numbers = dict(numbers or {})
    if tuning.mode == "schedule":
        proposal = propose(state.method, state.records, fitted_model(state), candidates(state, tuning),
                           load_mix(state), tuning.objective, state.stable_n, state.stable_schedule)
        state.schedule = proposal.to_json()
        numbers["schedule"] = state.schedule
    state.enter(Phase.CONVERGED, now)
    return decide(state, now, Action(ActionKind.STOP if stop else ActionKind.HOLD, state.stable_n, reason), numbers)


def _canary_starting(state: TunerState, tuning: Tuning, obs: Observations, now: float) -> Action:
    c = obs.canary
    if c is not None and c.n == state.canary_n and c.ready_pods >= c.desired_pods > 0:
        # This window straddles the restart and warm-up; analysis starts with the next one.
        state.analysis_from_seq = state.seq + 1
        state.enter(Phase.ANALYSING, now)
        return Action(ActionKind.KEEP_ANALYSING, state.canary_n, "canary ready")
    if now - state.phase_since > duration_seconds(tuning.canary.progress_deadline):
        return _rollback(state, now, "canary not ready within progressDeadline", {})
    return Action(ActionKind.KEEP_ANALYSING, state.canary_n, "waiting for the canary to be ready")


def _rollback(state: TunerState, now: float, reason: str, numbers: dict[str, Any], probe: bool = False) -> Action:
    n = state.canary_n
    # A retry is spent whatever ended it.
    ev = evidence.running(state.carried, state.stable_n, n, state.canary_schedule)
    state.carried = [e for e in state.carried if e is not ev]
    state.canary_n = None
    state.canary_schedule = None
    state.analysis_from_seq = None
    state.enter(Phase.ROLLING_BACK, now)
    return decide(state, now, Action(ActionKind.ROLLBACK, n, reason, probe=probe), numbers)


def _analyse(state: TunerState, tuning: Tuning, obs: Observations, now: float) -> Action:
    problem = health_problem(obs.stable, obs.canary, tuning.error_gate)
    if problem:
        return _rollback(state, now, problem, {})
    since = state.analysis_from_seq or 0
    window = [r for r in state.records if r.seq >= since]
    canary = [r for r in window if r.track == "canary"]
    model = fitted_model(state)
    loads = load_mix(state)
    round_stable = [r for r in state.records if r.track == "stable"]
    ev = evidence.running(state.carried, state.stable_n, state.canary_n, state.canary_schedule)
    if ev is not None:
        seen = {r.seq for r in round_stable}
        round_stable += [r for r in ev.records if r.track == "stable" and r.seq not in seen]
    carried = [r for r in ev.records if r.track == "canary"] if ev else []
    carried += _borrowed(state, since, {r.seq for r in carried})
    assert state.canary_n is not None
    drafting = TrackDrafting(state.method, state.stable_n, state.stable_schedule, state.canary_n,
                             state.canary_schedule)
    v = out_of_room(judge(round_stable, carried + canary, loads, tuning.objective, tuning.promotion_margin,
                          tuning.confidence, tuning.canary.windows, len(carried), drafting), ANALYSIS_KEPT)
    numbers: dict[str, Any] = {"verdict": v.to_json(), "step_model": model.summary()}
    pairs = paired(round_stable, canary)
    if v.decision != Ruling.CONTINUE:
        _carry(state, tuning, v, ev, pairs)
    if v.decision == Ruling.CONTINUE and v.windows < tuning.canary.windows \
            and state.seq - since + 1 >= 2 * tuning.canary.windows:
        # Windows go by but the canary yields no comparable data (no traffic, wrong N): give up on it.
        return _rollback(state, now, f"only {v.windows} comparable windows in {state.seq - since + 1}", numbers)
    if v.decision == Ruling.CONTINUE:
        return Action(ActionKind.KEEP_ANALYSING, state.canary_n, v.reason)
    if v.decision == Ruling.ROLLBACK:
        wait = None if v.inconclusive else young_mix_wait(loads, drafting, tuning, v)
        if wait:
            return Action(ActionKind.KEEP_ANALYSING, state.canary_n, wait)
        return _rollback(state, now, v.reason, numbers)
    c = state.canary_n
    assert c is not None
    wait = mix_wait(state, tuning, v)
    if state.canary_schedule is not None:
        if wait:
            return Action(ActionKind.KEEP_ANALYSING, c, wait)
        return _promote(state, now, Action(ActionKind.PROMOTE, c, v.reason, state.canary_schedule), numbers)
    # The canary is better. If what it measured shows another untried N to be better still, use the
    # canary as a probe: roll it back and let the planner go straight there (promoting c first would make
    # that N compete against c with the margin, and the margin would hide the remaining gain). When that
    # N may plausibly be ahead (probability above 1 - confidence), keep analysing while windows remain:
    # the paired step times sharpen the step-time model, which is what separates neighbours.
    p = _plan(state, tuning, obs, model, loads)
    numbers["plan"] = p.to_json()
    measured = known(state.method, state.records)
    # An N canaried against this stable N before (an earlier round's too) and not proven better was judged
    # on its own windows: the model's expectation does not overturn that verdict at the price of a proven
    # canary (an n-gram N=2, proven, was rolled back to probe N=1, expected +15% by the shapes at the alone
    # load where its own canary had measured -5%; N=1 then measured -0.9%). A probed N was proven better.
    judged = {q.n_canary for q in state.pairs if q.n_stable == state.stable_n} - set(state.probed)
    rivals = [n for n in p.gain
              if n in measured and n not in state.tried and n not in judged and n != state.stable_n]
    alt = max(rivals, key=p.gain.__getitem__, default=None)
    # A canary is a probe once per stable N: two canaries each proven better than the stable, each expected
    # to trail the other, would otherwise probe each other until the round's budget ran out.
    lead = (1.0 + p.gain[alt]) / (1.0 + p.gain[c]) - 1.0 if alt is not None else 0.0
    # A retry is never a probe: it is what an earlier probe, or an earlier round, left to prove.
    if ev is None and alt is not None and c not in state.probed \
            and p.gain[c] + tuning.promotion_margin / 2 < p.gain[alt] \
            and lead <= PROBE_LEAD_MARGINS * tuning.promotion_margin:
        return _probe(state, now, c, f"probe: N={alt} expected {p.gain[alt]:.1%} over stable, "
                                     f"N={c} {p.gain[c]:.1%}", numbers, v, pairs)
    why = _schedule_probe(state, tuning, c, p.gain[c]) if ev is None else None
    if why:
        return _probe(state, now, c, why, numbers, v, pairs)
    if alt is not None and v.windows < tuning.canary.windows:
        g = posterior_goodput(state.method, state.records, model, [alt, c], loads, tuning.objective)
        p_alt = float((g[:, 0] > g[:, 1]).mean())
        if p_alt > 1.0 - tuning.confidence:
            return Action(ActionKind.KEEP_ANALYSING, c,
                          f"better than stable; N={alt} better still with probability {p_alt:.0%}")
    if wait:
        return Action(ActionKind.KEEP_ANALYSING, c, wait)
    return _promote(state, now, Action(ActionKind.PROMOTE, c, v.reason), numbers)


def _probe(state: TunerState, now: float, c: int, reason: str, numbers: dict[str, Any], v: Verdict,
           pairs: list[tuple[WindowRecord, WindowRecord]]) -> Action:
    """Roll back the proven canary `c` as a probe. It stays a candidate: should what it points to fail, the
    planner may come back to a proven winner; should the round end first (its budget spent on what the
    probe pointed to), its windows are evidence that the next round retries first (evidence.py). Without
    them a day could pass at the stable: a block drafter's N=4, proven +11.6% over the default 7, was
    probed for a schedule the round's budget then cut short, and the rounds after it saw nothing new."""
    state.tried.remove(c)
    state.probed.append(c)
    if state.stable_schedule is None:
        state.carried = evidence.keep(state.carried, evidence.measured(c, None, state.stable_n, state.round,
                                                                      v.gain, pairs, proven=True))
    return _rollback(state, now, reason, numbers, probe=True)


def _schedule_probe(state: TunerState, tuning: Tuning, c: int, gain: float) -> str | None:
    """Schedule mode: the reason to roll a proven N back as a probe when what it measured proposes a
    schedule that may be canaried next (`_schedule_proposal`) and is expected to beat it by half a margin
    (None: promote it). Against the stable it replaced, the schedule's gain is the canary's and more, and it
    starts with the canary's windows at the loads where it drafts as the canary did (`_borrowed`); promoted
    first, the canary would leave the schedule only the difference between them to prove."""
    if c in state.probed or tuning.max_windows_per_round - state.windows_in_round < tuning.canary.windows:
        return None  # no room left in the round to prove the schedule: bank the proven N
    proposal = _schedule_proposal(state, tuning, beat=gain + tuning.promotion_margin / 2)
    if proposal is None:
        return None
    g = float(proposal.stable_gain or 0.0)
    if (1.0 + g) / (1.0 + gain) - 1.0 > PROBE_LEAD_MARGINS * tuning.promotion_margin:
        return None
    return (f"probe: schedule {schedule_text(proposal.rows)} expected {g:.1%} over stable, "
            f"N={c} {gain:.1%}")


def _borrowed(state: TunerState, since: int, taken: set[int]) -> list[WindowRecord]:
    """A schedule canary's head start: the windows in which an earlier canary of this acceptance regime
    (an N, no schedule) ran against the same stable N (no schedule either) at a load where that N drafts
    what the schedule drafts there (`TrackDrafting.identical`). There the two canaries are one
    configuration, so those pairs measure the schedule at that load as much as its own would: a schedule
    that takes N=7's K at light loads starts with what N=7's canary measured there. They count as the
    judge's carried windows (the estimate, not the window limits; the stricter promotion boundary): the
    schedule was proposed from them."""
    if state.canary_schedule is None or state.stable_schedule is not None or state.canary_n is None:
        return []
    stable = {r.seq: r for r in state.records if r.track == "stable" and r.step_s}
    out = []
    for r in state.records:
        s = stable.get(r.seq)
        if r.track != "canary" or r.seq >= since or r.seq in taken or r.scheduled or r.n <= 0 or not r.step_s \
                or s is None or s.n != state.stable_n or s.scheduled:
            continue
        if TrackDrafting(state.method, r.n, None, state.canary_n, state.canary_schedule).identical(r.load):
            out.append(r)
    return out


def _carry(state: TunerState, tuning: Tuning, v: Verdict, ev: evidence.Evidence | None,
           pairs: list[tuple[WindowRecord, WindowRecord]]) -> None:
    """After a verdict: a first canary rolled back unproven while measuring better than the stable by the
    margin leaves its windows for a retry in a later round (a retry's own evidence is spent by `_rollback`)."""
    if ev is None and v.inconclusive and v.gain >= tuning.promotion_margin and state.canary_n is not None \
            and state.stable_schedule is None:
        state.carried = evidence.keep(state.carried, evidence.measured(
            state.canary_n, state.canary_schedule, state.stable_n, state.round, v.gain, pairs))


def _promote(state: TunerState, now: float, action: Action, numbers: dict[str, Any]) -> Action:
    """The canary's N and schedule (None: N at every batch size) become the stable track's."""
    assert action.n is not None
    state.stable_n = action.n
    state.stable_schedule = action.schedule
    state.canary_n = None
    state.canary_schedule = None
    state.analysis_from_seq = None
    # An N rolled back against the old stable (or before the round had seen its whole load mix) may well
    # beat the new one: against it, only the planner's value and the round's budget rule it out.
    state.tried = []
    state.probed = []
    state.carried = []  # measured against the old stable N
    state.enter(Phase.PROMOTING, now)
    return decide(state, now, action, numbers)


def record_window(state: TunerState, obs: Observations, in_round: bool = True) -> None:
    """Keep the window's records (and paired step times) in `state`. `in_round`: the window counts against
    the round's window budget (a method canary's windows do not: they tune no N). Nor do the windows a
    canary spends starting: the budget is for analysis, a restart takes from seconds (a simulated engine)
    to minutes (a large model loading, vLLM on CPU), and progressDeadline already bounds it."""
    state.seq += 1
    state.windows_in_round += in_round and state.phase != Phase.CANARY_STARTING
    recs: dict[str, WindowRecord] = {}
    if measurable(obs.stable, obs.window_s) and obs.stable.n == state.stable_n:
        recs["stable"] = record(state.seq, "stable", obs.stable, obs.window_s, state.stable_schedule is not None)
        beside, beside_pods = None, 0
        if measurable(obs.canary, obs.window_s):
            beside = record(state.seq, "canary", obs.canary, obs.window_s)  # any canary pods, analysed or not
            beside_pods = obs.canary.ready_pods
        if beside is not None or (obs.canary is not None and obs.stable_replicas):
            recs["stable"] = alone(recs["stable"], obs.stable.ready_pods, beside, beside_pods, obs.stable_replicas)
    analysing = state.phase == Phase.ANALYSING and state.analysis_from_seq is not None \
        and state.seq >= state.analysis_from_seq
    if analysing and measurable(obs.canary, obs.window_s) and obs.canary.n == state.canary_n:
        recs["canary"] = record(state.seq, "canary", obs.canary, obs.window_s, state.canary_schedule is not None)
    for r in recs.values():
        state.add_record(r)
    s, c = recs.get("stable"), recs.get("canary")
    if s and c and s.step_s and c.step_s:
        # A track serving a schedule drafts the K its running batch size gets: its step time is a point of
        # t(K) where that K holds over the window's spread of loads, and of no one K elsewhere.
        k_s = steady_k(state.stable_schedule, s.n, s.load)
        k_c = steady_k(state.canary_schedule, c.n, c.load)
        if k_s is not None and k_c is not None and k_s != k_c:
            state.add_pair(fitted_model(state).pair(k_c, k_s, (s.load + c.load) / 2, c.step_s, s.step_s))


def step(state: TunerState, tuning: Tuning, obs: Observations, now: float,
         wait: str | None = None) -> tuple[TunerState, Action]:
    """Advance the tuner by one window. Pure: returns a new state and the action for the controller.
    `wait`: why no round may plan now (the method tournament has a canary of its own to run first)."""
    st = state.copy()
    if not tuning.enabled:
        # Drop any canary; when tuning is enabled again, it resumes by observing the stable track.
        st.canary_n = None
        st.canary_schedule = None
        st.analysis_from_seq = None
        if st.phase not in (Phase.OBSERVING, Phase.CONVERGED):
            st.enter(Phase.OBSERVING, now)
        return st, Action(ActionKind.STOP, st.stable_n, "tuning disabled")
    record_window(st, obs)
    if st.phase == Phase.CONVERGED:
        return st, _converged(st, tuning, obs, now)
    if st.windows_in_round > tuning.max_windows_per_round:
        st.canary_n = None
        st.canary_schedule = None
        return st, _converge(st, tuning, now, "window budget of the round spent", stop=True)
    unwanted = _unwanted(st, tuning)
    if unwanted:
        return st, _rollback(st, now, unwanted, {})
    if st.phase == Phase.CANARY_STARTING:
        return st, _canary_starting(st, tuning, obs, now)
    if st.phase == Phase.ANALYSING:
        return st, _analyse(st, tuning, obs, now)
    if st.phase == Phase.PROMOTING:
        s = obs.stable
        if s is None or s.n != st.stable_n or s.ready_pods < s.desired_pods or obs.canary is not None:
            return st, Action(ActionKind.HOLD, st.stable_n, "waiting for the stable track to roll")
        st.enter(Phase.OBSERVING, now)
    if st.phase == Phase.ROLLING_BACK:
        if obs.canary is not None and obs.canary.ready_pods > 0:
            return st, Action(ActionKind.HOLD, None, "waiting for the canary to go")
        st.enter(Phase.OBSERVING, now)
    return st, _observe(st, tuning, obs, now, wait)


def _unwanted(state: TunerState, tuning: Tuning) -> str | None:
    """Why the running canary may no longer be promoted, the spec having been edited while it ran (it goes
    now); None when it may."""
    if state.phase not in CANARY_PHASES:
        return None
    if state.canary_n not in candidates(state, tuning):
        return f"N={state.canary_n} is no longer among the candidates (spec.tuning.candidates)"
    if state.canary_schedule is not None and tuning.mode != "schedule":
        return f"spec.tuning.mode is {tuning.mode}: the canary's batch-size schedule is no longer served"
    return None


def _converged(state: TunerState, tuning: Tuning, obs: Observations, now: float) -> Action:
    """Hold, watching for drift: acceptance moving (survival data stale), or the load mix moving so far
    that the planner finds a canary worth it again. Either starts a new round after the cooldown, as does
    an N the round left unproven though measured better (evidence.py: one retry)."""
    recent = [r for r in state.records if r.track == "stable" and r.n == state.stable_n
              and r.seq > (state.converged_seq or 0)]
    if state.reference is None and len(recent) >= drift.REFERENCE_WINDOWS:
        state.reference = drift.reference(recent[:drift.REFERENCE_WINDOWS])
    retry = evidence.pending(state.carried, state.stable_n, state.round + 1)
    if state.converged_at is not None and now - state.converged_at < duration_seconds(tuning.cooldown):
        then = f"; then a retry of {retry.describe()}" if retry else ""
        return Action(ActionKind.HOLD, state.stable_n, f"converged (cooldown{then})")
    reason = drift.detect(state.reference, recent[drift.REFERENCE_WINDOWS:], tuning.drift_threshold) \
        if state.reference else None
    if reason:
        # What was learnt about survival is stale; the step-time model is not.
        state.records = recent[-drift.ACCEPTANCE_WINDOWS:]
        state.carried = []
        reason = f"drift: {reason}"
    elif retry is not None:
        reason = f"retry: {retry.describe()}"
    elif state.stable_schedule is not None and tuning.mode == "schedule":
        # A served schedule already follows the load; the planner's single-N view of it would not. In single
        # mode (the user switched back) single N are canaried against it, and the first proven replaces it.
        return Action(ActionKind.HOLD, state.stable_n, f"converged; serving schedule "
                                                       f"{schedule_text(state.stable_schedule)}")
    else:
        model = fitted_model(state)
        p = _plan(state, tuning, obs, model, load_mix(state))
        if p.next_canary is None:
            state.near_tie = p.tie_reason or None
            return Action(ActionKind.HOLD, state.stable_n, f"converged; {p.tie_reason}" if p.tie_reason else "converged")
        if state.converged_loads is not None:
            back_then = _plan(state, tuning, obs, model, state.converged_loads)
            if back_then.next_canary is not None and back_then.best_n == p.best_n:
                # On the loads it converged on the round would want a canary too, for the same best N: it
                # ended on its budget, or the model moved with more windows at the same N. Neither is the
                # load mix moving, and a new round for it would only spend canaries the budget denied.
                return Action(ActionKind.HOLD, state.stable_n, "converged")
        reason = f"drift: load mix moved: a canary at N={p.next_canary} is worth it now (best N={p.best_n})"
    state.round += 1
    state.near_tie = None
    state.schedule_tried = False
    state.canaries_in_round = 0
    state.windows_in_round = 0
    state.tried = []
    state.probed = []
    state.reference = None
    state.enter(Phase.OBSERVING, now)
    return decide(state, now, Action(ActionKind.HOLD, state.stable_n, reason), {})
