"""Goodput G(N) = sum over load levels B of w_B * B * E[L_N] / t(N, B), as posterior samples.

Loads are the per-pod concurrencies of the windows seen this round, each window one equal-weight sample of
the load mix (that is w_B). For the `latency` objective every load counts alike (tokens per second of one
request, the inverse of TPOT); for `throughput` a load counts in proportion to B (tokens per second of the
pod). Goodput is in relative units: the level of t cancels between N at equal load (see `step_model.py`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .step_model import StepModel


def load_levels(loads: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct loads (rounded to two significant digits) and their weights in the mix."""
    if not loads:
        return np.array([1.0]), np.array([1.0])
    rounded = [float(f"{max(b, 1.0):.2g}") for b in loads]
    levels = sorted(set(rounded))
    weights = np.array([rounded.count(b) for b in levels], dtype=float)
    return np.array(levels), weights / weights.sum()


def goodput_samples(model: StepModel, candidates: Sequence[int], lengths: np.ndarray,
                    kappas: np.ndarray, loads: Sequence[float], objective: str) -> np.ndarray:
    """(M, J) goodput samples from E[L] samples (M, J) and kappa samples (M,)."""
    levels, weights = load_levels(loads)
    inv_cost = np.zeros((kappas.shape[0], len(candidates)))
    for b, w in zip(levels, weights):
        scale = w * (b if objective == "throughput" else 1.0) / model.base_ms(float(b))
        x = np.array([model.overhead(n, float(b)) for n in candidates])
        inv_cost += scale / (1.0 + kappas[:, None] * x[None, :])
    return lengths * inv_cost


def per_load_goodput(model: StepModel, candidates: Sequence[int], lengths: np.ndarray,
                     kappas: np.ndarray, loads: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean goodput per load level and candidate: (levels, weights, G[level, candidate]) in tokens/ms/pod."""
    levels, weights = load_levels(loads)
    out = np.zeros((len(levels), len(candidates)))
    for i, b in enumerate(levels):
        x = np.array([model.overhead(n, float(b)) for n in candidates])
        g = lengths * float(b) / model.base_ms(float(b)) / (1.0 + kappas[:, None] * x[None, :])
        out[i] = g.mean(axis=0)
    return levels, weights, out
