"""An N measured better than the stable but left unproven by its round gets one more canary in a later
round, which pools the first canary's windows (`specpilot.tuning.evidence`): a long-running deployment
does not leave that gain on the table for good, and the judge's bar for the pooled windows is higher."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from specpilot.tuning import ActionKind, TunerState, step
from specpilot.tuning.judge import judge
from specpilot.tuning.observations import WindowRecord
from specpilot_harness.bench import cli, strategies
from specpilot_harness.bench.report import served_goodput
from specpilot_harness.bench.simulate import Fleet
from specpilot_harness.sim.profile import Profile, load_profiles

PROFILES = Path(cli.__file__).parent / "profiles"
# Most replays below were found with a surge canary (the one beside three stable pods).
SURGE = Fleet(3, "surge")


def _windows(first: int, count: int, gain: float, noise: float, seed: int) -> list[WindowRecord]:
    """Paired stable (N=3) and canary (N=5) windows at 16 sequences per pod: the canary's step takes the
    same time and yields `gain` more tokens, give or take `noise` per window in its step time."""
    rng = np.random.default_rng(seed)
    out = []
    for seq in range(first, first + count):
        stable = WindowRecord(seq=seq, track="stable", n=3, drafts=1000.0, accepted_per_pos=(600.0, 400.0, 200.0),
                              tokens_per_step=2.2, step_s=0.02, load=16.0)
        canary = WindowRecord(seq=seq, track="canary", n=5, drafts=1000.0, accepted_per_pos=(600.0, 400.0, 200.0),
                              tokens_per_step=2.2 * (1 + gain), step_s=0.02 * math.exp(noise * rng.standard_normal()),
                              load=16.0)
        out += [stable, canary]
    return out


def _split(records: list[WindowRecord]) -> tuple[list[WindowRecord], list[WindowRecord]]:
    return [r for r in records if r.track == "stable"], [r for r in records if r.track == "canary"]


def test_a_retry_counts_its_predecessor_s_windows_in_the_estimate_not_in_its_window_limits() -> None:
    first, retry = _windows(0, 18, 0.05, 0.06, seed=1), _windows(100, 3, 0.05, 0.06, seed=2)
    stable, canary = _split(first + retry)
    loads = [r.load for r in stable]
    early = judge(stable, canary, loads, "throughput", 0.02, 0.95, 6, carried=18)
    assert early.decision == "continue" and early.reason == "too few paired windows" and early.windows == 3
    stable, canary = _split(first + _windows(100, 6, 0.05, 0.06, seed=2))
    pooled = judge(stable, canary, loads, "throughput", 0.02, 0.95, 6, carried=18)
    assert pooled.windows == 6 and pooled.carried == 18 and pooled.to_json()["carried"] == 18
    # The same 24 windows judged as one canary's: the retry's looks are extra chances for noise, so its
    # promotion bound is the lower one.
    as_one = judge(stable, canary, loads, "throughput", 0.02, 0.95, 8)
    assert pooled.gain == as_one.gain and pooled.lower < as_one.lower


def _drive(windows: int, split: str, name: str, seed: int, mode: str = "single",
           fleet: Fleet = SURGE) -> tuple[TunerState, list[tuple[str, int | None, str]], list[tuple[int, int]]]:
    """A replay of one benchmark run for `windows` windows; every window's state goes through its status
    JSON and back, as after an operator restart."""
    profile = load_profiles((PROFILES / f"{split}.json").read_text())[name]
    dep = strategies._deployment(profile, seed, windows, fleet)
    tuning = strategies.bench_tuning(profile, mode, fleet)
    state = TunerState.new(profile.method, profile.default_n, now=dep.now)
    actions: list[tuple[str, int | None, str]] = []
    promotions: list[tuple[int, int]] = []
    for _ in range(windows):
        status = json.loads(json.dumps(state.to_status()))
        state = TunerState.from_status(status, method=profile.method, stable_n=dep.stable_n)
        state, a = step(state, tuning, dep.window(), dep.now)
        actions.append((a.kind, a.n, a.reason))
        if a.kind == ActionKind.PROMOTE:
            promotions.append((dep.stable_n, a.n))
        dep.apply(a)
    return state, actions, promotions


def test_an_unproven_better_n_is_canaried_again_in_the_next_round_and_promoted_on_the_pooled_windows() -> None:
    # An 8B dense GPU with DFlash, loads 8 and 128, default N=7, the default fleet (a canary in place of one of
    # three stable pods). When this replay was found, the canary at 4 (truly +7.8%; the best, 3, +9.2%)
    # measured +5.7% in its 18 windows and could not prove it; the round went on and converged at 7. After
    # the cooldown the retry's windows pool with the first canary's and prove it.
    state, actions, promotions = _drive(100, "generated-dev", "gen-dense-dflash-10", 3, fleet=Fleet())
    profile = _profile("generated-dev", "gen-dense-dflash-10")
    # The rule fired: a canary measured better but inconclusive, then a retry of that N naming what it measured.
    unproven = [(n, m) for kind, n, reason in actions
                if kind == ActionKind.ROLLBACK and (m := UNPROVEN.match(reason)) and float(m["gain"]) > 0]
    assert unproven
    n, m = unproven[0]
    what = f"N={n} measured {m['gain']}% over N=7 in {m['windows']} windows, unproven"
    waiting = [reason for kind, _, reason in actions if reason.startswith("converged (cooldown; then a retry")]
    assert waiting and what in waiting[0]  # the status says what comes next
    retry = [(n_, reason) for kind, n_, reason in actions
             if kind == ActionKind.START_CANARY and reason.startswith("retry")]
    assert retry[0] == (n, f"retry: {what}; this canary's windows pool with those")
    # Promoted on the pooled windows: the first canary's, every one of them.
    promoted = next((n_, reason) for kind, n_, reason in actions if kind == ActionKind.PROMOTE)
    assert promoted[0] == n and f"with {m['windows']} carried windows" in promoted[1]
    # What the user sees: no promotion lost goodput, and the deployment ends near the oracle.
    assert all(profile.goodput(new) >= (1 + WORST_PROMOTION) * profile.goodput(old) for old, new in promotions)
    assert profile.goodput(state.stable_n) >= (1 - MAX_REGRET) * profile.goodput(profile.oracle_n())
    assert all(e.stable_n != 7 for e in state.carried)  # measured against N=7: spent
    new_rounds = [e["reason"] for e in state.history if e["reason"].startswith(f"retry: N={n}")]
    assert new_rounds and "unproven" in new_rounds[0]


def test_an_unproven_schedule_is_canaried_again_with_its_schedule_and_served_once_proven() -> None:
    # Schedule mode, a parallel drafter on a dense target, loads from 1 to 256 sequences per pod: after N=0
    # is promoted, the schedule 4 [1-32:4 33-128:3 129+:0] measures +7.1% in 18 windows, unproven. Its retry
    # starts the same schedule again, and the pooled windows prove it.
    state, actions, promotions = _drive(80, "mixed-load", "mix-dense-dspark-2009", 2, "schedule")
    profile = _profile("mixed-load", "mix-dense-dspark-2009")
    retry = [(n, reason) for kind, n, reason in actions
             if kind == ActionKind.START_CANARY and reason.startswith("retry")]
    assert len(retry) == 1  # one retry of the schedule, naming it and what it measured
    n, reason = retry[0]
    m = SCHEDULE_RETRY.fullmatch(reason)
    assert m and int(m["n"]) == n and float(m["gain"]) > 0, reason
    # Served once proven: the last promotion is the retry's N under that same schedule.
    assert promotions[-1][1] == n and state.stable_schedule is not None and state.carried == []
    assert " ".join(f"{lo}-{hi}:{k}" if hi < 4096 else f"{lo}+:{k}" for lo, hi, k in state.stable_schedule) \
        == m["schedule"]
    # No promotion lost goodput: the plain-N ones before it, and the schedule against the N it replaced.
    assert all(profile.goodput(new) >= (1 + WORST_PROMOTION) * profile.goodput(old) for old, new in promotions[:-1])
    served = served_goodput(profile, state.stable_n, state.stable_schedule)
    assert served >= (1 + WORST_PROMOTION) * profile.goodput(promotions[-1][0])
    # A schedule's point is to beat every single N: the run ends no more than 0.5% below the best one (the
    # issue's schedule target).
    best_single = max(profile.goodput(k) for k in range(profile.max_n + 1))
    assert served >= (1 + WORST_PROMOTION) * best_single


UNPROVEN = re.compile(r"inconclusive after (?P<windows>\d+) windows \(measured (?P<gain>[+-][\d.]+)%")
SCHEDULE_RETRY = re.compile(r"retry: N=(?P<n>\d+) schedule (?P<schedule>[\d:+ -]+) measured \+(?P<gain>[\d.]+)% "
                            r"over N=\d+ in \d+ windows, unproven; this canary's windows pool with those")
# The targets for the N tuner (docs/benchmark.md, "Targets"): no promotion worse than -0.5%, no run
# more than 3% below the oracle.
WORST_PROMOTION = -0.005
MAX_REGRET = 0.03


def _profile(split: str, name: str) -> Profile:
    return load_profiles((PROFILES / f"{split}.json").read_text())[name]

