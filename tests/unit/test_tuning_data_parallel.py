"""A pod running data-parallel engines serves its sequences over them: the load the tuner weighs (the batch
each engine's step time belongs to) is the pod's divided by the data-parallel size."""

from __future__ import annotations

import pytest

from specpilot.tuning.observations import TrackWindow, record
from specpilot_runtime.engine_config import data_parallel_size
from specpilot_runtime.vllm_metrics import Snapshot

WINDOW_S = 60.0


def _window(engines: int, running: float = 0.0, finished: bool = True) -> TrackWindow:
    # 2 pods at a TPOT of 20 ms emitting 48,000 tokens a minute: 16 sequences at once, 8 per pod.
    delta = Snapshot(drafts=10_000.0, draft_tokens=30_000.0, accepted_tokens=15_000.0,
                     accepted_per_pos=(7_000.0, 5_000.0, 3_000.0), generation_tokens=48_000.0 if finished else 0.0,
                     tpot_sum=0.02 * 100 if finished else 0.0, tpot_count=100.0 if finished else 0.0,
                     running=running)
    return TrackWindow(n=3, delta=delta, ready_pods=2, desired_pods=2, engines=engines)


@pytest.mark.parametrize("engines", [1, 2, 4])
def test_load_per_engine_divides_by_the_data_parallel_size(engines: int) -> None:
    r = record(1, "stable", _window(engines), WINDOW_S)
    assert r.load == pytest.approx(8.0 / engines)
    assert r.step_s == pytest.approx(0.02 * 2.5)  # the step time is each engine's: unchanged


def test_the_running_gauge_fallback_divides_too() -> None:
    assert record(1, "stable", _window(4, running=32.0, finished=False), WINDOW_S).load == pytest.approx(4.0)


def test_the_controller_reads_the_data_parallel_size_from_the_engine_args() -> None:
    assert data_parallel_size(["--data-parallel-size", "4"]) == 4 and data_parallel_size([]) == 1
