"""Prior engine step-time shapes per drafter family, from the H200 measurements.

The numbers are `data/h200-step-cost-llama8b.json` (shared data, measured 2026-11-30 on one NVIDIA H200:
an 8B dense target, KV cache 1024 tokens per sequence, CUDA graphs, median of 20). They are kept here as
constants because the tuner is pure code that opens no files. Only their *shape* is used as a prior: how
much a step at N costs relative to a step without speculation at the same load. The step-time model
(`step_model.py`) learns how the real deployment departs from that shape.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from functools import lru_cache

from specpilot_runtime.speculative import Family

# Query tokens per sequence (q = N + 1) at which the tables were measured.
QS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 12, 16)
# Concurrent sequences (B) at which the tables were measured.
BS: tuple[int, ...] = (1, 4, 16, 32, 64, 128, 256)

# Target forward over B sequences x q tokens (verification), ms.
TARGET_MS: dict[int, tuple[float, ...]] = {
    1: (5.4882, 5.7596, 5.7672, 5.795, 5.8189, 5.8235, 5.846, 5.8812, 5.9022),
    4: (5.6301, 5.893, 5.9139, 5.9408, 5.9869, 6.0089, 6.0568, 6.1769, 6.2103),
    16: (5.8495, 6.1704, 6.2926, 6.3208, 6.477, 6.6244, 6.8184, 8.1261, 9.2188),
    32: (6.5052, 6.8869, 7.1882, 7.3786, 7.864, 8.6634, 9.7664, 12.7373, 15.6802),
    64: (7.7296, 8.4515, 9.7238, 10.7859, 12.4472, 13.8486, 16.7359, 23.3212, 29.4754),
    128: (10.3214, 12.7856, 15.8997, 18.801, 22.3616, 25.3344, 31.5657, 45.0134, 58.7668),
    256: (16.5442, 22.8995, 29.5211, 36.0548, 42.8292, 48.989, 63.2386, 90.0351, 118.4694),
}
# One step of an autoregressive drafter head (one decoder layer + LM head over B tokens), ms.
AR_HEAD_STEP_MS: dict[int, float] = {
    1: 0.4159, 4: 0.4205, 16: 0.4392, 32: 0.478, 64: 0.5315, 128: 0.629, 256: 0.9627,
}
# One pass of a parallel block drafter (five layers + LM head over B x q tokens), ms.
BLOCK_DRAFTER_MS: dict[int, tuple[float, ...]] = {
    1: (1.0652, 1.1124, 1.1125, 1.115, 1.1222, 1.1253, 1.129, 1.1348, 1.1365),
    4: (1.0913, 1.134, 1.1414, 1.1426, 1.1592, 1.1593, 1.1703, 1.1919, 1.2069),
    16: (1.1397, 1.2012, 1.2185, 1.2344, 1.2567, 1.2694, 1.3119, 1.518, 1.7407),
    32: (1.2566, 1.32, 1.3544, 1.3928, 1.4683, 1.6153, 1.8468, 2.5795, 3.1082),
    64: (1.4695, 1.5662, 1.7951, 1.9996, 2.3436, 2.6265, 3.2322, 4.5476, 6.0852),
    128: (1.8886, 2.2976, 2.9344, 3.5992, 4.4244, 4.861, 6.3427, 9.4045, 12.0683),
    256: (2.9738, 4.2789, 5.6025, 6.9331, 8.4766, 10.1668, 12.6255, 18.091, 23.9233),
}


def _interp_q(row: tuple[float, ...], q: float) -> float:
    """Linear in q between measured points; linear extrapolation beyond q = 16 (cost keeps growing)."""
    if q <= QS[0]:
        return row[0]
    i = min(bisect_right(QS, q), len(QS) - 1)
    q0, q1 = QS[i - 1], QS[i]
    return row[i - 1] + (row[i] - row[i - 1]) * (q - q0) / (q1 - q0)


def _interp_b(values: dict[int, float], b: float) -> float:
    """Linear in log B between measured loads, clamped at the ends (no data outside 1..256)."""
    b = min(max(b, BS[0]), BS[-1])
    i = min(bisect_right(BS, b), len(BS) - 1)
    b0, b1 = BS[i - 1], BS[i]
    f = (math.log(b) - math.log(b0)) / (math.log(b1) - math.log(b0))
    return values[b0] + (values[b1] - values[b0]) * f


def target_ms(n: int, b: float) -> float:
    """Verification cost of N draft tokens (q = N + 1) at B concurrent sequences."""
    return _interp_b({k: _interp_q(row, n + 1) for k, row in TARGET_MS.items()}, b)


def drafter_ms(family: Family, n: int, b: float) -> float:
    """Drafting cost of N tokens: N head steps (sequential), one block pass (parallel), ~0 otherwise."""
    if n == 0 or family in (Family.NONE, Family.NEAR_FREE):
        return 0.0
    if family is Family.SEQUENTIAL:
        return n * _interp_b(AR_HEAD_STEP_MS, b)
    return _interp_b({k: _interp_q(row, n + 1) for k, row in BLOCK_DRAFTER_MS.items()}, b)


def step_ms(family: Family, n: int, b: float) -> float:
    """Prior engine step time at N and B for a drafter family (H200, 8B target)."""
    return target_ms(n, b) + drafter_ms(family, n, b)


@lru_cache(maxsize=8192)
def relative_overhead(family: Family, n: int, b: float) -> float:
    """x(N, B) = t(N, B) / t(0, B) - 1: the extra cost of speculating at N, relative to not speculating."""
    return step_ms(family, n, b) / step_ms(family, 0, b) - 1.0
