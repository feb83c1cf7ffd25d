"""Analysing: a canary runs; the judge rules on its paired windows, and these rules turn the ruling into
the window's action.

`ANALYSIS_RULES`, in order; the first to return an action decides the window. The ruling and what the
rules weigh besides it (`Analysis`) are computed when a rule first needs them, so the health gate needs no
judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from specpilot.api.models import Tuning

from .. import evidence
from ..actions import Action
from ..bands import BandVerdict
from ..constants import ANALYSIS_KEPT, EXTEND, PROBE_LEAD_MARGINS, PROBE_MIN_LEAD, PROMOTE_MIX_WINDOWS
from ..context import Window, fitted_model, load_mix
from ..judge import Verdict, health_problem, judge, load_octaves, noise_prior, out_of_room, paired
from ..kinds import ActionKind, Ruling
from ..observations import WindowRecord
from ..planner import Plan, posterior_goodput
from ..schedule import TrackDrafting, schedule_text
from ..slo_gate import proven_breach, suspected_breach
from ..state import TunerState
from ..step_model import StepModel
from ..switchback import live_arm
from ..transfer import known
from ..transitions import carry, probe, promote, rollback
from .per_band import band_arm_worse, band_by_band, judged_by_band
from .table_check import table_check_ruled


@dataclass
class Analysis:
    """One analysed window of the canary `state.canary_n`: the judge's ruling on its windows, pooled with a
    retry's evidence and a schedule's borrowed windows."""

    w: Window

    @property
    def state(self) -> TunerState:
        return self.w.state

    @property
    def since(self) -> int:
        """The canary's first analysed window."""
        return self.state.analysis_from_seq or 0

    @cached_property
    def model(self) -> StepModel:
        return fitted_model(self.state)

    @cached_property
    def loads(self) -> list[float]:
        return load_mix(self.state)

    @cached_property
    def retry(self) -> evidence.Evidence | None:
        """The evidence this canary retries (an earlier canary's windows), if it is a retry."""
        s = self.state
        return evidence.running(s.carried, s.stable_n, s.canary_n, s.canary_schedule)

    @cached_property
    def round_stable(self) -> list[WindowRecord]:
        """The round's stable windows, and a retry's from its earlier canary."""
        out = [r for r in self.state.records if r.track == "stable"]
        if self.retry is not None:
            seen = {r.seq for r in out}
            out += [r for r in self.retry.records if r.track == "stable" and r.seq not in seen]
        return out

    @cached_property
    def canary(self) -> list[WindowRecord]:
        """The canary's own analysed windows."""
        return [r for r in self.state.records if r.seq >= self.since and r.track == "canary"]

    @cached_property
    def drafting(self) -> TrackDrafting:
        s = self.state
        assert s.canary_n is not None
        return TrackDrafting(s.method, s.stable_n, s.stable_schedule, s.canary_n, s.canary_schedule,
                             tables_differ=s.canary_static)

    @cached_property
    def verdict(self) -> Verdict:
        """The judge's ruling, on the canary's windows and those carried (a retry's, a schedule's borrowed)."""
        carried = [r for r in self.retry.records if r.track == "canary"] if self.retry else []
        carried += borrowed(self.state, self.since, {r.seq for r in carried})
        t = self.w.tuning
        live = live_arm(self.state, t, self.state.canary_n or 0, self.state.canary_schedule)
        # The table check gives up switching if it promotes: a canary's margin, not a live arm's.
        margin = t.canary_margin if self.state.canary_static else t.margin_for(self.state.method)
        return out_of_room(judge(self.round_stable, carried + self.canary, self.loads, t.objective,
                                 margin, t.confidence, t.canary.windows, len(carried), self.drafting,
                                 noise_prior(live)),
                           ANALYSIS_KEPT)

    @cached_property
    def proven_whole(self) -> bool:
        """The judge proves the canary better over the load mix, and the mix was seen long enough for a
        promotion (`mix_wait`)."""
        return self.verdict.decision == Ruling.PROMOTE and mix_wait(self.state, self.w.tuning, self.verdict) is None

    @cached_property
    def by_band(self) -> list[BandVerdict] | None:
        """The band verdicts on a live arm in schedule mode (`per_band.judged_by_band`); None where the
        canary is judged as a whole."""
        return judged_by_band(self)

    @cached_property
    def pairs(self) -> list[tuple[WindowRecord, WindowRecord]]:
        return paired(self.round_stable, self.canary)

    @cached_property
    def plan(self) -> Plan:
        """The planner on the load mix, for the rivals of a canary the judge would promote."""
        return self.w.plan(self.model, self.loads)

    @cached_property
    def numbers(self) -> dict[str, Any]:
        """What the decision history keeps: the verdict and the step-time model (and the plan, once made)."""
        return {"verdict": self.verdict.to_json(), "step_model": self.model.summary()}

    @cached_property
    def rival(self) -> int | None:
        """The untried N the plan expects best, among those measured (their acceptance known) that were never
        judged against this stable N. An N canaried against this stable before (an earlier round's too) and
        not proven better was judged on its own windows: the model's expectation does not overturn that at
        the price of a proven canary. A probed N was proven better."""
        s, p = self.state, self.with_plan()
        measured = known(s.method, s.records)
        judged = {q.n_canary for q in s.pairs if q.n_stable == s.stable_n} - set(s.probed)
        rivals = [n for n in p.gain
                  if n in measured and n not in s.tried and n not in judged and n != s.stable_n]
        return max(rivals, key=p.gain.__getitem__, default=None)

    def with_plan(self) -> Plan:
        """The plan, its numbers kept with the decision's."""
        self.numbers["plan"] = self.plan.to_json()
        return self.plan


def health_gate(a: Analysis) -> Action | None:
    """Roll back at once when the canary's pods disappeared or fail more than the stable's (errorGate):
    whatever the numbers say."""
    w = a.w
    problem = health_problem(w.obs.stable, w.obs.canary, w.tuning.error_gate)
    if problem:
        return rollback(w.state, w.now, problem, {})
    return None


def slo_gate(a: Analysis) -> Action | None:
    """Roll back a canary proven, over its paired windows, to break an SLO of spec.tuning.slo that the stable
    meets, or to queue or preempt clearly more than the stable (`slo_gate.proven_breach`), whatever its
    goodput: users pay for requests served within their latency, not for tokens decoded faster."""
    b = proven_breach(a.pairs, a.w.tuning.slo)
    if b is None:
        return None
    return rollback(a.state, a.w.now, b.reason, {**a.numbers, "gate": b.to_json()})


def no_comparable_data(a: Analysis) -> Action | None:
    """Roll back a canary whose windows go by without comparable data (no traffic, wrong N): twice the
    configured windows passed with fewer than the configured windows paired."""
    v, s, windows = a.verdict, a.state, a.w.tuning.canary.windows
    if v.decision == Ruling.CONTINUE and v.windows < windows and s.seq - a.since + 1 >= 2 * windows:
        return rollback(s, a.w.now, f"only {v.windows} comparable windows in {s.seq - a.since + 1}", a.numbers)
    return None


def undecided(a: Analysis) -> Action | None:
    """Keep analysing while the judge says continue."""
    if a.verdict.decision == Ruling.CONTINUE:
        return Action(ActionKind.KEEP_ANALYSING, a.state.canary_n, a.verdict.reason)
    return None


def young_mix(a: Analysis) -> Action | None:
    """Keep analysing a canary the judge would roll back on its numbers (not for lack of windows) while the
    load mix is young and the loads not seen yet could make it win (`young_mix_wait`)."""
    v = a.verdict
    if v.decision != Ruling.ROLLBACK or v.inconclusive:
        return None
    wait = young_mix_wait(a.loads, a.drafting, a.w.tuning, v)
    return Action(ActionKind.KEEP_ANALYSING, a.state.canary_n, wait) if wait else None


def roll_back(a: Analysis) -> Action | None:
    """Roll back on the judge's ruling. A first canary rolled back inconclusive while measuring better than
    the stable by the margin leaves its windows for one retry in a later round (`transitions.carry`)."""
    v = a.verdict
    if v.decision != Ruling.ROLLBACK:
        return None
    carry(a.state, a.w.tuning.margin_for(a.state.method), v, a.retry, a.pairs)
    s = a.state
    if v.gain < 0 and s.canary_schedule is None and s.stable_schedule is None and s.canary_n is not None:
        s.worse.append(s.canary_n)
    return rollback(s, a.w.now, v.reason, a.numbers)


def slo_unproven(a: Analysis) -> Action | None:
    """Keep analysing a canary the judge would promote while it breaks a gate over too few paired windows to
    be rolled back for it (`slo_gate.suspected_breach`): the next windows prove or clear it. Not past the
    windows a canary may get (EXTEND x canary.windows): a measure its pods rarely give does not hold it for
    good."""
    v = a.verdict
    if v.decision != Ruling.PROMOTE or v.windows >= EXTEND * a.w.tuning.canary.windows:
        return None
    b = suspected_breach(a.pairs, a.w.tuning.slo)
    if b is None:
        return None
    return Action(ActionKind.KEEP_ANALYSING, a.state.canary_n,
                  f"{v.reason}; not promoted while unproven: {b.reason}")


def probe_rival(a: Analysis) -> Action | None:
    """Roll a proven single-N canary back as a probe when the plan expects an untried N (`Analysis.rival`)
    better than it by half a margin (PROBE_MIN_LEAD at least) and by at most PROBE_LEAD_MARGINS margins:
    promoting it first would make that N compete against it with the margin, which would hide the rest of
    the gain, while a larger lead is provable against it once promoted. A canary is a probe once per stable
    N (two proven N each expected behind the other would probe each other until the budget ran out), and a
    retry never is."""
    s, margin = a.state, a.w.tuning.margin_for(a.state.method)
    if s.canary_schedule is not None or a.retry is not None:
        return None
    c, p, alt = s.canary_n, a.with_plan(), a.rival
    assert c is not None
    if alt is None or c in s.probed:
        return None
    lead = (1.0 + p.gain[alt]) / (1.0 + p.gain[c]) - 1.0
    if p.gain[c] + max(margin / 2, PROBE_MIN_LEAD) < p.gain[alt] and lead <= PROBE_LEAD_MARGINS * margin:
        return probe(s, a.w.now, c, f"probe: N={alt} expected {p.gain[alt]:.1%} over stable, "
                                    f"N={c} {p.gain[c]:.1%}", a.numbers, a.verdict, a.pairs)
    return None


def probe_for_schedule(a: Analysis) -> Action | None:
    """Schedule mode: roll a proven single-N canary back as a probe when what it measured proposes a
    schedule expected to beat it by half a margin (`schedule_probe`)."""
    s = a.state
    if s.canary_schedule is not None or a.retry is not None:
        return None
    c, p = s.canary_n, a.with_plan()
    assert c is not None
    why = schedule_probe(a.w, c, p.gain[c])
    return probe(s, a.w.now, c, why, a.numbers, a.verdict, a.pairs) if why else None


def rival_plausible(a: Analysis) -> Action | None:
    """Keep analysing a canary the judge would promote while its configured windows last and the rival N
    may plausibly be better still (probability above 1 - confidence): the paired step times sharpen the
    step-time model, which is what separates neighbours."""
    s, t = a.state, a.w.tuning
    if s.canary_schedule is not None:
        return None
    c, alt = s.canary_n, a.rival
    assert c is not None
    if alt is None or a.verdict.windows >= t.canary.windows:
        return None
    g = posterior_goodput(s.method, s.records, a.model, [alt, c], a.loads, t.objective)
    p_alt = float((g[:, 0] > g[:, 1]).mean())
    if p_alt > 1.0 - t.confidence:
        return Action(ActionKind.KEEP_ANALYSING, c, f"better than stable; N={alt} better still with probability "
                                                    f"{p_alt:.0%}")
    return None


def mix_not_seen(a: Analysis) -> Action | None:
    """Keep analysing a canary the judge would promote until the load mix holds PROMOTE_MIX_WINDOWS windows
    (`mix_wait`): a heavy level that comes rarely may carry most of the goodput."""
    wait = mix_wait(a.state, a.w.tuning, a.verdict)
    return Action(ActionKind.KEEP_ANALYSING, a.state.canary_n, wait) if wait else None


def promote_canary(a: Analysis) -> Action:
    """Promote the canary: its N and schedule become the stable's."""
    s = a.state
    numbers = a.numbers
    if s.canary_schedule is None:
        a.with_plan()
    return promote(s, a.w.now, Action(ActionKind.PROMOTE, s.canary_n, a.verdict.reason, s.canary_schedule),
                   numbers)


ANALYSIS_RULES = (health_gate, slo_gate, band_arm_worse, band_by_band, no_comparable_data, table_check_ruled,
                  undecided, young_mix,
                  roll_back, slo_unproven, probe_rival, probe_for_schedule, rival_plausible, mix_not_seen,
                  promote_canary)


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
    weigh most in the objective. Throughput weighs a window by the tokens its pods served, so heavier loads
    than seen matter and a canary drafting less there may gain; latency weighs each sequence's speed,
    fastest at light loads, so lighter ones matter and a canary drafting more there may gain."""
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


def schedule_probe(w: Window, c: int, gain: float) -> str | None:
    """Schedule mode: the reason to roll a proven N back as a probe when what it measured proposes a
    schedule that may be canaried next (`Window.schedule_proposal`) and is expected to beat it by half a
    margin (None: promote it). Against the stable it replaced, the schedule's gain is the canary's and more,
    and it starts with the canary's windows at the loads where it drafts as the canary did (`borrowed`);
    promoted first, the canary would leave the schedule only the difference between them to prove."""
    state, tuning = w.state, w.tuning
    if c in state.probed or tuning.max_windows_per_round - state.windows_in_round < tuning.canary.windows:
        return None  # no room left in the round to prove the schedule: bank the proven N
    proposal = w.schedule_proposal(beat=gain + tuning.margin_for(w.state.method) / 2)
    if proposal is None:
        return None
    g = float(proposal.stable_gain or 0.0)
    if (1.0 + g) / (1.0 + gain) - 1.0 > PROBE_LEAD_MARGINS * tuning.margin_for(w.state.method):
        return None
    return (f"probe: schedule {schedule_text(proposal.rows)} expected {g:.1%} over stable, "
            f"N={c} {gain:.1%}")


def borrowed(state: TunerState, since: int, taken: set[int]) -> list[WindowRecord]:
    """A schedule canary's head start: the windows in which an earlier canary of this acceptance regime
    (an N, no schedule) ran against the same stable N (no schedule either) at a load where that N drafts
    what the schedule drafts there (`TrackDrafting.identical`). There the two canaries are one
    configuration, so those pairs measure the schedule at that load as much as its own would. They count as
    the judge's carried windows (the estimate, not the window limits; the stricter promotion boundary): the
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
