"""The planner keeps a credible interval of each candidate's gain; the operator exports it as the bounds of
its predicted goodput, which the "slower than no speculation" alert compares with what the stable serves."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from specpilot.controller import metric_names as m
from specpilot.controller.tuning.metrics import TunerMetrics, predicted_bounds, predicted_goodput
from specpilot.tuning import Action, ActionKind
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.planner import plan
from specpilot.tuning.step_model import StepModel
from specpilot_runtime.speculative import Family

LOAD = 16.0


def _window(seq: int) -> WindowRecord:
    return WindowRecord(seq=seq, track="stable", n=3, drafts=1000.0, accepted_per_pos=(700.0, 450.0, 250.0),
                        tokens_per_step=2.4, step_s=0.02, load=LOAD)


def test_every_candidate_and_no_speculation_get_an_interval_around_their_expected_gain() -> None:
    p = plan("mtp", [_window(i) for i in range(4)], StepModel(Family.SEQUENTIAL), [3, 5, 7], 3, [LOAD] * 4,
             "throughput", 0.02, 0.25)
    assert set(p.bounds) == {0, 3, 5, 7}  # N=0 too, though not a candidate
    assert p.bounds[3] == (0.0, 0.0)  # the stable against itself, paired sample by sample
    for n in (0, 5, 7):
        lo, hi = p.bounds[n]
        assert lo < p.gain[n] < hi
    numbers = p.to_json()
    assert set(numbers["lower_pct"]) == set(numbers["upper_pct"]) == {"0", "3", "5", "7"}
    history: list[dict[str, Any]] = [{"action": "start_canary", "numbers": numbers}]
    bounds = predicted_bounds(history, 3, 100.0)
    assert bounds[0] == pytest.approx((100.0 * (1 + p.bounds[0][0]), 100.0 * (1 + p.bounds[0][1])), rel=1e-4)
    assert bounds[0][0] < predicted_goodput(history, 3, 100.0)[0] < bounds[0][1]


PLAN = {"stable_n": 3, "gain_pct": {"0": -20.0, "3": 0.0}}


@pytest.mark.parametrize("interval, expected", [
    ({"lower_pct": {"0": -30.0, "3": 0.0}, "upper_pct": {"0": -10.0, "3": 0.0}},
     {0: (70.0, 90.0), 3: (100.0, 100.0)}),
    ({}, {}),  # a plan written before plans kept an interval
    ({"lower_pct": {"0": "low"}, "upper_pct": {"0": -10.0}}, {}),
    ({"lower_pct": [-30.0], "upper_pct": {"0": -10.0}}, {}),
    # N=9 has no gain in the plan, so no bounds either.
    ({"lower_pct": {"0": -30.0, "9": -5.0}, "upper_pct": {"0": -10.0, "9": 5.0}}, {0: (70.0, 90.0)}),
])
def test_an_interval_is_read_only_as_the_tuner_writes_it(interval: dict[str, Any],
                                                         expected: dict[int, tuple[float, float]]) -> None:
    history = [{"numbers": {**PLAN, **interval}}]
    bounds = predicted_bounds(history, 3, 100.0)
    assert {n: (round(lo, 6), round(hi, 6)) for n, (lo, hi) in bounds.items()} == expected
    assert predicted_goodput(history, 3, 100.0) == {0: 80.0, 3: 100.0}  # the prediction stands either way
    assert predicted_bounds(history, 5, 100.0) == {} and predicted_bounds(history, 3, None) == {}


def _bound_series(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines()
            if line.startswith(m.TUNER_PREDICTED_GOODPUT_BOUND + "{")]


def test_the_bounds_are_exported_with_their_prediction_and_go_with_it() -> None:
    registry = CollectorRegistry()
    tuner = TunerMetrics(registry)
    hold = Action(ActionKind.HOLD)
    tuner.record("ns", "sd", hold, 1.0, {"stable": 100.0}, {0: 80.0, 3: 100.0},
                 {0: (70.0, 90.0), 3: (100.0, 100.0)})
    assert len(_bound_series(registry)) == 4
    assert any(f'{m.LABEL_BOUND}="{m.BOUND_LOWER}"' in s and f'{m.LABEL_NUM_SPECULATIVE_TOKENS}="0"' in s
               and s.endswith(" 70.0") for s in _bound_series(registry))
    # A newer plan without an interval leaves no bounds of the older one beside its prediction.
    tuner.record("ns", "sd", hold, 2.0, {"stable": 100.0}, {0: 85.0, 3: 100.0}, {})
    assert _bound_series(registry) == []
    tuner.record("ns", "sd", hold, 3.0, {"stable": 100.0}, {0: 80.0}, {0: (70.0, 90.0)})
    tuner.forget("ns", "sd")
    assert _bound_series(registry) == []
