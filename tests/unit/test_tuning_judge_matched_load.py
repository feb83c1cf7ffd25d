"""The judge compares the canary with the stable at the same load: a track holding more sequences per pod
(a slower one does, by Little's law, when clients pick pods at random) is not judged slower for it, nor a
lighter one faster."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specpilot.tuning.judge import judge, load_slope, measured_gain, paired
from specpilot.tuning.observations import WindowRecord

LENGTH = 2.0  # tokens per step, both tracks
EXPONENT = 0.5  # TPOT grows as load ** 0.5 on this machine


def _window(seq: int, track: str, load: float, speedup: float = 1.0, n: int = 3) -> WindowRecord:
    tpot = 0.01 * load ** EXPONENT / speedup
    return WindowRecord(seq=seq, track=track, n=n, drafts=1000.0, accepted_per_pos=(600.0, 400.0),
                        tokens_per_step=LENGTH, step_s=tpot * LENGTH, load=load)


def _round(canary_load_factor: float, speedup: float) -> tuple[list[WindowRecord], list[WindowRecord]]:
    """Stable windows at loads 8..32 (the slope shows), the canary in the same windows at a multiple of the
    stable's load, `speedup` times faster per token at equal load."""
    loads = [8.0, 11.0, 16.0, 22.0, 32.0, 16.0, 8.0, 22.0, 11.0, 32.0]
    stable = [_window(i, "stable", b) for i, b in enumerate(loads)]
    canary = [_window(i, "canary", b * canary_load_factor, speedup, n=5) for i, b in enumerate(loads)]
    return stable, canary


def test_the_stable_windows_show_how_time_per_token_grows_with_load() -> None:
    stable, _ = _round(1.0, 1.0)
    assert load_slope(stable) == pytest.approx(EXPONENT, abs=1e-6)
    flat = [_window(i, "stable", 16.0) for i in range(8)]
    assert load_slope(flat) == 0.0  # one load: no slope to learn, no adjustment


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_a_canary_as_fast_as_stable_is_measured_even_at_another_load(factor: float) -> None:
    stable, canary = _round(factor, 1.0)
    raw = math.exp(-EXPONENT * math.log(factor)) - 1  # what comparing the windows as they are would say
    assert abs(raw) > 0.2
    est = measured_gain(paired(stable, canary), stable, [r.load for r in stable], "throughput")
    assert est.mean == pytest.approx(0.0, abs=0.01)


def test_a_canary_holding_fewer_sequences_is_not_credited_for_the_lighter_load() -> None:
    # Holding half the sequences, a canary no faster per token looks 41% faster window by window; one 3%
    # faster looks 46% faster. Judged at the stable's load, neither is promoted for what the load gave it.
    loads = [r.load for r in _round(1.0, 1.0)[0]]
    same = judge(*_round(0.5, 1.0), loads, "throughput", 0.02, 0.95, 6)
    assert same.gain == pytest.approx(0.0, abs=0.01) and same.decision != "promote"
    faster = judge(*_round(0.5, 1.03), loads, "throughput", 0.02, 0.95, 6)
    assert faster.gain == pytest.approx(0.03, abs=0.01) and np.isfinite(faster.lower)
