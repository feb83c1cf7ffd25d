"""A rollback on a load mix too young to have shown its heavy hours waits, as a promotion does."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot.api.models import Canary, Tuning
from specpilot.tuning import ActionKind, step
from specpilot.tuning.judge import Verdict
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.constants import PROMOTE_MIX_WINDOWS
from specpilot.tuning.rules.analysing import young_mix_wait
from specpilot.tuning.schedule import TrackDrafting
from specpilot_harness.bench import cli, strategies
from specpilot_harness.bench.report import served_goodput
from specpilot_harness.bench.strategies import run_tuner
from specpilot_harness.sim.profile import load_profiles

TUNING = Tuning(enabled=True, canary=Canary(analysis_window="5m"))
MIXED = Path(cli.__file__).parent / "profiles" / "mixed-load.json"
LOSS = Verdict(Ruling.ROLLBACK, -0.29, -0.45, -0.22, 4, "cannot beat stable by 2% (measured -29.0%)")


def drafting(stable_n: int, canary_n: int) -> TrackDrafting:
    return TrackDrafting("dspark", stable_n, None, canary_n, None)


def test_a_shorter_n_measured_worse_at_light_loads_waits_for_heavier_ones() -> None:
    loads = [1.0, 4.0, 4.0, 1.0, 4.0, 4.0]
    reason = young_mix_wait(loads, drafting(7, 2), TUNING, LOSS)
    assert reason is not None
    assert reason.startswith("cannot beat stable by 2%")
    assert "6 of the 16 windows" in reason and "less at loads heavier than seen" in reason


def test_lighter_loads_not_seen_yet_matter_to_latency_not_to_throughput() -> None:
    # A longer N gains at lighter loads. Throughput weighs a window by the tokens it served, most at the
    # heavy loads seen; latency weighs each sequence's speed, highest at light loads.
    loads = [64.0, 256.0, 64.0, 256.0]
    assert young_mix_wait(loads, drafting(3, 7), TUNING, LOSS) is None
    latency = TUNING.model_copy(update={"objective": "latency"})
    reason = young_mix_wait(loads, drafting(3, 7), latency, LOSS)
    assert reason is not None and "more at loads lighter than seen" in reason
    assert young_mix_wait(loads, drafting(7, 2), latency, LOSS) is None


def test_nothing_unseen_can_help_the_canary_so_it_is_rolled_back() -> None:
    # A longer N under throughput, and under latency with nothing lighter than one sequence per pod.
    assert young_mix_wait([1.0, 4.0, 1.0, 4.0], drafting(3, 7), TUNING, LOSS) is None
    latency = TUNING.model_copy(update={"objective": "latency"})
    assert young_mix_wait([1.0, 4.0, 1.0, 4.0], drafting(3, 7), latency, LOSS) is None


def test_a_steady_load_or_a_mix_seen_long_enough_does_not_wait() -> None:
    assert young_mix_wait([8.0] * 6, drafting(7, 2), TUNING, LOSS) is None
    mature = [1.0, 4.0] * (PROMOTE_MIX_WINDOWS // 2)
    assert young_mix_wait(mature, drafting(7, 2), TUNING, LOSS) is None


def test_a_canary_out_of_windows_does_not_wait() -> None:
    spent = Verdict(Ruling.ROLLBACK, -0.29, -0.45, -0.22, 3 * TUNING.canary.windows, "cannot beat stable")
    assert young_mix_wait([1.0, 4.0, 4.0], drafting(7, 2), TUNING, spent) is None


def test_a_parallel_drafter_short_n_judged_on_light_windows_first_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    # mix-moe-dspark-2003 seed 1 (the mixed-load bench): the first windows ran at 1 and 4 sequences per pod,
    # where N=2 measured 29% worse than N=7; at 64 and 256 (30% of the windows, most of the goodput) shorter
    # N win. Rolled back after 4 windows, the round ended 10.4% below the best single N. Waiting for the
    # mix, the round ends serving better than it started.
    profile = load_profiles(MIXED.read_text())["mix-moe-dspark-2003"]
    actions = []

    def spy(*args):
        state, action = step(*args)
        actions.append(action)
        return state, action
    monkeypatch.setattr(strategies, "step", spy)
    run_ = run_tuner(profile, seed=1, mode="schedule")
    assert run_.tried[0] < profile.default_n  # the replay's case: a shorter N canaried first
    # The rule fired: measured worse on the light loads first, it waited for the heavier ones.
    assert any(a.kind == ActionKind.KEEP_ANALYSING and a.n == run_.tried[0] and "waiting: load mix seen in" in a.reason
               for a in actions), [a.reason for a in actions]
    # What the user sees: the round ends no more than 0.5% below the best single N (the schedule
    # target; rolled back early it ended 10.4% below), and no promotion lost more than 0.5%.
    best_single = max(profile.goodput(n) for n in range(profile.max_n + 1))
    assert served_goodput(profile, run_.chosen_n, run_.schedule) >= 0.995 * best_single, run_
    assert all(served_goodput(profile, *new) >= 0.995 * served_goodput(profile, *old)
               for old, new in run_.promotion_configs()), run_
