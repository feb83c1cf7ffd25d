"""A compute-bound engine serving two loads (a CPU, or a GPU far past its roofline): its step at 8 sequences
costs twice its step at 1, where the H200 prior's costs the same, and a step's overhead for N tokens more
grows with the load. The tuner must learn both from the deployment, or it weighs the busy load's gains
about twice too high and mistakes the shape of cost between the N it measured."""

from __future__ import annotations

import math

from specpilot.tuning.step_model import StepModel, Timing
from specpilot_runtime.speculative import Family

LOADS = (1.0, 8.0)
FLOOR_MS = 10.0  # weights read once per step, whatever the batch
TOKEN_MS = 1.3  # compute per token verified or drafted


def step_ms(n: int, load: float) -> float:
    return FLOOR_MS + TOKEN_MS * load * (n + 1)


def measured(n_stable: int = 3, canaries: tuple[int, ...] = (0, 7)) -> StepModel:
    """Paired step times of canaries at `canaries` against the stable, and both tracks' timings, at each load."""
    model = StepModel(Family.SEQUENTIAL)
    pairs, timings = [], []
    for c in canaries:
        for b in LOADS:
            for i in range(4):
                wobble = 1.0 + 0.02 * (-1) ** i
                pairs.append(model.pair(c, n_stable, b, step_ms(c, b) * wobble, step_ms(n_stable, b)))
                timings += [Timing(c, b, step_ms(c, b) * wobble), Timing(n_stable, b, step_ms(n_stable, b))]
    return StepModel(Family.SEQUENTIAL, pairs, timings)


def test_the_level_across_loads_is_the_deployment_s_own() -> None:
    model = measured()
    truth = step_ms(0, 8.0) / step_ms(0, 1.0)
    assert truth > 1.7
    assert StepModel(Family.SEQUENTIAL).base_ms(8.0) / StepModel(Family.SEQUENTIAL).base_ms(1.0) < 1.1
    assert abs(math.log(model.base_ms(8.0) / model.base_ms(1.0) / truth)) < 0.05


def test_the_cost_of_an_unmeasured_n_follows_a_roofline_whose_floor_fades_with_load() -> None:
    # Measured: 0 and 7 against 3. N=1 and 2 were never run; at 8 sequences per pod a step's cost is
    # mostly compute (N=1 costs 0.60 of N=3), at 1 the floor holds it up (0.83).
    model = measured()
    f = model.log_cost_samples([1, 2, 3], list(LOADS), 1024).mean(axis=0)
    for li, b in enumerate(LOADS):
        for j, n in enumerate((1, 2)):
            truth = math.log(step_ms(n, b) / step_ms(3, b))
            assert abs((f[li, j] - f[li, 2]) - truth) < 0.05, (b, n, f[li, j] - f[li, 2], truth)


def test_a_forged_step_time_cannot_make_goodput_infinite() -> None:
    model = StepModel(Family.SEQUENTIAL, timings=[Timing(3, 1.0, 1e-300), Timing(3, 8.0, 1e300)])
    ratio = model.base_ms(8.0) / model.base_ms(1.0)
    assert math.isfinite(ratio) and 1.0 < ratio <= 1.1e6  # the level departs from the prior by 1000x at most
