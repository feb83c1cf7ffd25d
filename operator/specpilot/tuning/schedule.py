"""Schedule mode: an N per batch-size range (vLLM's `num_speculative_tokens_per_batch_size`).

The best N falls as load rises (docs/references.md §3), and vLLM can vary N below the started maximum per running batch
size without a restart. From the posterior mean goodput at each observed load level this picks the best N
per level under a started N (for a chain drafter the largest of them; a parallel drafter keeps the first K
of its N-block, so each started N is weighed with its own curve's prefixes), splits the batch-size axis at
the geometric midpoints between levels, and reports the schedule's goodput over the load mix against the
best single N and against the stable track.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specpilot_runtime.speculative import schedule_k

from .goodput import per_load_goodput
from .observations import WindowRecord
from .step_model import StepModel
from .transfer import Draws, prefix_transfers, sample_lengths, sample_truncated_lengths

# Upper end of the last batch-size range: above any max_num_seqs a deployment would run.
MAX_BATCH_SIZE = 4096
SAMPLES = 256


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

    A chain drafter's K under a larger started N is its K-token draft, so the started N is the largest
    per-level optimum. A parallel drafter drafts its N-block and keeps K: every started N is weighed with
    the K-prefixes of its own curve, and the best schedule over them wins."""
    cands = sorted(set(candidates))
    draws = Draws.make(SAMPLES)
    chain = prefix_transfers(method)
    levels, weights, g = _per_level(model, cands, sample_lengths(method, records, cands, draws), loads, objective)
    totals = weights @ g
    j_single = int(totals.argmax())

    def under(started: int) -> tuple[list[int], np.ndarray]:
        """The K a track started at N may draft, and their goodput per level."""
        ks = [k for k in cands if k <= started]
        if chain:
            return ks, g[:, [cands.index(k) for k in ks]]
        lengths = sample_truncated_lengths(method, records, started, ks, draws)
        return ks, _per_level(model, ks, lengths, loads, objective)[2]

    def total(ks: list[int], gk: np.ndarray, per_level: Sequence[int]) -> float:
        return float(sum(w * gk[i, ks.index(k)] for i, (w, k) in enumerate(zip(weights, per_level))))

    best: tuple[float, int, list[int]] | None = None
    for started in ([max(cands)] if chain else [n for n in cands if n > 0]):
        ks, gk = under(started)
        per_level = [ks[int(row.argmax())] for row in gk]
        value = total(ks, gk, per_level)
        if best is None or value > best[0]:
            best = (value, max(per_level) if chain else started, per_level)
    if best is None:  # no N > 0 to start: nothing to schedule
        best = (float(totals[j_single]), 0, [cands[j_single]] * len(levels))
    sched_total, started_n, best_per_level = best
    stable_gain = None
    if stable_n is not None:
        served = [schedule_k(stable_schedule, stable_n, int(round(level))) for level in levels]
        ks, gk = under(stable_n)
        if all(k in ks for k in served):
            stable_gain = sched_total / total(ks, gk, served) - 1.0
    return ScheduleProposal(started_n, _entries(levels, best_per_level), cands[j_single],
                            sched_total / float(totals[j_single]) - 1.0, stable_gain)


def _per_level(model: StepModel, ks: Sequence[int], lengths: np.ndarray, loads: Sequence[float],
               objective: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(levels, weights, goodput[level, K]) under the objective (latency: per request, loads alike)."""
    levels, weights, g = per_load_goodput(model, ks, lengths, loads)
    if objective != "throughput":
        g = g / levels[:, None]
    return levels, weights, g


def _entries(levels: np.ndarray, per_level: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """Batch-size ranges split at the geometric midpoints between levels; equal neighbours merged."""
    bounds = [1]
    for lo, hi in zip(levels[:-1], levels[1:]):
        bounds.append(int(math.floor(math.sqrt(lo * hi))) + 1)
    entries: list[tuple[int, int, int]] = []
    for i, k in enumerate(per_level):
        lo = bounds[i]
        hi = bounds[i + 1] - 1 if i + 1 < len(bounds) else MAX_BATCH_SIZE
        if entries and entries[-1][2] == k:
            entries[-1] = (entries[-1][0], hi, k)
        else:
            entries.append((lo, hi, k))
    return tuple(entries)


def schedule_text(rows: list[list[int]] | None) -> str:
    """A schedule in one short line, e.g. "1-8:5 9-64:3 65+:1" (the last range runs to any batch size)."""
    if not rows:
        return ""
    parts = [f"{lo}-{hi}:{k}" for lo, hi, k in rows[:-1]]
    lo, _, k = rows[-1]
    return " ".join(parts + [f"{lo}+:{k}"])
