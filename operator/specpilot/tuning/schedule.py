"""Schedule mode: an N per batch-size range (vLLM's `num_speculative_tokens_per_batch_size`).

The best N falls as load rises (docs/references.md §3), and vLLM can vary N below the started maximum per running batch
size without a restart. From the posterior mean goodput at each observed load level this picks the best N
per level under each started N (for a chain drafter the largest of them), splits the batch-size axis at
the geometric midpoints between levels, and reports the schedule's goodput over the load mix against the
best single N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from specpilot_runtime.speculative import schedule_k

from .constants import MAX_BATCH_SIZE, SCHEDULE_SAMPLES, STARTED_TIE
from .goodput import per_load_inverse_cost
from .observations import WindowRecord
from .step_model import StepModel
from .transfer import Draws, prefix_transfers, sample_truncated_lengths


@dataclass(frozen=True)
class ScheduleProposal:
    num_speculative_tokens: int  # the started (maximum) N
    entries: tuple[tuple[int, int, int], ...]  # (min batch size, max batch size, N)
    best_single_n: int
    gain: float  # schedule goodput / best single N's goodput - 1, over the observed load mix
    stable_gain: float | None = None  # schedule goodput / the stable N's goodput - 1, when it is a candidate

    @property
    def rows(self) -> list[list[int]]:
        return [list(e) for e in self.entries]

    def to_json(self) -> dict:
        out = {"num_speculative_tokens": self.num_speculative_tokens,
               "num_speculative_tokens_per_batch_size": self.rows,
               "best_single_n": self.best_single_n, "gain_pct": round(self.gain * 100, 3)}
        if self.stable_gain is not None:
            out["stable_gain_pct"] = round(self.stable_gain * 100, 3)
        return out


def propose(method: str, records: Sequence[WindowRecord], model: StepModel, candidates: Sequence[int],
            loads: Sequence[float], objective: str, stable_n: int | None = None,
            stable_schedule: Sequence[Sequence[int]] | None = None) -> ScheduleProposal:
    """Per-load optima as a batch-size schedule, with its gain over the best single N (and over the stable
    track it would replace: `stable_n`, with `stable_schedule` when it serves one).

    A track started at N drafts K <= N at each batch size, and accepts as the first K positions of N's
    curve: for a parallel drafter that may be less than K's own, so the started N is chosen with the K
    per level (every candidate N, each with its best falling K per level), not as the largest of K's
    each judged on its own curve."""
    cands = sorted(set(candidates))
    d = Draws.make(SCHEDULE_SAMPLES)
    levels, weights, inv = per_load_inverse_cost(model, cands, loads, SCHEDULE_SAMPLES)
    if objective != "throughput":
        inv = inv / levels[None, :, None]  # per-request speed: every load counts alike

    def level_goodput(n: int) -> np.ndarray:
        """(levels, K) mean goodput of a track started at N drafting each candidate K <= N."""
        ks = [k for k in cands if k <= n]
        lengths = sample_truncated_lengths(method, records, n, ks, d)
        return (lengths[:, None, :] * levels[None, :, None] * inv[:, :, :len(ks)]).mean(axis=0)

    by_n = {n: level_goodput(n) for n in cands}
    singles = {n: float(weights @ g[:, -1]) for n, g in by_n.items()}
    best_single = max(singles, key=lambda n: (singles[n], -n))
    plans = {n: _falling(weights[:, None] * g) for n, g in by_n.items() if n >= 1}
    totals = {n: float(sum(w * by_n[n][i, j] for i, (w, j) in enumerate(zip(weights, plan))))
              for n, plan in plans.items()}
    if not totals:
        return ScheduleProposal(best_single, level_entries(levels, [best_single] * len(levels)), best_single, 0.0)
    # The smallest started N within STARTED_TIE of the best (a parallel drafter: an unmeasured N's curve is
    # a borrowed one with a spread, whose mean rises a hair with the distance it is borrowed over); a chain
    # drafter's started N is its largest K.
    tie = 0.0 if prefix_transfers(method) else STARTED_TIE
    top = max(totals.values())
    started = min(n for n, t in totals.items() if t >= top * (1.0 - tie))
    entries = level_entries(levels, [cands[j] for j in plans[started]])

    def total(n: int, rows: Sequence[Sequence[int]] | None) -> float | None:
        """Goodput over the mix of a track at N serving `rows`, at the K each level's batch size gets."""
        served = [schedule_k(rows, n, int(round(level))) for level in levels]
        if n not in by_n or not all(k in cands and k <= n for k in served):
            return None
        return float(sum(w * by_n[n][i, cands.index(k)] for i, (w, k) in enumerate(zip(weights, served))))

    sched_total = total(started, entries) or singles[best_single]
    stable_total = total(stable_n, stable_schedule) if stable_n is not None else None
    stable_gain = sched_total / stable_total - 1.0 if stable_total else None
    return ScheduleProposal(started, entries, best_single, sched_total / singles[best_single] - 1.0, stable_gain)


def _falling(value: np.ndarray) -> list[int]:
    """Per level (rows, by rising load) the candidate index (columns, by rising N) of highest total value
    with N never rising with load: drafting pays less the fuller the batch, and noisy neighbouring levels
    must not zig-zag the schedule. Dynamic programming over (level, largest N allowed)."""
    levels, cands = value.shape
    # best[i, j]: the most levels i.. can add when level i may use candidates 0..j.
    best = np.zeros((levels + 1, cands))
    choice = np.zeros((levels, cands), dtype=int)
    for i in range(levels - 1, -1, -1):
        take = value[i] + best[i + 1]
        for j in range(cands):
            choice[i, j] = int(np.argmax(take[:j + 1]))
            best[i, j] = take[choice[i, j]]
    out, top = [], cands - 1
    for i in range(levels):
        top = choice[i, top]
        out.append(int(top))
    return out


def level_entries(levels: np.ndarray, per_level: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """Batch-size ranges split at the geometric midpoints between levels, valid as vLLM requires (from 1,
    rising, no overlap): a level with no whole batch size of its own (levels 1.1 and 1.2) adds no range,
    and equal neighbours merge."""
    bounds = [1] + [int(math.floor(math.sqrt(lo * hi))) + 1 for lo, hi in zip(levels[:-1], levels[1:])]
    entries: list[tuple[int, int, int]] = []
    for i, k in enumerate(per_level):
        lo = bounds[i]
        hi = bounds[i + 1] - 1 if i + 1 < len(bounds) else MAX_BATCH_SIZE
        if hi < lo:
            continue
        if entries and entries[-1][2] == k:
            entries[-1] = (entries[-1][0], hi, k)
        else:
            entries.append((lo, hi, k))
    return tuple(entries)


def _band(level: float, rows: Sequence[Sequence[int]]) -> list[int]:
    """Batch sizes that stand for every one from half to twice a load level (a window's running batch varies
    around its mean): K is constant between the rows' edges, so the band's start and each edge inside it."""
    lo, hi = max(1, math.floor(level / 2)), math.ceil(level * 2)
    return [lo] + sorted({e for r in rows for e in (r[0], r[1] + 1) if lo < e <= hi})


def steady_k(rows: Sequence[Sequence[int]] | None, n: int, level: float) -> int | None:
    """The K a track started at N with batch-size schedule `rows` drafts at every batch size from half to
    twice a load level; None where a row's edge falls in between (there its steps draft several K, and its
    step time is no point of t(K)). Loads are finite: a window's is held to observations.MAX_LOAD."""
    ks = {schedule_k(rows, n, b) for b in _band(level, rows or [])}
    return ks.pop() if len(ks) == 1 else None


@dataclass(frozen=True)
class TrackDrafting:
    """What a canary drafts against the stable, load by load: each track's started N and batch-size
    schedule (None: N at every batch size), for the judge (`judge.Drafting`)."""

    method: str
    stable_n: int
    stable_rows: Sequence[Sequence[int]] | None
    canary_n: int
    canary_rows: Sequence[Sequence[int]] | None
    # One track serves a batch-size table and the other does not (the table check): the same K is then not
    # the same configuration, the table having a cost of its own.
    tables_differ: bool = False

    def identical(self, level: float) -> bool:
        """Whether the tracks speculate alike around a load level (sequences per pod): both speculate,
        they draft the same K at every batch size from half to twice the level (a window's running batch
        varies around its mean, and a canary halves the load the stable served alone), and the first K
        positions do not depend on the started N (a chain drafter) or the started N is the same. There the
        two tracks are one configuration: their goodput ratio is exactly 1, with nothing to measure."""
        a_n, b_n = self.stable_n, self.canary_n
        if self.tables_differ or a_n <= 0 or b_n <= 0 or (a_n != b_n and not prefix_transfers(self.method)):
            return False
        rows = [*(self.stable_rows or []), *(self.canary_rows or [])]
        return all(schedule_k(self.stable_rows, a_n, b) == schedule_k(self.canary_rows, b_n, b)
                   for b in _band(level, rows))

    def direction(self, level: float) -> int:
        """+1 where the canary drafts more tokens per step than the stable at this load, -1 fewer, 0 as many."""
        b = max(1, int(round(level)))
        diff = schedule_k(self.canary_rows, self.canary_n, b) - schedule_k(self.stable_rows, self.stable_n, b)
        return (diff > 0) - (diff < 0)


def rows_from_json(value: Any) -> list[list[int]] | None:
    """[lo, hi, K] rows read back from a status (their shape is checked by the controller's resume)."""
    return [[int(x) for x in row] for row in value] if value else None


def schedule_text(rows: list[list[int]] | None) -> str:
    """A schedule in one short line, e.g. "1-8:5 9-64:3 65+:1" (the last range runs to any batch size)."""
    if not rows:
        return ""
    parts = [f"{lo}-{hi}:{k}" for lo, hi, k in rows[:-1]]
    lo, _, k = rows[-1]
    return " ".join(parts + [f"{lo}+:{k}"])
