"""Survival curves S_k = P(first k draft tokens accepted) from per-window counter deltas.

S_k is the ratio sum(accepted_per_pos[k-1]) / sum(drafted at position k) over windows, where the drafts
that reached position k come from specpilot's drafted-per-position counter, or are every draft when the
pods do not export it (`WindowRecord.drafted_at`): with a batch-size schedule, steps at large batches
draft K < N tokens and never accept past K, so dividing by every draft would read late positions low.
Drafts of one request are
correlated (an easy request is easy at every step), so a binomial error on the pooled counts would be far
too small. The standard error here is the window batch-means error of a ratio estimator: each window is one
observation, and the spread between windows carries the within-request correlation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .constants import MIN_SE, SINGLE_WINDOW_DESIGN_EFFECT
from .observations import WindowRecord


@dataclass(frozen=True)
class Survival:
    """S_1..S_K with batch-means standard errors, from windows that drafted position k for S_k."""

    s: tuple[float, ...]
    se: tuple[float, ...]
    windows: tuple[int, ...]  # windows that contributed to each position

    @property
    def depth(self) -> int:
        """Deepest position observed (K)."""
        return len(self.s)

    def expected_length(self, n: int) -> float:
        """E[L_n] = 1 + sum_{k<=n} S_k, for n <= depth."""
        if n > self.depth:
            raise ValueError(f"N={n} is beyond the observed depth {self.depth}")
        return 1.0 + sum(self.s[:n])

    def optimistic_length(self, n: int, z: float) -> float:
        """Upper bound on E[L_n] for any n: beyond the depth every extra position adds at most S_K.

        S_{K+j} <= S_K because survival cannot rise, so E[L_n] <= E[L_K] + (n - K) * upper(S_K).
        """
        k = self.depth
        if n <= k:
            return self.expected_length(n) + z * math.sqrt(sum(e * e for e in self.se[:n]))
        tail = (self.s[-1] + z * self.se[-1]) if k else 1.0
        return self.expected_length(k) + (n - k) * min(tail, 1.0)


def _ratio_se(num: Sequence[float], den: Sequence[float]) -> float:
    """Batch-means standard error of sum(num) / sum(den), one batch per window."""
    total_den = sum(den)
    if total_den <= 0:
        return 1.0
    r = sum(num) / total_den
    m = len(den)
    if m < 2:
        var = max(r * (1 - r), 0.0) / total_den * SINGLE_WINDOW_DESIGN_EFFECT
    else:
        resid = sum((a - r * d) ** 2 for a, d in zip(num, den))
        var = m / (m - 1) * resid / total_den ** 2
    return max(math.sqrt(var), MIN_SE)


def estimate(records: Sequence[WindowRecord], exact_n: int | None = None) -> Survival:
    """Pool windows into a survival curve.

    Position k uses every window that drafted at least k tokens (prefix transfer). Pass `exact_n` to use
    only windows that ran at exactly that N, for drafters whose S_k depends on N (parallel blocks). The
    curve ends at the first position no window drafted (a schedule that never lets K reach it).
    """
    # A window with less than one draft drafted nothing (counts are whole; a forged 5e-324 squares to 0).
    rows = [r for r in records if r.n > 0 and r.drafts >= 1 and (exact_n is None or r.n == exact_n)]
    depth = max((len(r.accepted_per_pos) for r in rows), default=0)
    s: list[float] = []
    se: list[float] = []
    counts: list[int] = []
    for k in range(1, depth + 1):
        use = [r for r in rows if len(r.accepted_per_pos) >= k and r.drafted_at(k - 1) >= 1]
        if not use:
            break
        num = [r.accepted_per_pos[k - 1] for r in use]
        den = [r.drafted_at(k - 1) for r in use]
        est = sum(num) / sum(den)
        # Survival cannot rise with depth; pooling different window sets per position can make it.
        if s:
            est = min(est, s[-1])
        s.append(est)
        se.append(_ratio_se(num, den))
        counts.append(len(use))
    return Survival(tuple(s), tuple(se), tuple(counts))
