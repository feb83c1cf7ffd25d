"""The numbers `specpilot bench tuned` derives from what it watched: window lateness, windows per object,
growth of sampled RSS / task counts."""

from __future__ import annotations

from specpilot_harness.bench.tuned_bench import Windows, growth_pct, lateness


def test_lateness_is_the_delay_past_the_previous_windows_end_inside_the_measurement() -> None:
    w = Windows()
    w.times = {"a": [0.0, 5.0, 10.5, 15.5, 30.0], "b": [1.0, 6.0]}
    late, counts = lateness(w, start=0.0, end=16.0, window_s=5.0)
    assert sorted(late) == [0.0, 0.0, 0.0, 0.5] and counts == {"a": 4, "b": 2}


def test_a_seq_that_does_not_move_is_one_window() -> None:
    w = Windows()
    status = {"tuning": {"seq": 3}, "conditions": [{"type": "Ready", "status": "True"}]}
    for _ in range(3):
        w.observe({"metadata": {"name": "a"}, "status": status})
    w.observe({"metadata": {"name": "a"}, "status": {**status, "tuning": {"seq": 4}}})
    assert len(w.times["a"]) == 2 and w.ready == {"a"}


def test_growth_compares_the_last_third_with_the_first() -> None:
    samples = [{"tasks": v} for v in (100, 100, 101, 103, 105, 105)]
    assert round(growth_pct(samples, "tasks"), 1) == 5.0
