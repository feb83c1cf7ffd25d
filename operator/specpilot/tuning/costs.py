"""Prior engine step-time shapes per drafter family, from step-cost measurements on several machines.

The tables are in `cost_shapes.py` (generated from `data/step-cost/*.json`: an 8B and a 32B dense target
and two MoE targets on one H200, a 70B dense target over two H200s with tensor parallelism, a 1B dense
model on CPU cores). They are constants because the tuner is pure code that opens no files. Only their
*shape* is used: how much a step at N costs relative to a step without speculation at the same load. The
step-time model (`step_model.py`) weighs the shapes against a deployment's paired step times and learns
how it departs from all of them.

The functions without a `shape` argument are the 8B H200 shape (docs/references.md §5), which the benchmark's article
profiles are calibrated on.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from functools import lru_cache

import numpy as np

from specpilot_runtime.speculative import Family

from .constants import COST_TABLE_MAX_N, OVERHEAD_CACHE_SIZE, OVERHEAD_TABLE_CACHE_SIZE, ROOFLINE_FLOOR_LOADS
from .cost_shapes import SHAPES

DEFAULT_SHAPE = "h200-dense8b"
# The compute-bound limit of every machine: each token verified or drafted costs alike, so the overhead grows
# linearly in N at any load (a CPU, or a draft model as large as the target). No table measures it; it
# bounds the measured shapes from the steep side, so a canary showing steep costs above the stable cannot be
# explained away by a shape that is cheap below it.
ROOFLINE = "roofline"
# A compute-bound machine still has a floor per step (weights read, kernel launches) that its compute
# overtakes only at some load B_0: the overhead of N tokens more per sequence is then N B / (B + B_0), small
# at light load and N at heavy load (a CPU serving one sequence is far from its roofline, serving 16 is on
# it). The plain roofline is B_0 = 0.
ROOFLINE_FLOORS = {ROOFLINE: 0.0, **{f"{ROOFLINE}-floor{b:g}": b for b in ROOFLINE_FLOOR_LOADS}}


def _monotone(row: tuple[float, ...]) -> list[float]:
    """A measured row in q made non-decreasing: verifying more tokens never costs less (timing noise can)."""
    return list(np.maximum.accumulate(np.asarray(row, dtype=float)))


def _interp_q(qs: tuple[float, ...], row: list[float], q: float) -> float:
    """Linear in q between measured points; linear extrapolation beyond the last q (cost keeps growing)."""
    if q <= qs[0]:
        return row[0]
    i = min(bisect_right(qs, q), len(qs) - 1)
    q0, q1 = qs[i - 1], qs[i]
    return row[i - 1] + (row[i] - row[i - 1]) * (q - q0) / (q1 - q0)


def _interp_b(bs: tuple[float, ...], values: list[float], b: float) -> float:
    """Linear in log B between measured loads, clamped at the ends (no data outside the measured range)."""
    b = min(max(b, bs[0]), bs[-1])
    i = min(bisect_right(bs, b), len(bs) - 1)
    b0, b1 = bs[i - 1], bs[i]
    f = (math.log(b) - math.log(b0)) / (math.log(b1) - math.log(b0))
    return values[i - 1] + (values[i] - values[i - 1]) * f


def target_ms(n: int, b: float, shape: str = DEFAULT_SHAPE) -> float:
    """Verification cost of N draft tokens (q = N + 1) at B concurrent sequences."""
    s = SHAPES[shape]
    return _interp_b(s["bs"], [_interp_q(s["qs"], _monotone(r), n + 1) for r in s["target"]], b)


def drafter_ms(family: Family, n: int, b: float, shape: str = DEFAULT_SHAPE) -> float:
    """Drafting cost of N tokens: N head steps (sequential), one block pass (parallel), ~0 otherwise."""
    if n == 0 or family in (Family.NONE, Family.NEAR_FREE):
        return 0.0
    s = SHAPES[shape]
    if family is Family.SEQUENTIAL:
        return n * _interp_b(s["bs"], list(s["head"]), b)
    return _interp_b(s["bs"], [_interp_q(s["qs"], _monotone(r), n + 1) for r in s["block"]], b)


def step_ms(family: Family, n: int, b: float, shape: str = DEFAULT_SHAPE) -> float:
    """Prior engine step time at N and B for a drafter family on one measured shape."""
    return target_ms(n, b, shape) + drafter_ms(family, n, b, shape)


@lru_cache(maxsize=OVERHEAD_CACHE_SIZE)
def relative_overhead(family: Family, n: int, b: float, shape: str = DEFAULT_SHAPE) -> float:
    """x(N, B) = t(N, B) / t(0, B) - 1: the extra cost of speculating at N, relative to not speculating."""
    return step_ms(family, n, b, shape) / step_ms(family, 0, b, shape) - 1.0


@lru_cache(maxsize=OVERHEAD_TABLE_CACHE_SIZE)
def overhead_table(family: Family, shape: str) -> tuple[np.ndarray, np.ndarray]:
    """(log B at the shape's measured loads, x[n, i] for n = 0..COST_TABLE_MAX_N): for vectorised interpolation."""
    bs = SHAPES[shape]["bs"]
    x = np.array([[relative_overhead(family, n, float(b), shape) for b in bs] for n in range(COST_TABLE_MAX_N + 1)])
    return np.log(np.asarray(bs, dtype=float)), x


def overheads(family: Family, shape: str, ns: np.ndarray, loads: np.ndarray) -> np.ndarray:
    """x(ns[i], loads[i]) on one shape, vectorised (linear in log B, clamped to the measured loads)."""
    if shape in ROOFLINE_FLOORS:
        b = np.maximum(np.asarray(loads, dtype=float), 1.0)
        return np.clip(ns, 0, COST_TABLE_MAX_N).astype(float) * b / (b + ROOFLINE_FLOORS[shape])
    logb, x = overhead_table(family, shape)
    lb = np.clip(np.log(np.maximum(loads, 1.0)), logb[0], logb[-1])
    i = np.clip(np.searchsorted(logb, lb, side="right"), 1, len(logb) - 1)
    f = (lb - logb[i - 1]) / (logb[i] - logb[i - 1])
    n = np.clip(ns, 0, COST_TABLE_MAX_N).astype(int)
    return x[n, i - 1] * (1 - f) + x[n, i] * f
