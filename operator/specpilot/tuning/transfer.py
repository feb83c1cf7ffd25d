"""What counters at one N say about E[L_N'] at another N', per drafter family (docs/references.md §3).

- Prefix-transfer drafters (MTP, EAGLE, draft model, n-gram): the k-th draft token does not depend on N,
  so windows at N give S_1..S_N exactly for every N' <= N. Above the deepest N observed only a bound is
  known; the belief extrapolates the last conditional acceptance a_K = S_K / S_{K-1} (it tends to rise
  with depth, so it is not extrapolated from a_1) with a spread, never above the S_K bound.
- Parallel block drafters (DFlash, DSpark): a block of N masked positions is predicted at once, so S_k may
  depend on N. Windows at exactly N' are used when present; otherwise the nearest observed N is borrowed
  with a multiplicative uncertainty that grows with the distance; between two observed N that disagree on
  the positions they share, the curve is as likely either one's.

`sample_lengths` draws E[L_N] for every candidate under these beliefs; the planner and the judge reason
over those draws. Randomness comes in only as the caller's standard-normal draws, so results are
deterministic given the state.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from statistics import NormalDist
from typing import Sequence

import numpy as np

from specpilot_runtime.speculative import METHODS

from .constants import (BORROW_SD, BOUND_Z, EXTRAPOLATION_SD, LOCAL_RATE_FACTOR, MIN_TREND_POSITIONS, NO_DATA_COND,
                        NO_DATA_COND_CLIP, NO_DATA_S1, NO_DATA_S1_CLIP)
from .observations import WindowRecord
from .survival import Survival, estimate


@dataclass(frozen=True)
class Draws:
    """Standard-normal draws: one row per posterior sample."""

    level: np.ndarray  # (M,) shifts observed positions within their standard errors
    cond: np.ndarray  # (M,) shifts the extrapolated conditional acceptance
    borrow: np.ndarray  # (M,) shifts curves borrowed across N (parallel drafters)
    s1: np.ndarray  # (M,) prior S_1 when nothing is observed
    between: np.ndarray  # (M,) where between two measured N a parallel drafter's curve sits

    @classmethod
    def make(cls, m: int, seed: int = 0) -> "Draws":
        rng = np.random.default_rng(seed)
        return cls(*(rng.standard_normal(m) for _ in fields(cls)))


def prefix_transfers(method: str) -> bool:
    return METHODS[method].prefix_transfers


def known(method: str, records: Sequence[WindowRecord]) -> set[int]:
    """N whose E[L] the records already measure (0 always: no drafts, E[L] = 1)."""
    ns = {r.n for r in records if r.n > 0 and r.drafts > 0}
    if prefix_transfers(method):
        return set(range(0, max(ns, default=0) + 1))
    return ns | {0}


def revealed_by(method: str, n: int, candidates: Sequence[int], records: Sequence[WindowRecord]) -> list[int]:
    """Candidates a canary at N would newly measure: N itself, plus every unmeasured N' < N for prefix
    drafters (their k-th token does not depend on N)."""
    if not prefix_transfers(method):
        return [n]
    seen = known(method, records)
    return [c for c in candidates if c == n or (c < n and c not in seen)]


def _curve_samples(surv: Survival, depth: int, d: Draws) -> np.ndarray:
    """(M, depth) sampled S_1..S_depth from an observed curve, extrapolated past its depth."""
    m = d.level.shape[0]
    out = np.zeros((m, depth))
    k_obs = min(surv.depth, depth)
    if surv.depth == 0:
        s_prev = np.clip(NO_DATA_S1[0] + NO_DATA_S1[1] * d.s1, *NO_DATA_S1_CLIP)
        out[:, 0] = s_prev
        cond = np.clip(NO_DATA_COND[0] + NO_DATA_COND[1] * d.cond, *NO_DATA_COND_CLIP)
        for k in range(1, depth):
            s_prev = s_prev * cond
            out[:, k] = s_prev
        return out
    s = np.asarray(surv.s[:k_obs])
    se = np.asarray(surv.se[:k_obs])
    out[:, :k_obs] = np.clip(s[None, :] + se[None, :] * d.level[:, None], 0.0, 1.0)
    if depth > k_obs:
        full = np.asarray(surv.s)
        k = surv.depth
        # Mean of the last two conditional acceptances: one alone is noisy at small S.
        conds = [full[i] / full[i - 1] for i in range(max(1, k - 2), k) if full[i - 1] > 0]
        if not conds:
            conds = [full[0]]
        a = np.clip(np.mean(conds) + EXTRAPOLATION_SD * d.cond, 0.0, 1.0)
        prev = out[:, k_obs - 1]
        for j in range(k_obs, depth):
            prev = prev * a
            out[:, j] = prev
    return out


def sample_lengths(method: str, records: Sequence[WindowRecord], candidates: Sequence[int],
                   d: Draws) -> np.ndarray:
    """(M, len(candidates)) samples of E[L_N] for each candidate under the family's transfer rule."""
    m = d.level.shape[0]
    out = np.ones((m, len(candidates)))
    if prefix_transfers(method):
        surv = estimate(records)
        depth = max(candidates)
        if depth > 0:
            cum = 1.0 + np.cumsum(_curve_samples(surv, depth, d), axis=1)
            for j, n in enumerate(candidates):
                if n > surv.depth > 0:
                    # Never beyond the optimistic bound, whatever the observed positions' draws did.
                    out[:, j] = np.minimum(cum[:, n - 1], surv.optimistic_length(n, BOUND_Z))
                elif n > 0:
                    out[:, j] = cum[:, n - 1]
        return out
    for j, n in enumerate(candidates):
        if n > 0:
            out[:, j] = 1.0 + _block_curve(records, n, d).sum(axis=1)
    return out


def sample_truncated_lengths(method: str, records: Sequence[WindowRecord], n: int, ks: Sequence[int],
                             d: Draws) -> np.ndarray:
    """(M, len(ks)) samples of E[L] of a track started at N that drafts K <= N tokens (a batch-size
    schedule): vLLM drafts N and keeps the first K, so the first K positions of N's curve. For a chain
    drafter that is K's own curve; a parallel drafter's curve at N may lie below K's own (a block of N
    diluted), so it is N's own curve, cut at K."""
    if prefix_transfers(method):
        return sample_lengths(method, records, ks, d)
    m = d.level.shape[0]
    curve = _block_curve(records, n, d) if n > 0 else np.zeros((m, 0))
    cum = np.concatenate([np.ones((m, 1)), 1.0 + np.cumsum(curve, axis=1)], axis=1)  # column K: E[L] drafting K
    return cum[:, list(ks)]


def _block_curve(records: Sequence[WindowRecord], n: int, d: Draws) -> np.ndarray:
    """(M, N) samples of S_1..S_N of a parallel drafter started at N >= 1 (its curve depends on N)."""
    m = d.level.shape[0]
    observed = sorted({r.n for r in records if r.n > 0 and r.drafts > 0})
    if n in observed:
        return _curve_samples(estimate(records, exact_n=n), n, d)
    if not observed:
        return _curve_samples(Survival((), (), ()), n, d)
    # Borrow from the nearest larger observed N (its prefix measures every position), else the
    # nearest smaller one (extrapolated past its depth).
    larger = [o for o in observed if o > n]
    smaller = [o for o in observed if o < n]
    src = min(larger) if larger else max(observed)
    curve = _curve_samples(estimate(records, exact_n=src), n, d)
    spread = BORROW_SD * np.sqrt(abs(n - src) / src)
    shift = np.zeros((m, n))
    if larger and smaller:
        # Between two measured N that disagree, the curve is the smaller's (a drop at the block's end,
        # above N) or the larger's (the block diluted below N), at first as likely either, then as the N
        # measured between two others showed (`smaller_odds`): one or the other, not a blend halfway,
        # which would make the neighbour below a full block look like a tie.
        # The smaller's curve is the larger's moved by the trend of their per-position ratio, which a
        # drop in every conditional acceptance makes grow with depth. N measured above the one borrowed
        # from show how fast the curve moves with N there: then it moves no faster than
        # LOCAL_RATE_FACTOR times that.
        moved = measured_shift(records, src, max(smaller))
        between = min(abs(moved), LOCAL_RATE_FACTOR * (src - n) * local_rate(records, observed, src))
        # The trend never crosses zero: it moves the curve the way the two N's sums disagree.
        trend = np.copysign(np.maximum(np.sign(moved) * position_shifts(records, src, max(smaller), n), 0.0),
                            moved)
        scale = between / abs(moved) if moved else 0.0
        like_smaller = NormalDist().inv_cdf(1.0 - smaller_odds(records, observed))
        shift = scale * trend[None, :] * (d.between > like_smaller)[:, None]
    return curve * np.exp(shift + spread * d.borrow[:, None])


def smaller_odds(records: Sequence[WindowRecord], observed: Sequence[int]) -> float:
    """Chance that an unmeasured N between two measured N that disagree has the smaller one's curve rather
    than the larger one's (parallel drafters): Laplace's rule over the N measured between two others, each
    counting for the neighbour its curve came closer to on the positions they share. Both are a drafter's
    own behaviour (it accepts less once its block is full, or its whole block is diluted by its length), so
    a block drafter found diluted at 14 between 7 and 15 is believed diluted between 7 and 14 too, at odds
    of 2 to 1 rather than even."""
    smaller = tests = 0
    for a, o, b in zip(observed, observed[1:], observed[2:]):
        to_a, to_b = abs(measured_shift(records, o, a)), abs(measured_shift(records, o, b))
        if to_a != to_b:
            tests += 1
            smaller += to_a < to_b
    return (1 + smaller) / (2 + tests)


def position_shifts(records: Sequence[WindowRecord], a_n: int, b_n: int, depth: int) -> np.ndarray:
    """(depth,) log ratio of S_k measured at N=b_n to S_k at N=a_n for k = 1..depth: a weighted line in k
    through the positions both measure, extrapolated past them (parallel drafters).

    A block drafter diluted by its length moves every position alike (a flat line); one whose every
    conditional acceptance drops moves deep positions most, and those are the ones no shared position
    measures.
    """
    a, b = side_by_side(records, a_n, b_n)
    k = min(a_n, b_n, a.depth, b.depth)
    ks = [i for i in range(k) if a.s[i] > 0 and b.s[i] > 0]
    if not ks:
        return np.zeros(depth)
    y = np.array([np.log(b.s[i] / a.s[i]) for i in ks])
    w = np.array([1.0 / ((a.se[i] / a.s[i]) ** 2 + (b.se[i] / b.s[i]) ** 2) for i in ks])
    x = np.array(ks, dtype=float) + 1.0
    level = float(np.sum(w * y) / np.sum(w))
    slope = 0.0
    if len(ks) >= MIN_TREND_POSITIONS:
        xm = float(np.sum(w * x) / np.sum(w))
        sxx = float(np.sum(w * (x - xm) ** 2))
        slope = float(np.sum(w * (x - xm) * (y - level)) / sxx)
        # Extrapolated twice as deep as measured, a slope within its noise would invent a gap: it is
        # believed in proportion to how far it stands from its own standard error (t^2 / (1 + t^2)).
        t2 = slope * slope * sxx
        slope *= t2 / (1.0 + t2)
        level -= slope * xm
    return level + slope * np.arange(1, depth + 1)


def local_rate(records: Sequence[WindowRecord], observed: Sequence[int], src: int) -> float:
    """How much a parallel drafter's curve moves per unit of N above `src`: the largest disagreement per N
    between consecutive measured N from `src` up (infinite when none is measured above it)."""
    above = [o for o in observed if o >= src]
    rates = [measured_disagreement(records, a, b) / (b - a) for a, b in zip(above, above[1:])]
    return max(rates) if rates else float("inf")


def measured_disagreement(records: Sequence[WindowRecord], low: int, high: int) -> float:
    """|log| ratio of sum S_1..S_low measured at N=high to the same sum measured at N=low (parallel drafters)."""
    return abs(measured_shift(records, low, high))


def measured_shift(records: Sequence[WindowRecord], a_n: int, b_n: int) -> float:
    """log ratio of sum S_1..S_k measured at N=b_n to the same sum at N=a_n, over the positions both measure.

    The only evidence of how much S_k depends on N in this deployment: two measured N that agree on their
    common positions make the curve between them trustworthy; a block drafter that accepts less once its
    block is full (say) shows up here, and an N between them is then worth measuring rather than borrowing.
    """
    a, b = side_by_side(records, a_n, b_n)
    k = min(a_n, b_n, a.depth, b.depth)
    sum_a, sum_b = sum(a.s[:k]), sum(b.s[:k])
    if k == 0 or sum_a <= 0 or sum_b <= 0:
        return 0.0
    # Sampling noise is not discounted: when the two N were measured in a few windows, the curve between
    # them is that much less certain too, and a drop at the block's end stays visible.
    return float(np.log(sum_b / sum_a))


def side_by_side(records: Sequence[WindowRecord], a_n: int, b_n: int) -> tuple[Survival, Survival]:
    """The curves measured at N=a_n and at N=b_n, from the windows that measured both (a canary and the
    stable serve the same traffic at once) when there are any. Acceptance moves with the prompts from one
    window to the next; both tracks move with it, so only windows side by side compare the two N (against
    every window of the stable, that drift blurs a block drafter's drop at its full block)."""
    seqs = {n: {r.seq for r in records if r.n == n and r.drafts > 0} for n in (a_n, b_n)}
    both = seqs[a_n] & seqs[b_n]
    rows = [r for r in records if r.seq in both] if both else records
    return estimate(rows, exact_n=a_n), estimate(rows, exact_n=b_n)
