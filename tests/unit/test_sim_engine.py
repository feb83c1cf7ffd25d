"""The simulated engine core: acceptance draws, continuous batching and token accounting."""

from __future__ import annotations

import random

import pytest

from specpilot_harness.sim.acceptance import accepted_length
from specpilot_harness.sim.engine import Engine
from specpilot_harness.sim.profile import Profile

SURVIVAL = (0.8, 0.5, 0.25)


def make_profile(noise: float = 0.0) -> Profile:
    return Profile(name="p", method="mtp", max_n=3, survival=list(SURVIVAL),
                   step_time_ms={1: [10.0, 12.0, 14.0, 16.0], 8: [17.0, 19.0, 21.0, 23.0]}, noise=noise)


def test_accepted_length_follows_the_survival_curve_exactly() -> None:
    grid = 10_000
    counts = [accepted_length(SURVIVAL, (i + 0.5) / grid) for i in range(grid)]
    for k, s_k in enumerate(SURVIVAL, start=1):
        assert sum(c >= k for c in counts) / grid == pytest.approx(s_k)


def run_to_completion(engine: Engine) -> list:
    steps = []
    while engine.busy:
        steps.append(engine.step())
    return steps


def test_a_request_gets_its_first_token_from_prefill_then_drafts_until_max_tokens() -> None:
    engine = Engine(make_profile(), 3, random.Random(1))
    engine.submit("a", prompt_tokens=12, max_tokens=40)
    steps = run_to_completion(engine)

    prefill = steps[0]
    assert prefill.prompt_tokens == 12 and prefill.generation_tokens == 1 and prefill.drafts == 0
    assert sum(s.generation_tokens for s in steps) == 40
    assert all(1 <= s.generation_tokens <= 4 for s in steps)
    assert sum(s.drafts for s in steps) == len(steps) - 1
    assert steps[-1].finished[0].generation_tokens == 40
    # accepted per position is a prefix count: position k accepted only when k-1 was
    for s in steps:
        assert list(s.accepted_per_pos) == sorted(s.accepted_per_pos, reverse=True)
        assert sum(s.accepted_per_pos) == s.accepted_tokens


def test_latencies_follow_the_profile_step_time_on_the_engine_clock() -> None:
    engine = Engine(make_profile(), 0, random.Random(1))
    engine.submit("a", prompt_tokens=5, max_tokens=11)
    steps = run_to_completion(engine)
    done = steps[-1].finished[0]
    assert done.e2e_latency == pytest.approx(11 * 0.010)
    assert done.time_per_output_token == pytest.approx(0.010)
    assert steps[0].time_to_first_token == pytest.approx((0.010,))


def test_step_time_grows_with_the_batch() -> None:
    engine = Engine(make_profile(), 2, random.Random(1))
    for i in range(8):
        engine.submit(str(i), prompt_tokens=1, max_tokens=5)
    step = engine.step()
    assert step.batch_size == 8
    assert step.duration == pytest.approx(0.021)


def test_max_num_seqs_keeps_the_rest_waiting() -> None:
    engine = Engine(make_profile(), 1, random.Random(1), max_num_seqs=2)
    for i in range(5):
        engine.submit(str(i), prompt_tokens=1, max_tokens=3)
    step = engine.step()
    assert step.batch_size == 2
    assert (engine.running, engine.waiting) == (2, 3)
    run_to_completion(engine)
    assert (engine.running, engine.waiting) == (0, 0)


def test_aborted_requests_leave_the_batch() -> None:
    engine = Engine(make_profile(), 1, random.Random(1))
    engine.submit("a", prompt_tokens=1, max_tokens=100)
    engine.submit("b", prompt_tokens=1, max_tokens=100)
    engine.step()
    engine.abort("a")
    assert engine.step().batch_size == 1


def test_noise_scatters_step_time_around_the_profile() -> None:
    engine = Engine(make_profile(noise=0.1), 0, random.Random(3))
    engine.submit("a", prompt_tokens=1, max_tokens=2000)
    durations = [s.duration for s in run_to_completion(engine)]
    mean = sum(durations) / len(durations)
    assert mean == pytest.approx(0.010, rel=0.02)
    assert max(durations) > 0.011 and min(durations) < 0.009


def test_idle_time_passes_before_the_next_arrival() -> None:
    engine = Engine(make_profile(), 0, random.Random(1))
    engine.catch_up(5.0)
    engine.submit("a", prompt_tokens=1, max_tokens=1)
    assert engine.step().end == pytest.approx(5.010)
