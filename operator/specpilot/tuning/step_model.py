"""Step-time model f(N, B) = log t(N, B) - log t(0, B), learned online: a mixture of measured machine shapes,
scaled, plus a per-N, per-load correction that bends the shape where the deployment says so.

    f(N, B) = log(1 + kappa * x_shape(N, B)) + g0(N) + u(B) g1(N)        u(B) = log2(B) / 8

- x_shape is the relative overhead of speculating at N on one measured machine (`costs.py`: dense 8B and
  32B, two MoE targets, 70B over two GPUs, a CPU), per drafter family, plus the compute-bound roofline
  (x = N: every token costs alike, the steepest a machine gets). Which shape, and the scale kappa,
  are a discrete posterior on a grid (uniform over shapes; kappa log-normal around 1).
- g0, g1 are a slope in N plus a random walk from g(0) = 0 (Gaussian; slope sd SLOPE_SD, step sd
  CORRECTION_SD): the nonparametric part. A canary at 8 that runs slower than every shape predicts raises
  the slope, so the estimate for every N (1..7 too) reflects it; the walk's variance is the honest
  uncertainty away from measured N. A block drafter's g0 also has a jump, the same for every N >= 1
  (sd JUMP_SD): its one pass costs alike at N = 1 and 7, and canaries at N >= 1 cannot tell that from a
  steeper slope, so N = 0 keeps the doubt only a canary there settles.
- Sampled costs are made non-decreasing in N (speculating more never makes a step cheaper).

Only *paired* windows are evidence (stable and canary in the same window, at the same load): their log step
ratio is f(N_c, B) - f(N_s, B) plus noise of unknown variance (integrated out with a weak inverse-gamma
prior). The level t(0, B) cancels between N at equal load and is never needed. Everything is computed from
the pairs on each call: exact, cheap and deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

from specpilot_runtime.speculative import Family

from . import costs
from .constants import (CHOLESKY_JITTER, CORRECTION_LOAD_OCTAVES, CORRECTION_SD, ECHO_CHARS, JUMP_SD, KAPPA_GRID,
                        KAPPA_PRIOR_SD, LEVEL_KNOTS_PER_OCTAVE, LEVEL_SPAN, MAX_LOG_RATIO, MIN_NOISE_SD, MS_PER_S, SLOPE_SD,
                        STEP_NOISE_PRIOR_DOF, STEP_NOISE_PRIOR_SD)
from .cost_shapes import SHAPES
from .observations import MAX_LOAD, WindowRecord, finite, whole_n

SHAPE_NAMES: tuple[str, ...] = (*SHAPES, *costs.ROOFLINE_FLOORS)


@dataclass(frozen=True)
class Pair:
    """One paired window: both tracks' N, the window's load and the measured log step ratio canary/stable."""

    n_canary: int
    n_stable: int
    load: float
    log_ratio: float

    def to_json(self) -> list[float]:
        return [self.n_canary, self.n_stable, self.load, self.log_ratio]

    @classmethod
    def from_json(cls, v: Sequence[float]) -> "Pair":
        """A pair read back from a status: ValueError for what the tuner never writes (an N of 10^5 would
        have the correction's matrices take 75 GiB)."""
        if not isinstance(v, list) or len(v) != len(fields(cls)):
            raise ValueError(f"pair {str(v)[:ECHO_CHARS]} is not [N canary, N stable, load, log ratio]")
        return cls(whole_n(v[0], "pair N"), whole_n(v[1], "pair N"), finite(v[2], "pair load", 1.0, MAX_LOAD),
                   finite(v[3], "pair log ratio", -MAX_LOG_RATIO, MAX_LOG_RATIO))


@dataclass(frozen=True)
class Timing:
    """One track's measured step time in one window: the level t(0, B) is f(N, B) below it."""

    n: int
    load: float
    step_ms: float


def timings(records: Sequence[WindowRecord]) -> list[Timing]:
    """The step times the records measured (windows where a request finished)."""
    return [Timing(r.n, r.load, r.step_s * MS_PER_S) for r in records if r.step_s is not None and r.step_s > 0]


def _u(loads: np.ndarray) -> np.ndarray:
    return np.log2(np.maximum(loads, 1.0)) / CORRECTION_LOAD_OCTAVES


class StepModel:
    """Posterior over (shape, kappa) and the correction g, given paired windows."""

    def __init__(self, family: Family, pairs: Sequence[Pair] = (), timings: Sequence[Timing] = ()) -> None:
        self.family = family
        self.pairs = tuple(pairs)
        self.weights, self.noise_var = self._posterior()  # (S, K) grid weights, posterior noise variance
        self.n_seen = max((max(p.n_canary, p.n_stable) for p in self.pairs), default=0)
        self._level = self._fit_level(timings)

    def _x(self, shape: str, ns: np.ndarray, loads: np.ndarray) -> np.ndarray:
        return costs.overheads(self.family, shape, ns, loads)

    def _pred(self, shape: str, nc: np.ndarray, ns: np.ndarray, loads: np.ndarray) -> np.ndarray:
        """(K, P) predicted log step ratios for every kappa."""
        k = KAPPA_GRID[:, None]
        return np.log1p(k * self._x(shape, nc, loads)[None, :]) - np.log1p(k * self._x(shape, ns, loads)[None, :])

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        p = self.pairs
        return (np.array([q.n_canary for q in p]), np.array([q.n_stable for q in p]),
                np.array([q.load for q in p]), np.array([q.log_ratio for q in p]))

    def _posterior(self) -> tuple[np.ndarray, float]:
        logk = np.log(KAPPA_GRID)
        logp = np.tile(-0.5 * (logk / KAPPA_PRIOR_SD) ** 2, (len(SHAPE_NAMES), 1))
        if not self.pairs:
            w = np.exp(logp - logp.max())
            return w / w.sum(), STEP_NOISE_PRIOR_SD ** 2
        nc, ns, loads, d = self._arrays()
        n = len(d)
        rss = np.array([((d[None, :] - self._pred(s, nc, ns, loads)) ** 2).sum(axis=1) for s in SHAPE_NAMES])
        logp = logp - 0.5 * (n + STEP_NOISE_PRIOR_DOF) * np.log(STEP_NOISE_PRIOR_DOF * STEP_NOISE_PRIOR_SD ** 2 + rss)
        w = np.exp(logp - logp.max())
        w /= w.sum()
        noise = float((w * (STEP_NOISE_PRIOR_DOF * STEP_NOISE_PRIOR_SD ** 2 + rss)).sum()) / (n + STEP_NOISE_PRIOR_DOF)
        return w, noise

    def _mean_pred(self, nc: np.ndarray, ns: np.ndarray, loads: np.ndarray) -> np.ndarray:
        """Posterior-mean predicted log step ratio of the parametric part."""
        return sum((self.weights[i][:, None] * self._pred(s, nc, ns, loads)).sum(axis=0)
                   for i, s in enumerate(SHAPE_NAMES))

    @property
    def _jump(self) -> bool:
        return self.family == Family.PARALLEL

    def _correction(self, n_top: int) -> tuple[np.ndarray, np.ndarray]:
        """Gaussian posterior of z = (w0(1..K), w1(1..K), beta0, beta1[, jump]), K = n_top, from the residuals
        of the parametric fit: g0(n) = jump + beta0 n + w0(n), g1(n) = beta1 n + w1(n), w random walks from 0;
        the jump (n >= 1) for block drafters only."""
        k = n_top
        size = 2 * k + 2 + self._jump
        steps = np.eye(k) - np.eye(k, k=-1)
        prec = np.zeros((size, size))
        prec[:k, :k] = prec[k:2 * k, k:2 * k] = steps.T @ steps / CORRECTION_SD ** 2
        prec[2 * k, 2 * k] = prec[2 * k + 1, 2 * k + 1] = 1.0 / SLOPE_SD ** 2
        if self._jump:
            prec[-1, -1] = 1.0 / JUMP_SD ** 2
        if not self.pairs:
            return np.zeros(size), np.linalg.inv(prec)
        nc, ns, loads, d = self._arrays()
        resid = d - self._mean_pred(nc, ns, loads)
        u = _u(loads)
        a = np.zeros((len(d), size))
        for i, (c, s) in enumerate(zip(nc, ns)):
            for n, sign in ((c, 1.0), (s, -1.0)):
                if n > 0:
                    a[i, n - 1] += sign
                    a[i, k + n - 1] += sign * u[i]
            a[i, 2 * k] = c - s
            a[i, 2 * k + 1] = (c - s) * u[i]
            if self._jump:
                a[i, -1] = float(c > 0) - float(s > 0)
        noise = max(self.noise_var, MIN_NOISE_SD ** 2)
        cov = np.linalg.inv(prec + a.T @ a / noise)
        return cov @ (a.T @ resid / noise), (cov + cov.T) / 2

    def _g(self, n_top: int, loads: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        """(M, L, n_top + 1) samples of the correction g0(n) + u(B) g1(n) for n = 0..n_top."""
        k = n_top
        mean, cov = self._correction(k)
        chol = np.linalg.cholesky(cov + CHOLESKY_JITTER * np.eye(len(mean)))
        z = mean[None, :] + rng.standard_normal((m, len(mean))) @ chol.T
        n = np.arange(1, k + 1)
        out = np.zeros((m, 2, k + 1))
        out[:, 0, 1:] = z[:, :k] + z[:, 2 * k, None] * n + (z[:, -1, None] if self._jump else 0.0)
        out[:, 1, 1:] = z[:, k:2 * k] + z[:, 2 * k + 1, None] * n
        return out[:, 0, None, :] + _u(loads)[None, :, None] * out[:, 1, None, :]

    def log_cost_samples(self, candidates: Sequence[int], loads: Sequence[float] | np.ndarray, m: int,
                         seed: int = 1) -> np.ndarray:
        """(M, L, J): samples of f(N, B) = log t(N, B) / t(0, B) for each load level and candidate."""
        rng = np.random.default_rng(seed)
        loads_a = np.asarray(loads, dtype=float)
        n_top = max(max(candidates, default=0), self.n_seen, 1)
        grid_n = np.arange(n_top + 1)
        # Stratified draws of (shape, kappa) from the grid posterior.
        flat = self.weights.ravel()
        cdf = np.cumsum(flat)
        idx = rng.permutation(np.minimum(np.searchsorted(cdf, (np.arange(m) + 0.5) / m), flat.size - 1))
        shape_i, kappa_i = np.unravel_index(idx, self.weights.shape)
        f = np.zeros((m, len(loads_a), n_top + 1))
        nn, bb = np.meshgrid(grid_n, loads_a)
        for si in np.unique(shape_i):
            rows = shape_i == si
            x = self._x(SHAPE_NAMES[si], nn.ravel(), bb.ravel()).reshape(nn.shape)  # (L, n)
            f[rows] = np.log1p(KAPPA_GRID[kappa_i[rows]][:, None, None] * x[None])
        f += self._g(n_top, loads_a, m, rng)
        f = np.maximum.accumulate(f, axis=2)
        return f[:, :, list(candidates)]

    def pair(self, n_canary: int, n_stable: int, load: float, step_canary: float,
             step_stable: float) -> Pair:
        return Pair(n_canary, n_stable, load, math.log(step_canary / step_stable))

    def summary(self) -> dict[str, float | str]:
        """The most likely shape, its probability and the mean kappa (for the decision history)."""
        by_shape = self.weights.sum(axis=1)
        best = int(by_shape.argmax())
        return {"shape": SHAPE_NAMES[best], "shape_p": round(float(by_shape[best]), 3),
                "kappa": round(float((self.weights.sum(axis=0) * KAPPA_GRID).sum()), 4)}

    def _mean_f(self, ns: np.ndarray, loads: np.ndarray) -> np.ndarray:
        """Posterior-mean f(N, B) (parametric part and correction) at each (N, B)."""
        k = max(int(ns.max(initial=0)), self.n_seen, 1)
        mean, _ = self._correction(k)
        nz = np.maximum(ns, 1) - 1
        jump = mean[-1] if self._jump else 0.0
        g = np.where(ns > 0, jump + mean[nz] + mean[2 * k] * ns + _u(loads) * (mean[k + nz] + mean[2 * k + 1] * ns),
                     0.0)
        return self._mean_pred(ns, np.zeros_like(ns), loads) + g

    def _fit_level(self, timings: Sequence[Timing]) -> tuple[np.ndarray, np.ndarray]:
        """log t(0, B) measured over the prior's, per quarter octave of load: (log2 B, offset) knots."""
        rows = [t for t in timings if t.step_ms > 0 and t.load >= 1.0]
        if not rows:
            return np.zeros(1), np.zeros(1)
        ns = np.array([t.n for t in rows])
        loads = np.array([t.load for t in rows])
        prior = np.log([costs.step_ms(self.family, 0, b) for b in loads])
        offset = np.log([t.step_ms for t in rows]) - self._mean_f(ns, loads) - prior
        octave = np.round(np.log2(loads) * LEVEL_KNOTS_PER_OCTAVE) / LEVEL_KNOTS_PER_OCTAVE
        knots = np.unique(octave)
        level = np.array([offset[octave == o].mean() for o in knots])
        # Only the level's shape across loads matters (its scale cancels in every ratio); a forged step time
        # of 1e-300 s must not make a goodput infinite.
        return knots, np.clip(level - level.mean(), -LEVEL_SPAN, LEVEL_SPAN)

    def base_ms(self, load: float) -> float:
        """t(0, B) up to a constant: weighs loads against each other. The prior's shape (the 8B H200's)
        bent by what the deployment's own step times say at the loads it ran: a compute-bound engine's
        level grows with B where an H200's is flat, and the H200's would weigh its busy windows far above
        its quiet ones. Between measured loads the bend is interpolated in log B, beyond them held."""
        knots, offset = self._level
        return costs.step_ms(self.family, 0, load) * float(np.exp(np.interp(math.log2(max(load, 1.0)), knots, offset)))
