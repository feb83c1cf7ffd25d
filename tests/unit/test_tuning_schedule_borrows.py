"""A schedule canary starts with the windows an earlier canary measured at the loads where that N drafts
what the schedule drafts: there the two canaries are one configuration (`rules.analysing.borrowed`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from specpilot.tuning import ActionKind, Phase, TunerState, step
from specpilot.tuning.rules.analysing import borrowed as _borrowed
from specpilot.tuning.observations import WindowRecord
from specpilot_harness.bench import cli, strategies
from specpilot_harness.bench.report import served_goodput
from specpilot_harness.bench.simulate import Fleet
from specpilot_harness.sim.profile import load_profiles

PROFILES = Path(cli.__file__).parent / "profiles"
# The replays below were found with a surge canary (the one beside three stable pods).
SURGE = Fleet(3, "surge")
SCHEDULE = [[1, 32, 7], [33, 4096, 3]]


def _pair(seq: int, stable_n: int, canary_n: int, load: float, scheduled: bool = False) -> list[WindowRecord]:
    return [WindowRecord(seq, "stable", stable_n, 100.0, (50.0,), 1.5, 0.02, load),
            WindowRecord(seq, "canary", canary_n, 100.0, (60.0,), 1.8, 0.021, load, scheduled=scheduled)]


def _state(records: list[WindowRecord], method: str = "eagle3") -> TunerState:
    state = TunerState.new(method, 3)
    state.phase, state.canary_n, state.canary_schedule, state.analysis_from_seq = Phase.ANALYSING, 7, SCHEDULE, 10
    state.records = records
    return state


def test_only_an_earlier_n_s_windows_where_it_drafts_as_the_schedule_against_the_same_stable_are_pooled() -> None:
    records = (_pair(0, 3, 7, 4.0)  # N=7 at 4 sequences per pod: the schedule drafts 7 there
               + _pair(1, 3, 7, 64.0)  # at 64 the schedule drafts 3, N=7 drafts 7
               + _pair(2, 3, 5, 4.0)  # another N
               + _pair(3, 4, 7, 4.0)  # against another stable N
               + _pair(4, 3, 7, 4.0, scheduled=True)  # a canary serving a schedule
               + _pair(10, 3, 7, 4.0, scheduled=True))  # the running canary's own window
    assert [r.seq for r in _borrowed(_state(records), 10, set())] == [0]
    assert _borrowed(_state(records), 10, {0}) == []  # already pooled as a retry's evidence
    # A block drafter's first K positions depend on the block it was started with, so only a canary started
    # at the schedule's own N (7 here) lends its windows.
    assert [r.seq for r in _borrowed(_state(records, "dflash"), 10, set())] == [0]


def test_the_scheduled_flag_survives_the_status_and_old_statuses_read_it_from_the_drafted_counter() -> None:
    record = _pair(0, 3, 7, 4.0, scheduled=True)[1]
    assert WindowRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    old = {k: v for k, v in record.to_json().items() if k != "s"}
    assert WindowRecord.from_json(old).scheduled is False
    assert WindowRecord.from_json({**old, "s": "yes"}).scheduled is False
    # Before the flag, only a scheduled track's record kept the drafted-per-position counts.
    assert WindowRecord.from_json({**old, "dr": [100.0]}).scheduled is True


def test_a_schedule_canary_is_promoted_with_the_earlier_canary_s_windows_pooled() -> None:
    # A tensor-parallel node, MTP, default N=3, loads from 1 to 256 sequences per pod; N=7 wins at light
    # loads and loses at 256. Its canary is rolled back, and the schedule 7 [1-32:7 33-128:5 129+:3] then
    # starts with N=7's windows at the light loads. Every window's state goes through its status JSON, as
    # after an operator restart.
    profile = load_profiles((PROFILES / "mixed-load.json").read_text())["mix-tp-mtp-2004"]
    dep = strategies._deployment(profile, 1, 48, SURGE)
    tuning = strategies.bench_tuning(profile, "schedule", SURGE)
    state = TunerState.new(profile.method, profile.default_n, now=dep.now)
    promoted = []
    for _ in range(48):
        state = TunerState.from_status(json.loads(json.dumps(state.to_status())), method=profile.method,
                                       stable_n=dep.stable_n)
        state, a = step(state, tuning, dep.window(), dep.now)
        if a.kind == ActionKind.PROMOTE:
            promoted.append((a.n, a.schedule, a.reason))
        dep.apply(a)
    # The rule fired: a schedule canary promoted on windows that include an earlier plain canary's of its N
    # (when found: 7 [1-32:7 33-128:5 129+:3] with 10 of N=7's windows).
    n, schedule, reason = next(p for p in promoted if p[1] is not None)
    assert any(h["action"] == ActionKind.START_CANARY and h["n"] == n and not h.get("schedule")
               for h in state.history), state.history
    carried = re.search(r"with (\d+) carried windows", reason)
    assert carried and int(carried[1]) > 0, reason
    assert state.stable_schedule == schedule
    # What the user sees: no promotion worse than the issue's -0.5%, and the schedule ends no more than 0.5%
    # below the best single N (the schedule target).
    served = served_goodput(profile, n, schedule)
    assert served >= 0.995 * profile.goodput(profile.default_n)
    assert served >= 0.995 * max(profile.goodput(k) for k in range(profile.max_n + 1))
