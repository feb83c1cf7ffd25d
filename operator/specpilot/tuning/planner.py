"""Which N to canary next, if any: expected goodput against the value of information and canary cost.

For each candidate c the planner asks: if a canary ran at c, how much goodput would the best N it reveals
(c itself, and every N' < c for prefix-transfer drafters, see `transfer.py`) add over the stable N, counting
only gains the judge could promote (above the margin)? That preposterior value is averaged over posterior
samples of E[L_N] and of the step-time model. A canary costs the canary's share of traffic for the restart
(it serves nothing) plus its expected loss while analysed; the gain accrues over a value horizon. The
planner starts the canary with the largest value net of cost, or declares convergence when none clears
MIN_NET_VALUE.
A probe at a high N is thus preferred when it reveals a whole range at once, and speculation off (N = 0)
is always a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .constants import (ANALYSIS_WINDOWS, MIN_NET_VALUE, PLAN_INTERVAL, PLAN_SAMPLES, RESTART_WINDOWS,
                        TIE_PROBABILITY, VALUE_HORIZON_WINDOWS)
from .goodput import goodput_samples
from .observations import WindowRecord
from .step_model import StepModel
from .transfer import Draws, revealed_by, sample_lengths


@dataclass(frozen=True)
class Plan:
    """The planner's numbers (kept in the decision history) and its choice."""

    stable_n: int
    gain: dict[int, float]  # E[G(N)] / E[G(stable)] - 1 per candidate
    value: dict[int, float]  # expected promotable gain revealed by a canary at N (relative)
    cost: dict[int, float]  # expected cost of that canary (relative, over the horizon)
    best_n: int  # highest expected goodput
    next_canary: int | None
    near_tie: int | None = None  # an N expected better than stable, but by less than the margin
    # The PLAN_INTERVAL credible interval of G(N) / G(stable) - 1 per candidate: the gain's doubt.
    bounds: dict[int, tuple[float, float]] = field(default_factory=dict)

    @property
    def tie_reason(self) -> str:
        """What the status says about a near tie ('' when there is none)."""
        if self.near_tie is None:
            return ""
        return (f"N={self.near_tie} expected {self.gain[self.near_tie]:+.1%} against N={self.stable_n}: "
                f"inside the promotion margin, too small to prove; no canary spent on it")

    def to_json(self) -> dict:
        r = lambda d: {str(k): round(v * 100, 3) for k, v in d.items()}  # noqa: E731 - percent, short
        return {"stable_n": self.stable_n, "gain_pct": r(self.gain), "value_pct": r(self.value),
                "cost_pct": r(self.cost), "best_n": self.best_n, "next_canary": self.next_canary,
                "near_tie": self.near_tie, "lower_pct": r({n: lo for n, (lo, _) in self.bounds.items()}),
                "upper_pct": r({n: hi for n, (_, hi) in self.bounds.items()})}


def posterior_goodput(method: str, records: Sequence[WindowRecord], model: StepModel,
                      candidates: Sequence[int], loads: Sequence[float], objective: str,
                      samples: int = PLAN_SAMPLES) -> np.ndarray:
    """(M, J) goodput samples for every candidate under the current knowledge."""
    lengths = sample_lengths(method, records, candidates, Draws.make(samples))
    return goodput_samples(model, candidates, lengths, loads, objective)


def bracketed(stable_n: int, worse: Sequence[int], candidates: Sequence[int]) -> list[int]:
    """Candidates no better than an N measured worse than the stable: goodput rises to one best N and falls
    after it (unimodal in N), so an N beyond a worse one, on the side away from the stable, is worse still.
    What a miss teaches: after N=4 measured below a stable 7, neither 3 nor 2 is worth a canary."""
    out: set[int] = set()
    for m in worse:
        out |= {c for c in candidates if (c <= m < stable_n) or (stable_n < m <= c)}
    return sorted(out)


def plan(method: str, records: Sequence[WindowRecord], model: StepModel, candidates: Sequence[int],
         stable_n: int, loads: Sequence[float], objective: str, margin: float, canary_share: float,
         exclude: Sequence[int] = (), power: Callable[[np.ndarray], np.ndarray] | None = None,
         restart_windows: float = RESTART_WINDOWS) -> Plan:
    """Score every candidate and pick the next canary (None: nothing is worth a canary). `power` maps true
    relative gains to the chance the judge promotes them (None: every gain above the margin is).
    `canary_share` and `restart_windows`: what a trial takes (switchback.trial_costs: a live arm restarts
    nothing)."""
    # N = 0 is always scored (not canaried unless a candidate): its estimate feeds the "slower than no
    # speculation" alert even when the user's candidates leave it out.
    cands = sorted(set(candidates) | {stable_n, 0})
    g = posterior_goodput(method, records, model, cands, loads, objective)
    s = cands.index(stable_n)
    base = g[:, s]
    scale = float(base.mean())
    mean = g.mean(axis=0)
    gain = {n: float(mean[j] / scale - 1.0) for j, n in enumerate(cands)}
    # Paired per sample, so what the samples share (the load, the stable's own doubt) does not widen it.
    lo, hi = np.quantile(g / base[:, None] - 1.0, [(1 - PLAN_INTERVAL) / 2, (1 + PLAN_INTERVAL) / 2], axis=0)
    bounds = {n: (float(lo[j]), float(hi[j])) for j, n in enumerate(cands)}
    # Only a gain the judge can prove is worth anything: above the margin, and weighed by the chance that
    # the canary's windows prove it (`power`; a gain just above the margin rarely is).
    above = g > base[:, None] * (1.0 + margin)
    chance = np.where(above, power(g / base[:, None] - 1.0) if power else 1.0, 0.0)
    p_promotable = chance.mean(axis=0)
    promotable = (g - base[:, None]) * chance
    restart_cost = canary_share * restart_windows / VALUE_HORIZON_WINDOWS
    value: dict[int, float] = {}
    cost: dict[int, float] = {}
    for j, c in enumerate(cands):
        if c == stable_n or c in exclude or c not in candidates:
            continue
        idx = [cands.index(n) for n in revealed_by(method, c, cands, records) if n != stable_n]
        # Near ties are said, not paid for: a canary must reveal an N that beats the margin in expectation
        # or with a fair chance (an N the model knows little about is no tie).
        if not any(gain[cands[i]] >= margin or p_promotable[i] >= TIE_PROBABILITY for i in idx):
            continue
        # Promoting a revealed N other than c takes one more canary.
        extra = np.array([0.0 if cands[i] == c else restart_cost * scale for i in idx])
        best = (promotable[:, idx] - extra[None, :]).max(axis=1) if idx else np.zeros_like(base)
        value[c] = float(np.maximum(best, 0.0).mean() / scale)
        loss = float(np.maximum(base - g[:, j], 0.0).mean() / scale)
        cost[c] = canary_share * (restart_windows + ANALYSIS_WINDOWS * loss) / VALUE_HORIZON_WINDOWS
    net = {c: value[c] - cost[c] for c in value}
    pick = max(net, key=lambda c: (net[c], -abs(c - stable_n)), default=None)
    best_n = max((n for n in cands if n in candidates or n == stable_n), key=lambda n: mean[cands.index(n)])
    chosen = pick if pick is not None and net[pick] >= MIN_NET_VALUE else None
    tie = best_n if chosen is None and best_n != stable_n and 0 < gain[best_n] < margin else None
    return Plan(stable_n, gain, value, cost, best_n, chosen, tie, bounds)
