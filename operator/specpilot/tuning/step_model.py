"""Step-time model t(N, B), learned online on top of a per-family prior shape.

    t(N, B) = level(B) * (1 + kappa * x_family(N, B))

x_family is the relative overhead of speculating at N measured on the H200 (`costs.py`): verification of
N + 1 tokens plus N drafter-head steps (sequential), one block pass (parallel) or nothing (near-free).
kappa scales that overhead to the real deployment (a larger target makes the head relatively cheaper, a
different GPU flattens or steepens verification). Its prior is log-normal around 1.

The level cancels in every comparison between N at the same load, so only kappa is learned. Raw step times
are confounded by load and traffic mix, so kappa is fitted to *paired* windows: stable and canary in the
same window, at the same load, give d = log t_canary - log t_stable = log(1 + kappa x_c) - log(1 + kappa x_s)
plus noise of unknown variance (integrated out with a weak inverse-gamma prior). The posterior lives on a
fixed grid, so it is exact, cheap and deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specpilot_runtime.speculative import Family

from . import costs

KAPPA_GRID = np.exp(np.linspace(math.log(0.2), math.log(5.0), 121))
# Prior spread of log kappa per family: a factor of 2 (1 sd) on the overhead of speculating, whatever the
# drafter. The prior is one GPU and one 8B shape; a deployment whose speculation costs 3-4x what it predicts
# (a target that is compute bound at low load, a slow drafter) must stay plausible enough that a canary
# checks it, since nothing but a canary's paired step times can reveal it (at 0.4 the tuner converged on
# N=3 where N=1 was 22% better without trying a canary).
PRIOR_LOG_SD: dict[Family, float] = {
    Family.SEQUENTIAL: 0.7, Family.PARALLEL: 0.7, Family.NEAR_FREE: 0.7, Family.NONE: 0.7,
}
# Weak prior on the per-window noise of a paired log step-time difference.
NOISE_PRIOR_SD = 0.1
NOISE_PRIOR_DOF = 2.0


@dataclass(frozen=True)
class Pair:
    """One paired window: relative overheads of both tracks at the window's load, and the log step ratio."""

    x_canary: float
    x_stable: float
    log_ratio: float

    def to_json(self) -> list[float]:
        return [self.x_canary, self.x_stable, self.log_ratio]

    @classmethod
    def from_json(cls, v: Sequence[float]) -> "Pair":
        return cls(float(v[0]), float(v[1]), float(v[2]))


class StepModel:
    """Posterior over kappa given paired windows; predicts relative step times."""

    def __init__(self, family: Family, pairs: Sequence[Pair] = ()) -> None:
        self.family = family
        self.pairs = tuple(pairs)
        self.weights = self._posterior()

    def _posterior(self) -> np.ndarray:
        logk = np.log(KAPPA_GRID)
        logp = -0.5 * (logk / PRIOR_LOG_SD[self.family]) ** 2
        if self.pairs:
            xc = np.array([p.x_canary for p in self.pairs])
            xs = np.array([p.x_stable for p in self.pairs])
            d = np.array([p.log_ratio for p in self.pairs])
            k = KAPPA_GRID[:, None]
            pred = np.log1p(k * xc[None, :]) - np.log1p(k * xs[None, :])
            rss = ((d[None, :] - pred) ** 2).sum(axis=1)
            n = len(self.pairs)
            logp = logp - 0.5 * (n + NOISE_PRIOR_DOF) * np.log(
                NOISE_PRIOR_DOF * NOISE_PRIOR_SD ** 2 + rss)
        w = np.exp(logp - logp.max())
        return w / w.sum()

    def overhead(self, n: int, load: float) -> float:
        """Prior relative overhead x(N, B) of this family."""
        return costs.relative_overhead(self.family, n, load)

    def pair(self, n_canary: int, n_stable: int, load: float, step_canary: float,
             step_stable: float) -> Pair:
        return Pair(self.overhead(n_canary, load), self.overhead(n_stable, load),
                    math.log(step_canary / step_stable))

    def kappa_mean(self) -> float:
        return float((self.weights * KAPPA_GRID).sum())

    def kappa_sd(self) -> float:
        mean = self.kappa_mean()
        return float(math.sqrt((self.weights * (KAPPA_GRID - mean) ** 2).sum()))

    def kappa_samples(self, m: int, seed: int = 1) -> np.ndarray:
        """m stratified draws from the grid posterior, shuffled so they do not align with other draws."""
        cdf = np.cumsum(self.weights)
        u = (np.arange(m) + 0.5) / m
        idx = np.minimum(np.searchsorted(cdf, u), len(KAPPA_GRID) - 1)
        return np.random.default_rng(seed).permutation(KAPPA_GRID[idx])

    def base_ms(self, load: float) -> float:
        """Prior shape of the level across loads (t(0, B) on the H200): weighs loads against each other."""
        return costs.step_ms(self.family, 0, load)
