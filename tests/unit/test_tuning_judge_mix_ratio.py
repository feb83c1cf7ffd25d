"""The judge's gain over a load mix is the ratio of the mix's goodputs: a canary far faster at a light
level and even at the heavy one gains what the light level's share of the goodput makes of it, not the
(smaller) weighted mean of the levels' log ratios."""

from __future__ import annotations

import math

import pytest

from specpilot.tuning.judge import judge, measured_gain
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.observations import WindowRecord


def _window(seq: int, track: str, load: float, tokens_per_step: float, step_s: float) -> WindowRecord:
    return WindowRecord(seq, track, 3, 100.0, (50.0,), tokens_per_step, step_s, load)


def _pairs(light_ratio: float, heavy_ratio: float, per_level: int = 8) -> tuple[list, list]:
    """Stable and canary windows alternating between 4 and 256 sequences per pod, with a little noise that
    cancels over each level; the canary's goodput is `light_ratio` / `heavy_ratio` times the stable's."""
    stable, canary = [], []
    for i in range(2 * per_level):
        load, ratio = (4.0, light_ratio) if i % 2 == 0 else (256.0, heavy_ratio)
        step = 0.02 if load == 4.0 else 0.05
        wobble = 1.0 + 0.01 * (-1) ** (i // 2)
        stable.append(_window(i, "stable", load, 2.0, step))
        canary.append(_window(i, "canary", load, 2.0 * ratio * wobble, step))
    return stable, canary


@pytest.mark.parametrize("light_ratio", [3.5, 1.5, 0.5])
def test_the_gain_is_the_ratio_of_the_mix_s_goodputs(light_ratio: float) -> None:
    stable, canary = _pairs(light_ratio, 1.0)
    est = measured_gain(list(zip(stable, canary)), stable, [r.load for r in stable], "throughput")
    # Throughput weighs each level by its share of the windows and the stable's tokens per second there.
    g_light, g_heavy = 4.0 * 2.0 / 0.02, 256.0 * 2.0 / 0.05
    truth = (g_light * light_ratio + g_heavy) / (g_light + g_heavy)
    # The sceptical prior pulls a little towards no gain; the levels' noise is small here.
    assert math.expm1(est.mean) == pytest.approx(truth - 1.0, abs=0.01)


def test_a_canary_that_wins_only_where_the_mix_is_unsure_is_not_promoted_until_the_mix_is_known() -> None:
    # 40% worse at 16 sequences per pod, 15% better at 64, measured with little noise: over a mix that is
    # half each it is 4% better. The mix itself is known only through the windows that sampled it: from 20
    # windows the share of the light level could well be 0.35 or 0.65, and with it the gain anything from
    # -1% to +9%, so the judge does not promote; from 400 windows it does.
    stable, canary = [], []
    for i in range(16):
        load, ratio = (16.0, 0.6) if i % 2 == 0 else (64.0, 1.15)
        wobble = 1.0 + 0.005 * (-1) ** (i // 2)
        stable.append(_window(i, "stable", load, 2.0, 0.05))
        canary.append(_window(i, "canary", load, 2.0 * ratio * wobble, 0.05))
    few = [16.0, 64.0] * 10
    unsure = judge(stable, canary, few, "throughput", margin=0.02, confidence=0.95, max_windows=6)
    assert unsure.decision != Ruling.PROMOTE and unsure.gain == pytest.approx(0.04, abs=0.01)
    known = judge(stable, canary, few * 20, "throughput", margin=0.02, confidence=0.95, max_windows=6)
    assert known.decision == Ruling.PROMOTE and known.gain == pytest.approx(0.04, abs=0.01)
