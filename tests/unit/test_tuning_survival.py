"""Survival curves from window counters: ratios, batch-means errors, bounds, transfer between N."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.survival import SINGLE_WINDOW_DESIGN_EFFECT, estimate
from specpilot.tuning.transfer import Draws, known, revealed_by, sample_lengths


def rec(seq: int, n: int, drafts: float, acc: list[float], track: str = "stable") -> WindowRecord:
    return WindowRecord(seq=seq, track=track, n=n, drafts=drafts, accepted_per_pos=tuple(acc),
                        tokens_per_step=1 + sum(acc) / drafts, step_s=0.01, load=4.0)


def test_pooled_ratio_and_expected_length() -> None:
    s = estimate([rec(1, 3, 1000, [800, 600, 400]), rec(2, 3, 3000, [2400, 1800, 1200])])
    assert s.s == pytest.approx((0.8, 0.6, 0.4))
    assert s.expected_length(2) == pytest.approx(2.4)
    assert s.expected_length(3) == pytest.approx(2.8)


def test_batch_means_error_reflects_spread_between_windows() -> None:
    steady = estimate([rec(i, 1, 10_000, [8000]) for i in range(6)])
    swinging = estimate([rec(i, 1, 10_000, [7000 if i % 2 else 9000]) for i in range(6)])
    assert steady.s == swinging.s == pytest.approx((0.8,))
    assert swinging.se[0] > 10 * steady.se[0]
    # The batch-means error of six windows alternating 0.7 / 0.9 is about 0.1 / sqrt(6 - 1).
    assert swinging.se[0] == pytest.approx(0.1 * math.sqrt(6 / 5) / math.sqrt(6), rel=0.01)


def test_single_window_error_uses_design_effect_not_binomial() -> None:
    one = estimate([rec(1, 1, 10_000, [8000])])
    binomial = math.sqrt(0.8 * 0.2 / 10_000)
    assert one.se[0] == pytest.approx(binomial * math.sqrt(SINGLE_WINDOW_DESIGN_EFFECT))


def test_prefix_positions_pool_windows_of_any_larger_n() -> None:
    s = estimate([rec(1, 2, 1000, [800, 500]), rec(2, 4, 1000, [800, 500, 300, 200])])
    assert s.depth == 4
    assert s.windows == (2, 2, 1, 1)
    assert s.s[0] == pytest.approx(0.8)


def test_survival_never_rises_with_depth() -> None:
    # Different window sets per position can make a deeper raw ratio larger; the estimate clips it.
    s = estimate([rec(1, 1, 1000, [500]), rec(2, 2, 1000, [900, 800])])
    assert all(b <= a for a, b in zip(s.s, s.s[1:]))


def test_optimistic_bound_above_depth() -> None:
    s = estimate([rec(i, 3, 100_000, [80_000, 60_000, 40_000]) for i in range(4)])
    assert s.optimistic_length(5, z=0.0) == pytest.approx(2.8 + 2 * 0.4)
    assert s.optimistic_length(2, z=0.0) == pytest.approx(2.4)
    with pytest.raises(ValueError):
        s.expected_length(5)


def test_prefix_drafter_counters_at_n_give_every_smaller_n_exactly() -> None:
    records = [rec(i, 7, 100_000, [80_000, 64_000, 51_000, 41_000, 33_000, 26_000, 21_000]) for i in range(4)]
    lengths = sample_lengths("mtp", records, [0, 3, 7, 9], Draws.make(64))
    assert lengths[:, 0] == pytest.approx(1.0)
    assert np.std(lengths[:, 1]) < 0.01
    assert lengths[:, 1].mean() == pytest.approx(1 + 0.8 + 0.64 + 0.51, abs=0.01)
    # Above the observed depth the belief spreads but never exceeds the S_K bound.
    assert np.std(lengths[:, 3]) > np.std(lengths[:, 2])
    assert lengths[:, 3].max() <= lengths[:, 2].max() + 2 * 0.21 + 1e-9
    assert known("mtp", records) == set(range(8))
    assert revealed_by("mtp", 9, [0, 3, 7, 8, 9], records) == [8, 9]


def test_parallel_drafter_knowledge_does_not_transfer_exactly() -> None:
    records = [rec(i, 7, 100_000, [80_000, 64_000, 51_000, 41_000, 33_000, 26_000, 21_000]) for i in range(4)]
    lengths = sample_lengths("dflash", records, [3, 7], Draws.make(64))
    assert np.std(lengths[:, 1]) < 0.01
    assert np.std(lengths[:, 0]) > np.std(lengths[:, 1])  # N=3 is borrowed from N=7, with doubt
    assert known("dflash", records) == {0, 7}
    assert revealed_by("dflash", 3, [0, 3, 7], records) == [3]
