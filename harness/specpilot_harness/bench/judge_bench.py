"""`specpilot bench judge`: the canary judge's operating characteristic.

How often the paired judge (`specpilot.tuning.judge.judge`) promotes a canary, by how much the canary is
truly better, and after how many windows: its false-promotion rate (a canary no better, or worse) and its
power (a canary better by a few percent), at given step-time noise, canary windows, margin and confidence.
The planner values a canary by the judge's chance of promoting it (`judge.promotion_power`), printed
beside the measured rate. These set what any tuner built on the judge can reach: a target on the worst
promotion over hundreds of canaries is a target on the false-promotion rate near zero gain, and a target
on regret one on the power at gains of a few percent.

Each trial is one canary at one load level, with the simulated deployment's noise (`simulate.py`): per
window, both tracks' step times are log-normal with sd `noise`, SHARED_NOISE_FRACTION of the variance shared
(the same traffic in the same window). Tokens per step are the same on both tracks, so the canary's
goodput ratio is its step-time ratio. The stable track is observed for some windows first, as the tuner
does; then the judge is asked after every paired window, as the controller asks it, until it promotes,
rolls back, or its windows run out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specpilot.tuning.judge import EXTEND, judge, promotion_power
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.observations import WindowRecord

from .simulate import SHARED_NOISE_FRACTION

DEFAULT_GAINS = (-0.03, -0.015, -0.005, 0.0, 0.01, 0.02, 0.03, 0.05, 0.08)
# Stable windows before the canary, as the tuner observes the stable track before its first canary and
# the judge weighs the load mix from them.
OBSERVED_WINDOWS = 12
LOAD = 16.0  # sequences per pod; one level, so the load mix holds no doubt of its own
STEP_S = 0.03
TOKENS_PER_STEP = 2.5
WINDOW_DRAFTS = 1000.0


@dataclass(frozen=True)
class Point:
    """The judge's verdicts on canaries truly better by `gain` (relative goodput)."""

    gain: float
    trials: int
    promoted: int
    rolled_back: int  # on the numbers: cannot beat the stable by the margin
    inconclusive: int  # windows ran out
    mean_windows: float  # paired windows until the verdict
    expected: float  # the chance of a promotion the planner counts on (`judge.promotion_power`)

    def to_json(self) -> dict:
        return {"gain_pct": round(self.gain * 100, 3), "trials": self.trials,
                "promote_rate": round(self.promoted / self.trials, 4),
                "planner_promote_rate": round(self.expected, 4),
                "rollback_rate": round(self.rolled_back / self.trials, 4),
                "inconclusive_rate": round(self.inconclusive / self.trials, 4),
                "mean_windows": round(self.mean_windows, 2)}


def _record(seq: int, track: str, n: int, step_s: float) -> WindowRecord:
    return WindowRecord(seq, track, n, WINDOW_DRAFTS, (WINDOW_DRAFTS * (TOKENS_PER_STEP - 1.0),),
                        TOKENS_PER_STEP, step_s, LOAD)


def trial(gain: float, rng: np.random.Generator, noise: float, windows: int, margin: float,
          confidence: float) -> tuple[Ruling, bool, int]:
    """One canary truly better by `gain`: the judge's final ruling, whether it was for windows running out,
    and the paired windows it took."""
    shared_sd, own_sd = noise * math.sqrt(SHARED_NOISE_FRACTION), noise * math.sqrt(1.0 - SHARED_NOISE_FRACTION)
    stable = [_record(seq, "stable", 1, STEP_S * math.exp(noise * rng.standard_normal()))
              for seq in range(OBSERVED_WINDOWS)]
    canary: list[WindowRecord] = []
    for k in range(EXTEND * windows):
        seq = OBSERVED_WINDOWS + k
        shared = shared_sd * rng.standard_normal()
        stable.append(_record(seq, "stable", 1, STEP_S * math.exp(shared + own_sd * rng.standard_normal())))
        canary.append(_record(seq, "canary", 2,
                              STEP_S / (1.0 + gain) * math.exp(shared + own_sd * rng.standard_normal())))
        v = judge(stable, canary, [r.load for r in stable], "throughput", margin, confidence, windows)
        if v.decision != Ruling.CONTINUE:
            return v.decision, v.inconclusive, len(canary)
    return Ruling.ROLLBACK, True, len(canary)


def operating_characteristic(gains: Sequence[float], trials: int, noise: float, windows: int, margin: float,
                             confidence: float, seed: int = 0) -> list[Point]:
    """Per true gain, the judge's verdicts over `trials` canaries (seeded: the same numbers every run), and
    the chance of a promotion the planner values a canary with, at this noise's paired per-window spread."""
    rng = np.random.default_rng(seed)
    paired_sd = noise * math.sqrt(2.0 * (1.0 - SHARED_NOISE_FRACTION))
    expected = promotion_power(np.array(gains, dtype=float), margin, confidence, paired_sd, windows)
    out = []
    for g, e in zip(gains, expected):
        verdicts = [trial(g, rng, noise, windows, margin, confidence) for _ in range(trials)]
        out.append(Point(g, trials, sum(d == Ruling.PROMOTE for d, _, _ in verdicts),
                         sum(d == Ruling.ROLLBACK and not late for d, late, _ in verdicts),
                         sum(d == Ruling.ROLLBACK and late for d, late, _ in verdicts),
                         float(np.mean([w for _, _, w in verdicts])), float(e)))
    return out
