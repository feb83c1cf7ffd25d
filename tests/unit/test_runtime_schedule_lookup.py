"""`schedule_k`: the K vLLM 0.33 drafts at a running batch size under num_speculative_tokens_per_batch_size
(its dense lookup in v1/spec_decode/dynamic/utils.py), which the simulated engine and the tuner share."""

from __future__ import annotations

import pytest

from specpilot_runtime.speculative import schedule_k

SCHEDULE = [(1, 16, 3), (32, 128, 2)]


@pytest.mark.parametrize("batch, k", [(1, 3), (16, 3), (17, 3), (31, 3), (32, 2), (128, 2), (500, 2)])
def test_ranges_gaps_and_tail_carry_the_previous_k(batch: int, k: int) -> None:
    # vLLM's own example: 17-31 fall in a gap and keep K=3; past 128 the last K holds.
    assert schedule_k(SCHEDULE, 5, batch) == k


def test_k_is_clamped_to_the_started_n() -> None:
    assert schedule_k([(1, 8, 7), (9, 64, 4)], 5, 4) == 5
    assert schedule_k([(1, 8, 7), (9, 64, 4)], 5, 20) == 4


def test_zero_turns_drafting_off_in_its_range() -> None:
    assert schedule_k([(1, 32, 4), (33, 256, 0)], 4, 64) == 0
    assert schedule_k([(1, 32, 4), (33, 256, 0)], 4, 2) == 4


def test_no_schedule_drafts_n() -> None:
    assert schedule_k(None, 6, 100) == 6
    assert schedule_k([], 6, 1) == 6
    assert schedule_k([(1, 4, 2)], 0, 1) == 0
