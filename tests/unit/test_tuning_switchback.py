"""Switchback in the tuner: which N the serving pods measure live, what a trial costs the planner, what a
miss rules out, and an arm's counters read as a track's window."""

from __future__ import annotations

import pytest

from specpilot.api.models import Tuning
from specpilot.scrape.switchback import arm_snapshot
from specpilot.tuning import TunerState
from specpilot.tuning.constants import LIVE_ARM_SHARE, RESTART_WINDOWS
from specpilot.tuning.planner import bracketed
from specpilot.tuning.switchback import live_arm, started_n, trial_costs
from specpilot_runtime.live import SwitchbackCounters, exposition
from specpilot_runtime.vllm_metrics import Snapshot, parse

SWITCHBACK = Tuning(enabled=True, candidates=list(range(8)), measure="switchback")


@pytest.mark.parametrize(("method", "live"), [("mtp", True), ("eagle3", True), ("ngram", True),
                                              ("dflash", False), ("dspark", False), ("suffix", False)])
def test_only_drafters_whose_tokens_do_not_depend_on_n_are_measured_live(method: str, live: bool) -> None:
    state = TunerState.new(method, 3)
    assert live_arm(state, SWITCHBACK, 5) is live
    assert not live_arm(state, SWITCHBACK.model_copy(update={"measure": "canary"}), 5)


def test_an_n_above_the_started_one_is_a_canary() -> None:
    state = TunerState.new("mtp", 3)
    assert started_n(state, SWITCHBACK) == 7
    assert live_arm(state, SWITCHBACK, 7) and not live_arm(state, SWITCHBACK, 8)
    assert not live_arm(state, SWITCHBACK, 5, [[1, 8, 5], [9, 64, 9]])


def test_a_live_trial_restarts_nothing_and_takes_half_the_pods() -> None:
    state = TunerState.new("mtp", 3)
    assert trial_costs(state, SWITCHBACK, 0.25) == (LIVE_ARM_SHARE, 0.0)
    assert trial_costs(state, SWITCHBACK.model_copy(update={"measure": "canary"}), 0.25) == (0.25, RESTART_WINDOWS)


def test_a_miss_rules_out_every_n_beyond_it() -> None:
    cands = list(range(9))
    assert bracketed(7, [4], cands) == [0, 1, 2, 3, 4]  # below a stable 7, N=4 measured worse: 3, 2, ... too
    assert bracketed(3, [6], cands) == [6, 7, 8]
    assert bracketed(7, [3, 8], cands) == [0, 1, 2, 3, 8]
    assert bracketed(5, [], cands) == []


def test_a_restored_status_keeps_what_was_measured_worse() -> None:
    state = TunerState.new("mtp", 7)
    state.worse = [3, 4]
    assert TunerState.from_status(state.to_status(), method="mtp", stable_n=7).worse == [3, 4]


def _pods_with(arms: dict[str, tuple[int, int, int]]) -> Snapshot:
    """Counters of pods that ran each arm (key -> (steps, batch, accepted per step)), 10 ms steps."""
    c = SwitchbackCounters()
    for key, (steps, batch, accepted) in arms.items():
        for _ in range(steps + 2):  # the first two after the switch are discounted
            c.record_step(key, batch, 0.010, batch + accepted, 4 * batch, accepted)
    return parse(exposition(c, None, [], 4, []))


def test_an_arm_reads_as_a_track_of_the_same_pods_serving_it_the_whole_window() -> None:
    pooled = _pods_with({"1-65536:4": (1000, 8, 16), "1-65536:2": (1000, 8, 8)})
    pooled = Snapshot(**{**pooled.__dict__, "accepted_per_pos": (900.0, 700.0, 500.0, 300.0),
                         "drafted_per_pos": (1000.0, 1000.0, 1000.0, 1000.0), "drafts": 1000.0})
    four = arm_snapshot(pooled, "1-65536:4", 4, window_s=60.0, pods=2)
    two = arm_snapshot(pooled, "1-65536:2", 2, window_s=60.0, pods=2)
    # Tokens per step and step time are the arm's own: L = 1 + 16/8 = 3 for K=4, 2 for K=2; 10 ms steps.
    assert 1 + four.accepted_tokens / four.drafts == pytest.approx(3.0)
    assert 1 + two.accepted_tokens / two.drafts == pytest.approx(2.0)
    assert four.tpot_sum / four.tpot_count == pytest.approx(0.010 / 3.0)
    # Little's law on the window gives back the batch of 8 sequences per pod.
    rate = four.generation_tokens / 60.0
    assert rate * four.tpot_sum / four.tpot_count / 2 == pytest.approx(8.0)
    assert len(two.accepted_per_pos) == 2 and len(four.accepted_per_pos) == 4
    assert arm_snapshot(pooled, "1-65536:3", 3, 60.0, 2).generation_tokens == 0.0  # an arm that never ran
