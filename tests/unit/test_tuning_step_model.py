"""Step-time priors from the measured machines and the online fit of shape, scale and correction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specpilot.tuning import costs
from specpilot.tuning.step_model import StepModel
from specpilot_runtime.speculative import Family


def test_prior_matches_measured_points() -> None:
    assert costs.target_ms(0, 1) == pytest.approx(5.4882)
    assert costs.target_ms(15, 256) == pytest.approx(118.4694, rel=1e-5)
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


def truth_pairs(shape: str, family: Family, n_stable: int, canaries: list[int], loads: list[float],
                slow: float = 1.0, seed: int = 0) -> list:
    """Paired windows of a deployment whose step times are one measured machine's (canary `slow`er)."""
    rng = np.random.default_rng(seed)
    m = StepModel(family)
    return [m.pair(c, n_stable, b, costs.step_ms(family, c, b, shape) * slow * math.exp(0.02 * rng.standard_normal()),
                   costs.step_ms(family, n_stable, b, shape))
            for c in canaries for b in loads for _ in range(4)]


def mean_cost(m: StepModel, ns: list[int], load: float) -> np.ndarray:
    return m.log_cost_samples(ns, [load], 512).mean(axis=0)[0]


def test_prior_spans_the_measured_machines() -> None:
    # Before any canary a MoE target's steep low-load cost is as plausible as the dense one's flat cost.
    f = StepModel(Family.SEQUENTIAL).log_cost_samples([7], [4.0], 2048)[:, 0, 0]
    for shape in ("h200-dense8b", "h200-moe512"):
        truth = math.log(costs.step_ms(Family.SEQUENTIAL, 7, 4.0, shape) / costs.step_ms(Family.SEQUENTIAL, 0, 4.0, shape))
        assert 0.05 < float((f < truth).mean()) < 0.95


def test_paired_windows_pick_the_machine_and_its_costs() -> None:
    pairs = truth_pairs("h200-moe512", Family.SEQUENTIAL, 3, [1, 7], [4.0, 64.0])
    m = StepModel(Family.SEQUENTIAL, pairs)
    assert m.summary()["shape"] == "h200-moe512"
    for load in (4.0, 64.0):
        est = mean_cost(m, [1, 3, 5, 7], load)
        truth = [math.log(costs.step_ms(Family.SEQUENTIAL, n, load, "h200-moe512")
                          / costs.step_ms(Family.SEQUENTIAL, 3, load, "h200-moe512")) for n in (1, 3, 5, 7)]
        assert np.allclose(est - est[1], truth, atol=0.05)


def test_one_slow_canary_at_8_raises_the_estimates_for_the_n_below_it() -> None:
    # The deployment runs at 3; a canary at 8 is 30% slower than any machine's shape says. The correction
    # carries that to 4..7 (between them) rather than to 8 alone.
    before = StepModel(Family.SEQUENTIAL, truth_pairs("h200-dense8b", Family.SEQUENTIAL, 3, [8], [16.0]))
    after = StepModel(Family.SEQUENTIAL, truth_pairs("h200-dense8b", Family.SEQUENTIAL, 3, [8], [16.0], slow=1.3))
    rise = mean_cost(after, [3, 5, 6, 7, 8], 16.0) - mean_cost(before, [3, 5, 6, 7, 8], 16.0)
    rel = rise[1:] - rise[0]
    assert rel[-1] == pytest.approx(math.log(1.3), abs=0.05)
    assert 0.05 < rel[0] < rel[1] < rel[2] < rel[3]


def test_costs_are_monotone_in_n_and_samples_deterministic() -> None:
    m = StepModel(Family.PARALLEL, truth_pairs("cpu16-dense1b", Family.PARALLEL, 7, [3, 11], [4.0]))
    f = m.log_cost_samples(list(range(16)), [4.0, 16.0], 256)
    assert np.all(np.diff(f, axis=2) >= 0) and np.all(np.isfinite(f))
    assert np.array_equal(f, m.log_cost_samples(list(range(16)), [4.0, 16.0], 256))
