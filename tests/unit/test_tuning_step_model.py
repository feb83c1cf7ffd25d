"""Step-time priors from the H200 data and the online kappa fit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specpilot.tuning import costs
from specpilot.tuning.step_model import StepModel
from specpilot_runtime.speculative import Family


def test_prior_matches_measured_points() -> None:
    assert costs.target_ms(0, 1) == pytest.approx(5.4882)
    assert costs.target_ms(15, 256) == pytest.approx(118.4694)
    assert costs.step_ms(Family.SEQUENTIAL, 3, 16) == pytest.approx(6.3208 + 3 * 0.4392)
    assert costs.step_ms(Family.PARALLEL, 3, 16) == pytest.approx(6.3208 + 1.2344)
    assert costs.step_ms(Family.NEAR_FREE, 3, 16) == pytest.approx(6.3208)


def test_prior_interpolates_between_measured_points() -> None:
    # q = 7 (N = 6) lies between q = 6 and q = 8; B = 8 between 4 and 16 (log scale).
    assert 6.6244 < costs.target_ms(6, 16) < 6.8184
    assert costs.target_ms(3, 4) < costs.target_ms(3, 8) < costs.target_ms(3, 16)


def test_overhead_grows_with_n_and_load() -> None:
    for family in (Family.SEQUENTIAL, Family.PARALLEL, Family.NEAR_FREE):
        xs = [costs.relative_overhead(family, n, 64) for n in range(8)]
        assert xs[0] == 0.0 and all(b > a for a, b in zip(xs, xs[1:]))
        assert costs.relative_overhead(family, 4, 256) > costs.relative_overhead(family, 4, 4)
    # A sequential drafter pays per token; a parallel one pays once per block.
    assert costs.drafter_ms(Family.SEQUENTIAL, 7, 4) > 2 * costs.drafter_ms(Family.PARALLEL, 7, 4)


def test_prior_kappa_is_centred_on_the_measurement() -> None:
    m = StepModel(Family.SEQUENTIAL)
    assert float(np.median(m.kappa_samples(1001))) == pytest.approx(1.0, rel=0.05)
    assert 0.9 < m.kappa_mean() < 1.4  # log-normal: the mean sits above the median
    assert m.kappa_sd() > 0.6


def test_paired_windows_teach_kappa() -> None:
    rng = np.random.default_rng(0)
    base = StepModel(Family.SEQUENTIAL)
    pairs = []
    for _ in range(40):
        load = float(rng.choice([4, 16, 64]))
        n_c, n_s = int(rng.integers(1, 8)), 3
        true = lambda n: 1 + 2.0 * base.overhead(n, load)  # noqa: E731 - kappa = 2
        noise = 0.03 * rng.standard_normal()
        pairs.append(base.pair(n_c, n_s, load, true(n_c) * math.exp(noise), true(n_s)))
    m = StepModel(Family.SEQUENTIAL, pairs)
    assert m.kappa_mean() == pytest.approx(2.0, rel=0.1)
    assert m.kappa_sd() < 0.3 * base.kappa_sd()


def test_kappa_samples_follow_the_posterior() -> None:
    m = StepModel(Family.PARALLEL)
    s = m.kappa_samples(512)
    assert float(np.mean(s)) == pytest.approx(m.kappa_mean(), rel=0.05)
    assert np.array_equal(s, m.kappa_samples(512))  # deterministic
