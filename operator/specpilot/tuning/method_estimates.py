"""What a method canary measured of its contender, and what another canary of one is worth: the value of a
first and of a second canary, a contender's goodput by N from its windows, and its step times against N = 0
(the anchor every method's step cost shares on one machine)."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Callable, Sequence

import numpy as np

from specpilot.api.models import Tuning

from .constants import (ANALYSIS_WINDOWS, ANCHOR_SAMPLES, METHOD_CANARY_MAX_RECORDS, METHOD_PRIOR_SD,
                        SWITCH_RESTART_WINDOWS, UNIT_QUANTILE_POINTS, VALUE_HORIZON_WINDOWS)
from .context import candidates
from .observations import WindowRecord
from .planner import posterior_goodput
from .state import TunerState
from .step_model import Pair, StepModel
from .tournament_state import Contender, Entry

# Stratified standard-normal quantiles: expectations over a loser's goodput at an N, deterministic.
_UNIT_QUANTILES = np.array([NormalDist().inv_cdf((i + 0.5) / UNIT_QUANTILE_POINTS) for i in range(UNIT_QUANTILE_POINTS)])


def try_value(margin: float, canary_share: float) -> tuple[float, float]:
    """(value, cost) of a first canary of an untried contender, relative over the value horizon: the
    expected gain above the margin under the prior, and the canary's share of traffic lost to the restart
    and, while analysed, to a contender that turns out worse."""
    prior = NormalDist(0.0, METHOD_PRIOR_SD)
    m = math.log1p(margin)
    # E[max(0, X - m)] and E[max(0, -X)] for X ~ N(0, sd).
    value = METHOD_PRIOR_SD * prior.pdf(m) * METHOD_PRIOR_SD - m * (1.0 - prior.cdf(m))
    loss = METHOD_PRIOR_SD * prior.pdf(0.0) * METHOD_PRIOR_SD
    cost = canary_share * (SWITCH_RESTART_WINDOWS + ANALYSIS_WINDOWS * loss) / VALUE_HORIZON_WINDOWS
    return value, cost


def allowed_n(contender: Contender, tuning: Tuning) -> list[int]:
    """The N the contender may run: its candidates within its method's limits, as its N tuner sees them."""
    return candidates(TunerState.new(contender.method, contender.n, contender.block_size),
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
    f = stable_model.log_cost_samples(ns, [s.load for s, _ in both], ANCHOR_SAMPLES).mean(axis=0)  # (L, J)
    return [Pair(c.n, 0, s.load, math.log(c.step_s / s.step_s) + float(f[i, ns.index(s.n)]))
            for i, (s, c) in enumerate(both) if c.step_s and s.step_s]


def anchored(inner: TunerState) -> bool:
    """Whether the stable's step cost against no speculation is measured (or it is no speculation)."""
    return inner.stable_n == 0 or any(0 in (p.n_canary, p.n_stable) for p in inner.pairs)


def accepted_length(records: Sequence[WindowRecord]) -> float | None:
    """Mean accepted tokens per step over the windows (None: nothing drafted)."""
    drafts = sum(r.drafts for r in records)
    if drafts <= 0:
        return None
    return 1.0 + sum(sum(r.accepted_per_pos) for r in records) / drafts


def stable_records(inner: TunerState) -> list[WindowRecord]:
    """The stable track's windows the N tuner keeps."""
    return [r for r in inner.records if r.track == "stable"]


def keep_measured(entry: Entry, contender: Contender, records: Sequence[WindowRecord], model: StepModel,
                  tuning: Tuning, loads: Sequence[float], n: int, level: float, verdict: Any | None) -> None:
    """Keep what was measured of a contender at N; `level`: its goodput there, relative to the start.
    `records` and `model` are all that is known of it: its windows, and its step times against N = 0."""
    entry.records, entry.pairs = list(records)[-METHOD_CANARY_MAX_RECORDS:], list(model.pairs)[-METHOD_CANARY_MAX_RECORDS:]
    entry.measured_n = n
    if verdict is not None:
        entry.gain, entry.lower, entry.upper = verdict.gain, verdict.lower, verdict.upper
    entry.accepted_length = accepted_length([r for r in records if r.n == n])
    by_n = goodput_by_n(contender, records, model, tuning, loads, n)
    best = max(by_n, key=lambda k: by_n[k][0])
    entry.best_n, entry.expected, entry.sd = best, level * by_n[best][0], level * by_n[best][1]
    entry.options = [(k, level * mean, level * sd) for k, (mean, sd) in sorted(by_n.items()) if k != n]

