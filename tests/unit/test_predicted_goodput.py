"""The tuner dashboard's predicted goodput per N comes from the newest plan in status.tuning.history, which
anyone allowed to write the status may have edited: entries that are not plans as the tuner writes them are
passed over, never raised on (the controller computes this every window)."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.controller.tuning.metrics import predicted_goodput

PLAN = {"action": "start_canary", "numbers": {"stable_n": 3, "gain_pct": {"3": 0.0, "5": 10.0}}}


def test_the_newest_plan_at_the_stable_n_scales_by_the_measured_goodput() -> None:
    older = {"numbers": {"plan": {"stable_n": 3, "gain_pct": {"5": 50.0}}}}
    assert predicted_goodput([older, PLAN], 3, 100.0) == {3: 100.0, 5: pytest.approx(110.0)}
    assert predicted_goodput([PLAN], 5, 100.0) == {}  # a plan made at another stable N says nothing now


@pytest.mark.parametrize("hostile", [
    {"numbers": []},
    {"numbers": {"plan": "big"}},
    {"numbers": {"stable_n": 3, "gain_pct": ["5", 10.0]}},
    {"numbers": {"stable_n": "three", "gain_pct": {"5": 10.0}}},
    {"numbers": {"stable_n": 3, "gain_pct": {"five": 10.0}}},
    {"numbers": {"stable_n": 3, "gain_pct": {"5": "ten"}}},
    {"numbers": {"stable_n": 3, "gain_pct": {"5": float("inf")}}},
    {"numbers": {"stable_n": -1, "gain_pct": {"5": 10.0}}},
    {"numbers": {"gain_pct": {"5": 10.0}}},
])
def test_an_edited_entry_is_passed_over_for_the_tuners_own(hostile: dict[str, Any]) -> None:
    assert predicted_goodput([PLAN, hostile], 3, 100.0) == {3: 100.0, 5: pytest.approx(110.0)}
    assert predicted_goodput([hostile], 3, 100.0) == {}
