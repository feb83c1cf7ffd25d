"""The judge's floor: the tuner's own state machine and judge, with a planner that knows the answer.

`specpilot bench tuner --floor` adds this strategy beside the baselines. Its planner is told the profile's
truth: in single mode the best N (canaried first, and again after each rollback); in schedule mode the
per-load oracle's schedule (canaried first, once a round, as the tuner's schedule canaries are), then the
best single N. Everything else is the product's: the round budget, the paired judge and its margin and
confidence, retries, probes. What the floor still misses is what proving the answer costs at the profile's
noise in the windows given; the gap between the tuner and the floor is the planner's.

The planner is swapped by patching the state machine's two planning calls for the duration of one run:
the product has no seam for a planner that cheats, and should not.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence
from unittest import mock

import numpy as np

from specpilot.api.models import Tuning, TuningMode
from specpilot.tuning import machine
from specpilot.tuning.observations import Observations
from specpilot.tuning.planner import Plan
from specpilot.tuning.schedule import MAX_BATCH_SIZE, ScheduleProposal, level_entries
from specpilot.tuning.state import TunerState
from specpilot.tuning.step_model import StepModel
from specpilot_harness.sim.profile import Profile

from .report import per_load_oracle_started, served_goodput
from .simulate import Fleet
from .strategies import MAX_WINDOWS, Run, run_tuner


def oracle_schedule(profile: Profile) -> tuple[int, list[list[int]]]:
    """The per-load oracle as vLLM would serve it: its started N and [lo, hi, K] rows split between the
    profile's load levels as the tuner's own proposals are."""
    ks, _, started = per_load_oracle_started(profile)
    levels = sorted(ks)
    return started, [list(e) for e in level_entries(np.array(levels, dtype=float), [ks[b] for b in levels])]


def _gain(profile: Profile, n: int, rows: list[list[int]] | None, stable_n: int,
          stable_rows: Sequence[Sequence[int]] | None) -> float:
    stable = served_goodput(profile, stable_n, [list(r) for r in stable_rows] if stable_rows else None)
    return served_goodput(profile, n, rows) / stable - 1.0


@contextmanager
def knowing(profile: Profile, mode: TuningMode) -> Iterator[None]:
    """The state machine plans with the profile's truth while the block runs."""
    best = profile.oracle_n()
    started, rows = oracle_schedule(profile)
    wants_schedule = mode == "schedule" and len(rows) >= 2 and started >= 1

    def plan(state: TunerState, tuning: Tuning, obs: Observations, model: StepModel, loads: list[float]) -> Plan:
        gain = {n: _gain(profile, n, None, state.stable_n, state.stable_schedule)
                for n in range(profile.max_n + 1)}
        # The schedule goes first (machine._schedule_canary, when no single N is chosen), once a round.
        first = wants_schedule and not state.schedule_tried
        # No value or cost to weigh: the truth says what to canary (the history records its true gain).
        return Plan(state.stable_n, gain, {best: gain[best]}, {best: 0.0}, best,
                    None if first or gain[best] <= 0.0 else best)

    def propose(method: str, records: Any, model: StepModel, candidates: Sequence[int], loads: Sequence[float],
                objective: str, stable_n: int | None = None,
                stable_schedule: Sequence[Sequence[int]] | None = None) -> ScheduleProposal:
        # Without a schedule worth serving, the best single N throughout (one range: not canaried as one).
        n, served = (started, rows) if wants_schedule else (best, None)
        entries = tuple((lo, hi, k) for lo, hi, k in rows) if served else ((1, MAX_BATCH_SIZE, best),)
        stable_gain = None if stable_n is None else _gain(profile, n, served, stable_n, stable_schedule)
        gain = served_goodput(profile, n, served) / served_goodput(profile, best) - 1.0
        return ScheduleProposal(n, entries, best, gain, stable_gain)

    with mock.patch.object(machine, "_plan", plan), mock.patch.object(machine, "propose", propose):
        yield


def run_floor(profile: Profile, seed: int, windows: int = MAX_WINDOWS, mode: TuningMode = "single",
              fleet: Fleet = Fleet()) -> Run:
    """One run of the tuner's machine and judge, planned by the truth (same deployment and seed)."""
    with knowing(profile, mode):
        return run_tuner(profile, seed, windows, mode, fleet)
