"""The canary verdict: a sequential test on a load-normalised goodput ratio, plus health gates.

The metric is the canary's goodput over the stable's at the round's load mix, split as docs/references.md §3 advises:

    log R = mean_w log(L_canary,w / L_stable,w)        tokens per step from counters, paired by window
          + log sum_B w_B B / t(N_c, B)
          - log sum_B w_B B / t(N_s, B)                  step-time model (kappa posterior)
          - delta                                        this pair's measured departure from the model

Tokens per step are precise; pairing stable and canary windows cancels the traffic mix they share. The
step-time term's uncertainty is the kappa posterior's, which the canary's own paired step times narrow.
delta guards against a step-time model that is wrong in shape for this pair of N (a GPU that saturates
earlier than the H200, a drafter that costs more at depth): the paired windows' log step ratios minus the
model's prediction, shrunk towards 0 with a prior of sd DELTA_PRIOR_SD, so a canary that is measurably
slower than the model says cannot be promoted on the model's word.

Decision at confidence c and margin m, looked at after every window. Both parts are posteriors (kappa on
its grid; the paired tokens-per-step ratio with a weak prior on its spread), and a posterior probability
stays what it says however often it is looked at, so no correction for repeated looks is applied (a
frequentist bound would need one; with step-time noise that mostly cancels between paired tracks the
posterior is the sharper tool). The bounds are one-sided at c:
- promote   when the expected gain is at least +m and P(canary better) >= c (lower bound above 0);
- roll back when P(gain < m) >= c (upper bound below +m: it cannot be better by enough);
- otherwise keep analysing, and roll back as inconclusive once the configured windows run out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

from .goodput import load_levels
from .observations import TrackWindow, WindowRecord
from .step_model import KAPPA_GRID, StepModel

MIN_WINDOWS = 2
# Weak prior on the per-window spread of log(L_c / L_s), so two windows cannot look spuriously certain.
PAIR_PRIOR_SD = 0.01
PAIR_PRIOR_DOF = 2.0
# How far one pair's step-time ratio may depart from the model's shape, a priori (log scale).
DELTA_PRIOR_SD = 0.04
# Weak prior on the per-window noise of a paired log step-time ratio.
STEP_NOISE_PRIOR_SD = 0.05


@dataclass(frozen=True)
class Verdict:
    decision: str  # "promote" | "rollback" | "continue"
    gain: float  # estimated relative goodput gain of the canary
    lower: float
    upper: float
    windows: int
    reason: str

    def to_json(self) -> dict:
        return {"decision": self.decision, "gain_pct": round(self.gain * 100, 3),
                "lower_pct": round(self.lower * 100, 3), "upper_pct": round(self.upper * 100, 3),
                "windows": self.windows, "reason": self.reason}


def health_problem(stable: TrackWindow | None, canary: TrackWindow | None) -> str | None:
    """A reason to roll back now, whatever the numbers say; None when the canary is healthy."""
    if canary is None:
        return "canary pods disappeared"
    if canary.errors > 0:
        stable_rate = (stable.errors / max(stable.ready_pods, 1)) if stable else 0.0
        if canary.errors / max(canary.ready_pods, 1) > 2 * stable_rate + 1:
            return f"canary errors {canary.errors:g} above stable's"
    return None


def step_term(model: StepModel, n_canary: int, n_stable: int, loads: Sequence[float],
              objective: str) -> tuple[float, float]:
    """Mean and variance (over the kappa posterior) of the step-time part of log R."""
    levels, weights = load_levels(loads)
    wb = weights * (levels if objective == "throughput" else 1.0)
    base = np.array([model.base_ms(float(b)) for b in levels])
    xc = np.array([model.overhead(n_canary, float(b)) for b in levels])
    xs = np.array([model.overhead(n_stable, float(b)) for b in levels])
    k = KAPPA_GRID[:, None]
    gc = (wb / base / (1 + k * xc)).sum(axis=1)
    gs = (wb / base / (1 + k * xs)).sum(axis=1)
    term = np.log(gc) - np.log(gs)
    mean = float((model.weights * term).sum())
    return mean, float((model.weights * (term - mean) ** 2).sum())


def model_departure(pairs: Sequence[tuple[WindowRecord, WindowRecord]], model: StepModel) -> tuple[float, float]:
    """Posterior mean and variance of delta: how much slower (log) the canary runs than the model predicts."""
    resid = []
    for s, c in pairs:
        if not (s.step_s and c.step_s):
            continue
        load = (s.load + c.load) / 2
        predicted = np.log1p(KAPPA_GRID * model.overhead(c.n, load)) - np.log1p(KAPPA_GRID * model.overhead(s.n, load))
        resid.append(math.log(c.step_s / s.step_s) - float((model.weights * predicted).sum()))
    if not resid:
        return 0.0, DELTA_PRIOR_SD ** 2
    r = np.array(resid)
    m = len(r)
    noise = (((r - r.mean()) ** 2).sum() + PAIR_PRIOR_DOF * STEP_NOISE_PRIOR_SD ** 2) / (m - 1 + PAIR_PRIOR_DOF)
    precision = m / noise + 1.0 / DELTA_PRIOR_SD ** 2
    return float(r.sum() / noise / precision), 1.0 / precision


def judge(stable: Sequence[WindowRecord], canary: Sequence[WindowRecord], model: StepModel,
          loads: Sequence[float], objective: str, margin: float, confidence: float,
          max_windows: int) -> Verdict:
    """Verdict on the canary from its paired analysis windows."""
    by_seq = {r.seq: r for r in stable}
    pairs = [(by_seq[c.seq], c) for c in canary if c.seq in by_seq]
    m = len(pairs)
    if m < MIN_WINDOWS:
        return Verdict("continue", 0.0, -math.inf, math.inf, m, "too few paired windows")
    n_s, n_c = pairs[0][0].n, pairs[0][1].n
    d = np.array([math.log(c.tokens_per_step / s.tokens_per_step) for s, c in pairs])
    var_d = (((d - d.mean()) ** 2).sum() + PAIR_PRIOR_DOF * PAIR_PRIOR_SD ** 2) / (m - 1 + PAIR_PRIOR_DOF)
    t_mean, t_var = step_term(model, n_c, n_s, loads, objective)
    delta, delta_var = model_departure(pairs, model)
    mu = float(d.mean()) + t_mean - delta
    sd = math.sqrt(var_d / m + t_var + delta_var)
    z = NormalDist().inv_cdf(confidence)
    lo, hi = mu - z * sd, mu + z * sd
    target = math.log1p(margin)
    gain, lower, upper = math.expm1(mu), math.expm1(lo), math.expm1(hi)
    if mu >= target and lo > 0:
        return Verdict("promote", gain, lower, upper, m, f"better by {gain:.1%} (lower bound {lower:.1%})")
    if hi < target:
        return Verdict("rollback", gain, lower, upper, m,
                       f"cannot beat stable by {margin:.0%} (upper bound {upper:.1%})")
    if m >= max_windows:
        return Verdict("rollback", gain, lower, upper, m, f"inconclusive after {m} windows")
    return Verdict("continue", gain, lower, upper, m, "undecided")
