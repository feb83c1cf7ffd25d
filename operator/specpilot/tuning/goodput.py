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


def per_load_inverse_cost(model: StepModel, candidates: Sequence[int], loads: Sequence[float], m: int,
                          seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(levels, weights, 1 / t(N, B) samples (M, L, J) in 1/ms, from the prior level and the learned f)."""
    levels, weights = load_levels(loads)
    f = model.log_cost_samples(candidates, levels, m, seed)
    base = np.array([model.base_ms(float(b)) for b in levels])
    return levels, weights, np.exp(-f) / base[None, :, None]


def goodput_samples(model: StepModel, candidates: Sequence[int], lengths: np.ndarray,
                    loads: Sequence[float], objective: str) -> np.ndarray:
    """(M, J) goodput samples from E[L] samples (M, J) and the step-time model's samples."""
    levels, weights, inv = per_load_inverse_cost(model, candidates, loads, lengths.shape[0])
    scale = weights * (levels if objective == "throughput" else 1.0)
    return lengths * (scale[None, :, None] * inv).sum(axis=1)
