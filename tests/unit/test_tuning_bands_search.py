"""Schedule mode under switchback, the search past the stable's neighbours and an arm kept running while the
load mix may prove it whole (tuning/bands.py: `farther`; rules/per_band.py: `band_by_band`)."""

from __future__ import annotations

import math

import numpy as np

from specpilot.tuning import ActionKind, step
from specpilot.tuning.bands import BandRecord, BandVerdict, Judging, carried_by_mix, farther, verdict_at
from specpilot.tuning.judge import Verdict, noise_prior
from specpilot.tuning.kinds import Ruling
from specpilot_runtime.speculative import schedule_k

from specpilot.tuning import Observations
from test_tuning_schedule_bands import HEAVY as RARE, LIGHT, TUNING, WINDOW_S, analysing, arm, band

HEAVY = "256-511"
JUDGING = Judging("throughput", 0.005, 0.95, 48, noise_prior(True))


def pairs(k: int, gain: float, seqs: range, ks: int = 3, seed: int = 0) -> list[BandRecord]:
    """Paired windows at the heavy band: the stable drafting `ks`, an arm drafting `k` with goodput `gain`
    above it (same step time, 2% noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for seq in seqs:
        tokens = 2.0 * np.exp(0.02 * rng.standard_normal())
        out += [BandRecord(seq, "stable", HEAVY, ks, tokens, 0.03, 300.0),
                BandRecord(seq, "canary", HEAVY, k, tokens * (1 + gain) * np.exp(0.02 * rng.standard_normal()),
                           0.03, 300.0)]
    return out


def test_a_neighbour_estimated_better_but_unproven_is_followed_one_step_farther() -> None:
    """Past a cliff K=2 is a little better than the stable's 3 and K=1 far better: an arm that left K=2
    undecided with a better estimate points the next one at K=1 (K=2 stays worth a later arm)."""
    records = pairs(2, 0.01, range(6))
    v = verdict_at(records, HEAVY, 3, 2, JUDGING)
    assert v.decision == Ruling.CONTINUE and v.gain > 0, v
    assert farther(records, HEAVY, 3, JUDGING) == [1]
    # K=1 measured better too: one step past it.
    records += pairs(1, 0.02, range(6, 12), seed=1)
    if verdict_at(records, HEAVY, 3, 1, JUDGING).decision == Ruling.CONTINUE:
        assert farther(records, HEAVY, 3, JUDGING) == [0]


def test_no_step_past_a_k_measured_worse_or_jumped_to() -> None:
    assert farther(pairs(2, -0.04, range(6)), HEAVY, 3, JUDGING) == []
    # K=1 jumped to with nothing measured at 2: it says nothing of K=0.
    assert farther(pairs(1, 0.01, range(6)), HEAVY, 3, JUDGING) == []
    assert farther([], HEAVY, 3, JUDGING) == []


def rare_heavy(rng: np.random.Generator, heavy: bool, light_gain: float, heavy_gain: float) -> Observations:
    """Both arms at the light band, and at the heavy band in the windows `heavy` says: the canary's tokens
    per sequence-step `light_gain` and `heavy_gain` above the stable's, with 1% noise."""
    def jitter() -> float:
        return float(np.exp(0.01 * rng.standard_normal()))
    stable = {LIGHT: band(1.0, 2.0 * jitter(), 0.010)}
    canary = {LIGHT: band(1.0, 2.0 * (1 + light_gain) * jitter(), 0.010)}
    if heavy:
        stable[RARE] = band(80.0, 2.0 * jitter(), 0.030)
        canary[RARE] = band(80.0, 2.0 * (1 + heavy_gain) * jitter(), 0.030)
    return Observations(window_s=WINDOW_S, stable=arm(3, stable), canary=arm(5, canary), stable_replicas=1,
                        switchback=True)


def test_an_arm_measured_better_over_the_mix_is_not_cut_to_its_first_proven_band() -> None:
    """The light band, every window, is proven first; the heavy band comes one window in four, too rarely
    to be proven on its own pairs by then. The whole arm, already measured better over the mix, runs on
    (until the mix proves it whole, or the heavy band is proven): the heavy band is served the arm's K too,
    not the light band alone."""
    rng = np.random.default_rng(0)
    state = analysing(5)
    for w in range(60):
        state, action = step(state, TUNING, rare_heavy(rng, w % 4 == 1, 0.05, 0.10), now=w * WINDOW_S)
        if action.kind != ActionKind.KEEP_ANALYSING:
            break
    assert action.kind == ActionKind.PROMOTE, action.reason
    assert schedule_k(action.schedule, action.n or 0, 80) == 5 and schedule_k(action.schedule, action.n or 0, 1) == 5


def test_an_arm_proven_over_the_mix_serves_its_k_only_where_its_pairs_back_it() -> None:
    """Proven over the load mix, the arm's K is served at the bands it paired at and was not found worse:
    not at a band it never paired (the mix never saw it), nor at one proven or estimated worse."""
    def verdict(band: str, decision: Ruling, gain: float, upper: float, windows: int) -> BandVerdict:
        return BandVerdict(band, 3, 7, Verdict(decision, gain, gain - 0.05, upper, windows, ""))
    verdicts = [verdict("1-1", Ruling.PROMOTE, 0.10, 0.15, 5), verdict("4-7", Ruling.CONTINUE, 0.0, math.inf, 1),
                verdict("16-31", Ruling.CONTINUE, -0.02, 0.01, 4), verdict("64-127", Ruling.ROLLBACK, -0.08, -0.03, 5),
                verdict("256-511", Ruling.CONTINUE, 0.0, math.inf, 0)]
    assert carried_by_mix(verdicts) == ["1-1", "4-7"]
