"""The method tournament: which way to speculate (method and draft), as well as N.

    contenders = tournament_state.contenders_of(spec)
    tour = tournament_state.Tournament.from_status(status.get("tournament"), contenders)
    inner = TunerState.from_status(status.get("tuning"), method=contenders[tour.stable].method, ...)
    tour, inner, action = tournament.step(tour, inner, spec.tuning, contenders, obs, now)

Contenders are spec.speculative (index 0) and spec.tuning.alternatives (1, 2, ...): ways to speculate for
the same target, each with its own N. The stable track runs one of them and the N tuner (`machine.step`)
tunes its N as ever. Nothing transfers between methods: an untried contender's goodput against the stable
is unknown, 0 +- PRIOR_SD, so a canary of it is worth its expected promotable gain; against a canary's cost
(the canary's share of traffic while another checkpoint loads and while it is analysed) that is worth it
unless canaries are very dear, so each contender is tried once, at its own N, before the stable's N is
tuned (the method moves goodput by tens of percent in the source article, a step of N by a few). The paired
judge (`judge.py`) decides on the canary's measured goodput, as for any N; a promotion makes the contender
the stable's method and starts tuning its N from what its canary measured.

A contender that lost keeps what its canary measured: goodput against the stable of the time, mean accepted
length, and, from its acceptance at that N (the same transfer rules as the N tuner) and the step-time prior
of its drafter family, the N it would do best at and the goodput expected there, with its uncertainty.
Once the stable's N is tuned (converged), a contender with an N expected to beat the stable by the margin,
or with a fair chance to, gets one more canary, at the N whose value net of cost is highest: the model
chooses which canary to try, never whether it won.

Goodputs are kept relative to the configuration the tournament started from (`scale`: the stable's, moved
by each promotion's measured gain), so measurements against different stables compare.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist
from typing import Any, Callable, Sequence

import numpy as np

from specpilot.api.models import Tuning, duration_seconds
from specpilot_runtime.speculative import METHODS, OFF

from . import machine
from .judge import health_problem, judge, out_of_room
from .kinds import ActionKind, Phase, Ruling
from .machine import Action, record_window
from .observations import Observations, TrackWindow, WindowRecord, measurable, record
from .planner import ANALYSIS_WINDOWS, TIE_PROBABILITY, VALUE_HORIZON_WINDOWS, posterior_goodput
from .state import TunerState
from .step_model import Pair, StepModel, timings
from .tournament_state import MAX_FAILURE, MAX_RECORDS, Contender, Entry, Stage, Tournament

# An untried method's goodput against the stable's, in log terms: the source article's methods trade
# places by 10-40% on the same target (docs/references.md §1).
PRIOR_SD = 0.25
# Windows a method canary serves nothing: another checkpoint loads (and compiles) before it is Ready.
SWITCH_RESTART_WINDOWS = 2.0
# Stratified standard-normal quantiles: expectations over a loser's goodput at an N, deterministic.
_UNIT_QUANTILES = np.array([NormalDist().inv_cdf((i + 0.5) / 64) for i in range(64)])


def try_value(margin: float, canary_share: float) -> tuple[float, float]:
    """(value, cost) of a first canary of an untried contender, relative over the value horizon: the
    expected gain above the margin under the prior, and the canary's share of traffic lost to the restart
    and, while analysed, to a contender that turns out worse."""
    prior = NormalDist(0.0, PRIOR_SD)
    m = math.log1p(margin)
    # E[max(0, X - m)] and E[max(0, -X)] for X ~ N(0, sd).
    value = PRIOR_SD * prior.pdf(m) * PRIOR_SD - m * (1.0 - prior.cdf(m))
    loss = PRIOR_SD * prior.pdf(0.0) * PRIOR_SD
    cost = canary_share * (SWITCH_RESTART_WINDOWS + ANALYSIS_WINDOWS * loss) / VALUE_HORIZON_WINDOWS
    return value, cost


def allowed_n(contender: Contender, tuning: Tuning) -> list[int]:
    """The N the contender may run: its candidates within its method's limits, as its N tuner sees them."""
    return machine.candidates(TunerState.new(contender.method, contender.n, contender.block_size),
                              contender.tuning(tuning))


def goodput_by_n(contender: Contender, records: Sequence[WindowRecord], model: StepModel, tuning: Tuning,
                 loads: Sequence[float], at: int) -> dict[int, tuple[float, float]]:
    """From a contender's windows: per candidate N, its expected goodput relative to goodput at N=`at`,
    and the sd of that ratio."""
    cands = sorted(set(allowed_n(contender, tuning)) | {at})
    g = posterior_goodput(contender.method, records, model, cands, loads, tuning.objective)
    ratio = g / g[:, [cands.index(at)]]
    return {n: (float(ratio[:, j].mean()), float(ratio[:, j].std())) for j, n in enumerate(cands)}


def retry_value(expected: float, sd: float, margin: float, canary_share: float,
                power: Callable[[np.ndarray], np.ndarray] | None = None) -> tuple[float, float, float]:
    """(value, cost, chance) of a second canary of a loser at an N where its goodput against the stable's
    is X ~ N(`expected`, `sd`), as the N planner values a canary: the expected gain the judge could promote
    (above the margin, weighed by `power`, its chance of proving it), against the canary's share of traffic
    lost to the restart and, while analysed, to an N that turns out worse; and the chance that the canary
    is promoted."""
    x = expected + sd * _UNIT_QUANTILES
    gain = x - 1.0
    above = x > 1.0 + margin
    chance = np.where(above, power(gain) if power else 1.0, 0.0)
    value = float((gain * chance).mean())
    loss = float(np.maximum(-gain, 0.0).mean())
    cost = canary_share * (SWITCH_RESTART_WINDOWS + ANALYSIS_WINDOWS * loss) / VALUE_HORIZON_WINDOWS
    return value, cost, float(chance.mean())


def anchored_pairs(stable_model: StepModel, stable: Sequence[WindowRecord],
                   canary: Sequence[WindowRecord]) -> list[Pair]:
    """A method canary's step times as pairs against N = 0 (no speculation: the same target whatever the
    method). Its paired windows measure t_canary / t_stable; the stable's own step-time model knows
    t_stable / t(0) (exactly, when the stable runs N = 0). So each window gives log t_canary(N) / t(0),
    which pins the contender's cost curve on this machine from one canary."""
    by_seq = {r.seq: r for r in stable if r.step_s}
    both = [(by_seq[c.seq], c) for c in canary if c.step_s and c.seq in by_seq]
    if not both:
        return []
    ns = sorted({s.n for s, _ in both})
    f = stable_model.log_cost_samples(ns, [s.load for s, _ in both], 64).mean(axis=0)  # (L, J)
    return [Pair(c.n, 0, s.load, math.log(c.step_s / s.step_s) + float(f[i, ns.index(s.n)]))
            for i, (s, c) in enumerate(both) if c.step_s and s.step_s]


def anchored(inner: TunerState) -> bool:
    """Whether the stable's step cost against no speculation is measured (or it is no speculation)."""
    return inner.stable_n == 0 or any(0 in (p.n_canary, p.n_stable) for p in inner.pairs)


def _off_probe(tour: Tournament, inner: TunerState, contenders: Sequence[Contender], v: Any, now: float,
               numbers: dict[str, Any]) -> Action:
    """The stable's own method at N = 0 was canaried: its windows are the N tuner's (acceptance, paired step
    times), and what an "off" contender would have measured; a win is an N promotion of the stable's method."""
    canary = tour.records
    for i, c in enumerate(contenders):
        if c.method == OFF and i != tour.stable:
            e = tour.entries[i]
            e.measured_n, e.best_n, e.accepted_length = 0, 0, 1.0
            e.gain, e.lower, e.upper, e.expected, e.sd = v.gain, v.lower, v.upper, tour.scale * (1.0 + v.gain), 0.0
    by_seq = {r.seq: r for r in _stable_records(inner) if r.step_s}
    model = machine.fitted_model(inner)
    for r in canary:
        s = by_seq.get(r.seq)
        inner.add_record(r)
        if s is not None and s.step_s and r.step_s and s.n == inner.stable_n:
            inner.add_pair(model.pair(r.n, s.n, (s.load + r.load) / 2, r.step_s, s.step_s))
    if v.decision == Ruling.ROLLBACK:
        inner.tried.append(0)
        return _end_canary(tour, inner, ActionKind.ROLLBACK, f"N=0 (no speculation): {v.reason}", now, numbers)
    action = _end_canary(tour, inner, ActionKind.PROMOTE, f"N=0 (no speculation): {v.reason}", now, numbers)
    # An N promotion of the stable's own method: the N tuner waits for the stable track to roll.
    tour.enter(Stage.IDLE, now)
    tour.scale *= 1.0 + v.gain
    inner.stable_n, inner.tried, inner.probed = 0, [], []
    inner.enter(Phase.PROMOTING, now)
    return dataclasses.replace(action, contender=None)


def _accepted_length(records: Sequence[WindowRecord]) -> float | None:
    drafts = sum(r.drafts for r in records)
    if drafts <= 0:
        return None
    return 1.0 + sum(sum(r.accepted_per_pos) for r in records) / drafts


def _share(tuning: Tuning, obs: Observations) -> float:
    stable_pods = obs.stable.desired_pods if obs.stable else 1
    return tuning.canary.replicas / (tuning.canary.replicas + max(stable_pods, 1))


def _stable_records(inner: TunerState) -> list[WindowRecord]:
    return [r for r in inner.records if r.track == "stable"]


def _untried(tour: Tournament, tuning: Tuning, obs: Observations) -> list[int]:
    """Contenders never measured, when a first canary of one is worth its cost: they go before any N canary
    of the stable's method (a method moves goodput by tens of percent, an N by a few; N tuned for a method
    about to lose is a canary spent for nothing)."""
    value, cost = try_value(tuning.promotion_margin, _share(tuning, obs))
    if value <= cost:
        return []
    return [i for i, e in enumerate(tour.entries) if i != tour.stable and e.measured_n is None]


def _next(tour: Tournament, inner: TunerState, tuning: Tuning, contenders: Sequence[Contender],
          obs: Observations) -> tuple[int, int, str] | None:
    """The method canary to start now, if any: (contender, N, reason)."""
    if inner.phase not in (Phase.OBSERVING, Phase.CONVERGED) or inner.canary_n is not None:
        return None
    at_stable = [r for r in _stable_records(inner) if r.n == inner.stable_n]
    this_window = measurable(obs.stable, obs.window_s) and obs.stable is not None and obs.stable.n == inner.stable_n
    if len(at_stable) + this_window < machine.OBSERVE_WINDOWS \
            or inner.canaries_in_round >= tuning.max_canaries_per_round:
        return None
    value, cost = try_value(tuning.promotion_margin, _share(tuning, obs))
    untried = _untried(tour, tuning, obs)
    own = machine.candidates(inner, contenders[tour.stable].tuning(tuning))
    if untried and not anchored(inner) and 0 in own and not tour.probed_off:
        return tour.stable, 0, ("no speculation (N=0) not measured yet: it is a contender, and the anchor of "
                                "every method's step cost on this machine")
    if untried:
        c = contenders[untried[0]]
        return untried[0], c.n, (f"{c.method} untried: expected value {value:.2%} over cost {cost:.2%} "
                                 f"(its goodput is unknown until measured)")
    if inner.phase != Phase.CONVERGED:
        return None
    # Second chances, once the stable's N is tuned: the loser's N whose expected promotable gain over the
    # stable is worth its canary most. One canary at one N says little of a parallel drafter's other N, or
    # of any drafter's cost at other N on a machine unlike the prior's, so the value counts the uncertainty,
    # not just the expectation. N = 0 is no speculation whatever the method: the stable's N tuner scores it.
    share = _share(tuning, obs)
    power = machine.judge_power(machine.fitted_model(inner), tuning)
    retry = []
    for i, e in enumerate(tour.entries):
        if i == tour.stable or e.retried or e.failure is not None:
            continue
        # The status is writable by others: only an N the contender may run is ever canaried.
        allowed = set(allowed_n(contenders[i], tuning))
        for n, expected, sd in e.options:
            if n and n != e.measured_n and n in allowed:
                worth, cost, chance = retry_value(expected / tour.scale, sd / tour.scale, tuning.promotion_margin,
                                                  share, power)
                # As for an N canary (planner.py): an N expected within the margin, with little chance of
                # proving more, is a near tie; a canary spent there is rolled back (a chain drafter's N=7,
                # measured at 3 and expected 14% worse, was canaried on the spread of its deep positions).
                near_tie = expected / tour.scale - 1.0 < tuning.promotion_margin and chance < TIE_PROBABILITY
                if worth > cost and not near_tie:
                    retry.append((worth - cost, i, n, expected / tour.scale - 1.0, worth, cost, chance))
    if not retry:
        return None
    _, i, n, gain, worth, cost, chance = max(retry)
    return i, n, (f"{contenders[i].method} at N={n} expected {gain:+.1%} against the stable (measured at "
                  f"N={tour.entries[i].measured_n}): value {worth:.2%} over cost {cost:.2%}, "
                  f"{chance:.0%} chance of a promotion")


def _start(tour: Tournament, inner: TunerState, pick: tuple[int, int, str], now: float) -> Action:
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
    return machine.decide(inner, now, Action(ActionKind.START_CANARY, n, reason, contender=i), {})


def _ready(c: TrackWindow | None, n: int | None, method: str) -> bool:
    want = OFF if n == 0 else method  # N = 0 runs no speculation, whatever the contender's method
    return c is not None and c.n == n and c.method in (None, want) and c.ready_pods >= c.desired_pods > 0


def _failed(tour: Tournament, inner: TunerState, reason: str, now: float) -> Action:
    """The canary measured nothing (never Ready, unhealthy): a contender that fails so is not tried again
    (another checkpoint that does not load would fail every time); rolled back."""
    i, n = tour.canary, tour.canary_n
    if i is not None and i != tour.stable:
        entry = tour.entries[i]
        entry.measured_n = entry.measured_n if entry.measured_n is not None else n
        entry.failure = reason[:MAX_FAILURE]
    return _end_canary(tour, inner, ActionKind.ROLLBACK, reason, now, {})


def _end_canary(tour: Tournament, inner: TunerState, kind: ActionKind, reason: str, now: float,
                numbers: dict[str, Any]) -> Action:
    i, n = tour.canary, tour.canary_n
    tour.canary, tour.canary_n, tour.analysis_from_seq, tour.records = None, None, None, []
    tour.enter(Stage.ROLLING_BACK if kind == ActionKind.ROLLBACK else Stage.SWITCHING, now)
    return machine.decide(inner, now, Action(kind, n, reason, contender=i), numbers)


def _measure(entry: Entry, contender: Contender, records: Sequence[WindowRecord], model: StepModel,
             tuning: Tuning, loads: Sequence[float], n: int, level: float, verdict: Any | None) -> None:
    """Keep what was measured of a contender at N; `level`: its goodput there, relative to the start.
    `records` and `model` are all that is known of it: its windows, and its step times against N = 0."""
    entry.records, entry.pairs = list(records)[-MAX_RECORDS:], list(model.pairs)[-MAX_RECORDS:]
    entry.measured_n = n
    if verdict is not None:
        entry.gain, entry.lower, entry.upper = verdict.gain, verdict.lower, verdict.upper
    entry.accepted_length = _accepted_length([r for r in records if r.n == n])
    by_n = goodput_by_n(contender, records, model, tuning, loads, n)
    best = max(by_n, key=lambda k: by_n[k][0])
    entry.best_n, entry.expected, entry.sd = best, level * by_n[best][0], level * by_n[best][1]
    entry.options = [(k, level * mean, level * sd) for k, (mean, sd) in sorted(by_n.items()) if k != n]


def _analyse(tour: Tournament, inner: TunerState, tuning: Tuning, contenders: Sequence[Contender],
             obs: Observations, now: float) -> Action:
    problem = health_problem(obs.stable, obs.canary, tuning.error_gate)
    if problem:
        return _failed(tour, inner, problem, now)
    loads = machine.load_mix(inner)
    v = out_of_room(judge(_stable_records(inner), tour.records, loads, tuning.objective, tuning.promotion_margin,
                          tuning.confidence, tuning.canary.windows), MAX_RECORDS)
    numbers = {"verdict": v.to_json()}
    since = tour.analysis_from_seq or inner.seq
    if v.decision == Ruling.CONTINUE and v.windows < tuning.canary.windows \
            and inner.seq - since + 1 >= 2 * tuning.canary.windows:
        v = dataclasses.replace(v, decision=Ruling.ROLLBACK,
                                reason=f"only {v.windows} comparable windows in {inner.seq - since + 1}")
    if v.decision == Ruling.CONTINUE:
        return Action(ActionKind.KEEP_ANALYSING, tour.canary_n, v.reason, contender=tour.canary)
    i, n = tour.canary, tour.canary_n
    assert i is not None and n is not None
    if i == tour.stable:
        return _off_probe(tour, inner, contenders, v, now, numbers)
    c, e = contenders[i], tour.entries[i]
    pairs = e.pairs + anchored_pairs(machine.fitted_model(inner), _stable_records(inner), tour.records)
    records = e.records + tour.records
    _measure(e, c, records, StepModel(METHODS[c.method].family, pairs, timings(records)), tuning, loads, n,
             tour.scale * (1.0 + v.gain), v)
    if v.decision == Ruling.ROLLBACK:
        return _end_canary(tour, inner, ActionKind.ROLLBACK, f"{c.method} N={n}: {v.reason}", now, numbers)
    # Promoted: the stable's contender is now measured against the winner, its best N estimated from its
    # own windows (and the step times its N canaries paired).
    old = tour.stable
    back = dataclasses.replace(v, gain=1.0 / (1.0 + v.gain) - 1.0, lower=1.0 / (1.0 + v.upper) - 1.0,
                               upper=1.0 / (1.0 + v.lower) - 1.0)
    _measure(tour.entries[old], contenders[old], inner.records, machine.fitted_model(inner), tuning, loads,
             inner.stable_n, tour.scale, back)
    tour.scale *= 1.0 + v.gain
    tour.stable = i
    return _end_canary(tour, inner, ActionKind.PROMOTE, f"{c.method} N={n}: {v.reason}", now, numbers)


def _switched(tour: Tournament, inner: TunerState, contenders: Sequence[Contender], promoted: list[WindowRecord],
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


def step(tour: Tournament, inner: TunerState, tuning: Tuning, contenders: Sequence[Contender],
         obs: Observations, now: float) -> tuple[Tournament, TunerState, Action]:
    """Advance by one window. Pure: returns new tournament and N-tuner states and the controller's action."""
    t = tour.copy()
    own = contenders[t.stable].tuning(tuning)
    if not tuning.enabled or len(contenders) < 2:
        if t.canary is not None:
            t.canary, t.canary_n, t.records = None, None, []
            t.enter(Stage.IDLE, now)
        st, action = machine.step(inner, own, obs, now)
        return t, st, action
    if t.stage == Stage.IDLE:
        pick = _next(t, inner, tuning, contenders, obs)
        if pick is None:
            first = _untried(t, tuning, obs) if inner.canaries_in_round < tuning.max_canaries_per_round else []
            wait = f"{contenders[first[0]].method} untried: it is canaried before N is tuned" if first else None
            st, action = machine.step(inner, own, obs, now, wait)
            if action.kind == ActionKind.PROMOTE:
                gain = (st.history[-1].get("numbers", {}).get("verdict") or {}).get("gain_pct")
                t.scale *= 1.0 + (gain or 0.0) / 100.0
            return t, st, action
        st = inner.copy()
        record_window(st, obs, in_round=False)
        return t, st, _start(t, st, pick, now)
    st = inner.copy()
    if t.stage == Stage.SWITCHING:
        s, c = obs.stable, contenders[t.stable]
        if s is None or not _ready(s, st.stable_n, c.method) or obs.canary is not None:
            st.seq += 1  # the stable track's pods are mixed: its window is no one's
            return t, st, Action(ActionKind.HOLD, st.stable_n, f"waiting for the stable track to run {c.method}")
        t.enter(Stage.IDLE, now)
        record_window(st, obs)
        return t, st, Action(ActionKind.HOLD, st.stable_n, f"stable track runs {c.method} N={st.stable_n}")
    record_window(st, obs, in_round=False)
    if t.stage == Stage.ROLLING_BACK:
        if obs.canary is not None and obs.canary.ready_pods > 0:
            return t, st, Action(ActionKind.HOLD, None, "waiting for the method canary to go")
        t.enter(Stage.IDLE, now)
        return t, st, Action(ActionKind.HOLD, st.stable_n, "method canary gone")
    i = t.canary
    assert i is not None
    c = contenders[i]
    if t.stage == Stage.STARTING:
        if _ready(obs.canary, t.canary_n, c.method):
            t.analysis_from_seq = st.seq + 1
            t.enter(Stage.ANALYSING, now)
            return t, st, Action(ActionKind.KEEP_ANALYSING, t.canary_n, f"{c.method} canary ready", contender=i)
        if now - t.stage_since > duration_seconds(c.progress_deadline or tuning.canary.progress_deadline):
            return t, st, _failed(t, st, f"{c.method} canary not ready within progressDeadline", now)
        return t, st, Action(ActionKind.KEEP_ANALYSING, t.canary_n, f"waiting for the {c.method} canary",
                             contender=i)
    w = obs.canary
    if w is not None and measurable(w, obs.window_s) and w.n == t.canary_n and st.seq >= (t.analysis_from_seq or st.seq):
        t.records = (t.records + [record(st.seq, "canary", w, obs.window_s)])[-MAX_RECORDS:]
    promoted = list(t.records)
    action = _analyse(t, st, tuning, contenders, obs, now)
    if action.kind == ActionKind.PROMOTE and action.contender is not None:
        st = _switched(t, st, contenders, promoted, now)
        st.enter(Phase.OBSERVING, now)
    return t, st, action


def standings(tour: Tournament, inner: TunerState, contenders: Sequence[Contender]) -> list[dict[str, Any]]:
    """Per contender, what the status shows: its role, N, mean accepted length, best N, goodput estimate
    against the stable now (and its sd). The stable's numbers are its own windows'."""
    out = []
    for i, (c, e) in enumerate(zip(contenders, tour.entries)):
        row: dict[str, Any] = {"contender": i, "method": c.method}
        if i == tour.stable:
            row.update(role="stable", n=inner.stable_n,
                       acceptedLength=_accepted_length([r for r in inner.records if r.n == inner.stable_n]))
        elif i == tour.canary:
            row.update(role="canary", n=tour.canary_n)
        else:
            row.update(role="measured" if e.measured_n is not None else "untried", n=e.measured_n,
                       acceptedLength=e.accepted_length)
        if e.expected is not None and i != tour.stable:
            row.update(bestN=e.best_n, expectedGain=e.expected / tour.scale - 1.0, sd=(e.sd or 0.0) / tour.scale)
        if e.gain is not None:
            row["measuredGain"] = e.gain
        if e.failure is not None and i != tour.stable:
            row.update(role="failed", failure=e.failure)
        out.append(row)
    return out
