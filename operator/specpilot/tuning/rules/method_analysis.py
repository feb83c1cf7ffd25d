"""A method canary's analysed window: the judge rules on its paired windows, then `METHOD_ANALYSIS_RULES`,
in order; the first to return an action decides (the last always does)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

from specpilot.api.models import Tuning
from specpilot_runtime.speculative import METHODS

from ..actions import Action
from ..constants import EXTEND, METHOD_CANARY_MAX_RECORDS
from ..context import fitted_model, load_mix
from ..judge import Verdict, health_problem, judge, out_of_room, paired
from ..kinds import ActionKind, Ruling
from ..method_estimates import anchored_pairs, keep_measured, stable_records
from ..observations import Observations, WindowRecord
from ..slo_gate import proven_breach, suspected_breach
from ..state import TunerState
from ..step_model import StepModel, timings
from ..tournament_state import Contender, Tournament
from ..tournament_transitions import end_canary, fail, off_probe


@dataclass
class MethodAnalysis:
    """An analysed window of a method canary: the judge's ruling on its paired windows."""

    tour: Tournament
    inner: TunerState
    tuning: Tuning
    contenders: Sequence[Contender]
    obs: Observations
    now: float

    @cached_property
    def loads(self) -> list[float]:
        return load_mix(self.inner)

    @cached_property
    def ruling(self) -> Verdict:
        """The judge's verdict as it ruled (the decision history keeps it)."""
        t = self.tuning
        return out_of_room(judge(stable_records(self.inner), self.tour.records, self.loads, t.objective,
                                 t.canary_margin, t.confidence, t.canary.windows), METHOD_CANARY_MAX_RECORDS)

    @cached_property
    def verdict(self) -> Verdict:
        """The ruling, or a rollback when twice the configured windows passed with fewer paired."""
        v, windows = self.ruling, self.tuning.canary.windows
        since = self.tour.analysis_from_seq or self.inner.seq
        if v.decision == Ruling.CONTINUE and v.windows < windows and self.inner.seq - since + 1 >= 2 * windows:
            return dataclasses.replace(v, decision=Ruling.ROLLBACK,
                                       reason=f"only {v.windows} comparable windows in {self.inner.seq - since + 1}")
        return v

    @cached_property
    def numbers(self) -> dict[str, Any]:
        return {"verdict": self.ruling.to_json()}

    @cached_property
    def pairs(self) -> list[tuple[WindowRecord, WindowRecord]]:
        """The canary's windows paired with the stable's, as the judge pairs them."""
        return paired(stable_records(self.inner), self.tour.records)

    def measure(self) -> Contender:
        """Keep what the canary measured of its contender (windows, step times against N = 0, best N)."""
        tour, i, n = self.tour, self.tour.canary, self.tour.canary_n
        assert i is not None and n is not None
        c, e = self.contenders[i], tour.entries[i]
        pairs = e.pairs + anchored_pairs(fitted_model(self.inner), stable_records(self.inner), tour.records)
        records = e.records + tour.records
        keep_measured(e, c, records, StepModel(METHODS[c.method].family, pairs, timings(records)), self.tuning,
                      self.loads, n, tour.scale * (1.0 + self.verdict.gain), self.verdict)
        return c


def method_health_gate(a: MethodAnalysis) -> Action | None:
    """A canary whose pods disappeared or fail more than the stable's failed: rolled back, its contender not
    tried again (`fail`)."""
    problem = health_problem(a.obs.stable, a.obs.canary, a.tuning.error_gate)
    return fail(a.tour, a.inner, problem, a.now) if problem else None


def method_slo_gate(a: MethodAnalysis) -> Action | None:
    """A method canary proven to break an SLO the stable meets, or to queue or preempt clearly more
    (`slo_gate.proven_breach`: a draft model's weights and KV take the target's KV blocks), is rolled back
    whatever its goodput; what it measured is kept, as for a rollback on the numbers (another load may
    suit it)."""
    b = proven_breach(a.pairs, a.tuning.slo)
    if b is None:
        return None
    c = a.measure()
    return end_canary(a.tour, a.inner, ActionKind.ROLLBACK, f"{c.label} N={a.tour.canary_n}: {b.reason}", a.now,
                      {**a.numbers, "gate": b.to_json()})


def method_undecided(a: MethodAnalysis) -> Action | None:
    """Keep analysing while the judge says continue."""
    if a.verdict.decision == Ruling.CONTINUE:
        return Action(ActionKind.KEEP_ANALYSING, a.tour.canary_n, a.verdict.reason, contender=a.tour.canary)
    return None


def no_speculation_ruled(a: MethodAnalysis) -> Action | None:
    """The stable's own method at N = 0 was canaried: an N decision of the stable's method (`off_probe`)."""
    if a.tour.canary == a.tour.stable:
        return off_probe(a.tour, a.inner, a.contenders, a.verdict, a.now, a.numbers)
    return None


def method_rolled_back(a: MethodAnalysis) -> Action | None:
    """Roll the contender back on the judge's ruling; what it measured is kept for a second chance."""
    if a.verdict.decision != Ruling.ROLLBACK:
        return None
    c = a.measure()
    return end_canary(a.tour, a.inner, ActionKind.ROLLBACK, f"{c.label} N={a.tour.canary_n}: {a.verdict.reason}",
                       a.now, a.numbers)


def method_slo_unproven(a: MethodAnalysis) -> Action | None:
    """Keep analysing a method canary the judge would promote while a gate it breaks has too few paired
    windows to roll it back for (`slo_gate.suspected_breach`), up to the windows a canary may get."""
    v = a.verdict
    if v.decision != Ruling.PROMOTE or v.windows >= EXTEND * a.tuning.canary.windows:
        return None
    b = suspected_breach(a.pairs, a.tuning.slo)
    if b is None:
        return None
    return Action(ActionKind.KEEP_ANALYSING, a.tour.canary_n, f"{v.reason}; not promoted while unproven: {b.reason}",
                  contender=a.tour.canary)


def method_promoted(a: MethodAnalysis) -> Action:
    """Promote the contender: the stable's contender is then measured against the winner, its best N
    estimated from its own windows (and the step times its N canaries paired)."""
    tour, v, n = a.tour, a.verdict, a.tour.canary_n
    c = a.measure()
    i, old = tour.canary, tour.stable
    assert i is not None
    back = dataclasses.replace(v, gain=1.0 / (1.0 + v.gain) - 1.0, lower=1.0 / (1.0 + v.upper) - 1.0,
                               upper=1.0 / (1.0 + v.lower) - 1.0)
    keep_measured(tour.entries[old], a.contenders[old], a.inner.records, fitted_model(a.inner), a.tuning, a.loads,
                  a.inner.stable_n, tour.scale, back)
    tour.scale *= 1.0 + v.gain
    tour.stable = i
    return end_canary(tour, a.inner, ActionKind.PROMOTE, f"{c.label} N={n}: {v.reason}", a.now, a.numbers)


METHOD_ANALYSIS_RULES = (method_health_gate, method_slo_gate, method_undecided, no_speculation_ruled,
                         method_rolled_back, method_slo_unproven, method_promoted)
