"""A block drafter (DFlash, DSpark) on a compute-bound machine: its one pass over the block costs a large
share of a step at every N >= 1, so the cost jumps from N = 0 to 1 and then grows by the tokens verified.
Canaries at N >= 1 measure the slope and say nothing of the jump; no measured machine shape has it. The
step-time model must keep the jump open, or it puts no speculation confidently behind N = 1 where it is
ahead, and no canary at N = 0 is ever worth its cost (a generated profile ended 12.7% short, every seed)."""

from __future__ import annotations

import math

from specpilot.tuning.step_model import StepModel
from specpilot_runtime.speculative import Family

LOAD = 8.0


def step_ms(n: int, load: float = LOAD) -> float:
    """Weights read once per step, the target's compute per token verified, and the block pass for N >= 1."""
    return 10.0 + 0.5 * load * (n + 1) + (1.6 * load * n + 0.35 * load if n else 0.0)


def measured(family: Family, canaries: tuple[int, ...] = (2, 1), stable: int = 7) -> StepModel:
    model = StepModel(family)
    pairs = [model.pair(c, stable, LOAD, step_ms(c) * (1.0 + 0.02 * (-1) ** i), step_ms(stable))
             for c in canaries for i in range(6)]
    return StepModel(family, pairs)


def no_speculation_cost(model: StepModel) -> tuple[float, float]:
    """Mean and sd over the posterior of log t(1) / t(0) at the load measured."""
    f = model.log_cost_samples([0, 1], [LOAD], 2048)[:, 0, :]
    d = f[:, 1] - f[:, 0]
    return float(d.mean()), float(d.std())


def test_a_block_drafter_s_jump_from_no_speculation_stays_open() -> None:
    truth = math.log(step_ms(1) / step_ms(0))
    mean, sd = no_speculation_cost(measured(Family.PARALLEL))
    # Canaries at 1 and 2 alone cannot tell a jump from a steeper slope: the truth lies within the
    # posterior's reach, not two standard deviations above its mean.
    assert mean + 2.0 * sd > truth, (mean, sd, truth)


def test_a_chain_drafter_pays_per_token_with_no_jump() -> None:
    # A chain drafter's cost grows with its steps from N = 0 on: the jump is a block drafter's alone, and
    # a chain drafter's estimate for N = 0 stays as sharp as its shapes make it.
    _, parallel_sd = no_speculation_cost(measured(Family.PARALLEL))
    _, chain_sd = no_speculation_cost(measured(Family.SEQUENTIAL))
    assert chain_sd < parallel_sd
