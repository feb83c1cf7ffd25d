"""How N gets chosen in a simulated run: the tuner (through the controller's `step()` contract) and the
baselines it is compared with. Every strategy gets the same deployment, limits and seed.

- tuner: `specpilot.tuning.step` once per window, its actions applied to the deployment;
- default: never tunes (the method's common N);
- sweep: the source article's manual method (docs/references.md §1): every candidate in turn as a canary, keep the best measured;
- hill-climb: from the default, step N up (or down) while the measured neighbour is better.
Baselines measure what an operator without the tuner would: tokens per second per pod of canary against
stable over the same windows, with all of the step-time noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from specpilot.api.models import Canary, Tuning, TuningMode
from specpilot.tuning import ActionKind, TunerState, step

from specpilot_harness.sim.profile import Profile

from .simulate import Deployment, Fleet, Schedule

# Every strategy gets the tuner's default round budget (spec.tuning.maxCanariesPerRound, maxWindowsPerRound).
MAX_CANARIES = Tuning().max_canaries_per_round
MAX_WINDOWS = Tuning().max_windows_per_round
BASELINE_WINDOWS = 2  # measured windows per candidate for sweep and hill-climb


@dataclass
class Run:
    chosen_n: int  # the stable track's (started) N at the end
    tried: list[int] = field(default_factory=list)  # canaries' N in order (a schedule canary: its started N)
    exploration_cost: float = 0.0
    promotions: list[tuple[int, int]] = field(default_factory=list)  # (from N, to N)
    # The batch-size schedule ([lo, hi, K] rows) the stable track serves at the end under chosen_n; None:
    # chosen_n at every batch size.
    schedule: list[list[int]] | None = None
    proposal: dict | None = None  # the tuner's last schedule-mode proposal (state.schedule), if any
    # Per promotion, the schedule the stable track served after it (None: a plain N).
    promotion_schedules: list[list[list[int]] | None] = field(default_factory=list)
    schedule_canaries: int = 0  # canaries started with a schedule (counted in `tried` too)
    restarts: int = 0  # pod rollouts the tuning caused (canaries started, promotions rolled out)
    # What the engines serve at the end when it is not chosen_n and schedule as they read: a live arm is the
    # started N with the arm's table (simulate.Deployment.served).
    served: tuple[int, list[list[int]] | None] | None = None
    # Whether the stable's pods carry a batch-size table at the end (a schedule, or switchback's table until
    # the table check falls back to static pods), and pay `Profile.table_cost`; None: exactly with a schedule.
    table: bool | None = None

    def served_config(self) -> tuple[int, list[list[int]] | None]:
        return self.served or (self.chosen_n, self.schedule)

    def promotion_configs(self) -> list[tuple[tuple[int, Schedule | None], tuple[int, Schedule | None]]]:
        """Each promotion as ((from N, from schedule), (to N, to schedule)); runs start from a plain N."""
        scheds = self.promotion_schedules or [None] * len(self.promotions)
        out = []
        before: Schedule | None = None
        for (a, b), after in zip(self.promotions, scheds):
            out.append(((a, before), (b, after)))
            before = after
        return out


def bench_tuning(profile: Profile, mode: TuningMode = "single", fleet: Fleet = Fleet()) -> Tuning:
    """The spec a user would write for this profile: defaults, candidates 0..max_n, tuning `mode`, the
    fleet's canary mode and confidence."""
    return Tuning(enabled=True, candidates=list(range(profile.max_n + 1)), confidence=fleet.confidence,
                  canary=Canary(analysis_window="5m", mode=fleet.canary_mode), mode=mode, measure=fleet.measure)


def _deployment(profile: Profile, seed: int, windows: int = MAX_WINDOWS, fleet: Fleet = Fleet()) -> Deployment:
    """Under switchback the engines start at the largest candidate, as the operator renders them."""
    return Deployment(profile, np.random.default_rng(seed), stable_n=profile.default_n, horizon=windows,
                      stable_pods=fleet.stable_replicas, canary_mode=fleet.canary_mode, measure=fleet.measure,
                      started_n=profile.max_n)


def _ran(dep: Deployment, run: Run) -> Run:
    """`run` with what the deployment's pods went through and serve at the end."""
    served = dep.served()
    run.restarts = dep.restarts
    run.table = dep.stable_table
    run.served = served if served != (dep.stable_n, dep.stable_schedule) else None
    return run


def run_tuner(profile: Profile, seed: int, windows: int = MAX_WINDOWS, mode: TuningMode = "single",
              fleet: Fleet = Fleet(), trace: Callable[[str], None] | None = None) -> Run:
    """`windows`: the run's length; longer than one round (48) lets later rounds happen (the canary
    budget is 8 per 48 windows). `trace`: told every decision but "keep analysing" (window, action, N,
    the schedule it serves, the reason: `bench tuner --trace`)."""
    dep = _deployment(profile, seed, windows, fleet)
    max_canaries = MAX_CANARIES * -(-windows // MAX_WINDOWS)
    tuning = bench_tuning(profile, mode, fleet)
    state = TunerState.new(profile.method, profile.default_n, now=dep.now)
    tried: list[int] = []
    promotions: list[tuple[int, int]] = []
    promoted_schedules: list[list[list[int]] | None] = []
    schedule_canaries = 0
    for _ in range(windows):
        obs = dep.window()
        state, action = step(state, tuning, obs, dep.now)
        # Action.schedule: the batch-size schedule the track serves under action.n (None: plain N).
        schedule = getattr(action, "schedule", None)
        if trace is not None and action.kind != ActionKind.KEEP_ANALYSING:
            served = f" [{' '.join(f'{lo}-{hi}:{k}' for lo, hi, k in schedule)}]" if schedule else ""
            trace(f"window {len(dep.costs) - 1:2d} load {dep.costs[-1].load:g}: {action.kind.value} "
                  f"N={action.n}{served}: {action.reason}")
        if action.kind == ActionKind.START_CANARY and action.n is not None:
            if len(tried) >= max_canaries:
                break
            tried.append(action.n)
            schedule_canaries += schedule is not None
        elif action.kind == ActionKind.PROMOTE and action.n is not None:
            promotions.append((dep.stable_n, action.n))
            promoted_schedules.append(schedule)
        dep.apply(action)
    # What the deployment serves at the end (the applied actions; the tuner's state.stable_n and
    # state.stable_schedule say the same when every action was applied).
    return _ran(dep, Run(dep.stable_n, tried, dep.exploration_cost(), promotions, dep.stable_schedule, state.schedule,
                         [None if s is None else [list(r) for r in s] for s in promoted_schedules],
                         schedule_canaries))


def measure_canary(dep: Deployment, n: int, windows: int, profile: Profile | None = None) -> float | None:
    """Run a canary at N (of another drafter's `profile`, if given) and return its mean measured throughput
    ratio to stable; None when out of windows."""
    dep.start_canary(n, profile=profile)
    used = 0
    ratios: list[float] = []
    while len(ratios) < windows:
        if len(dep.costs) >= dep.horizon:
            dep.remove_canary()
            return None
        obs = dep.window()
        used += 1
        c, s = obs.canary, obs.stable
        # The restart window is partial; like the tuner, measure only full windows after it.
        if c is None or c.ready_pods == 0 or used == 1:
            continue
        per_pod = lambda w: w.delta.generation_tokens / w.ready_pods  # noqa: E731 - tokens per pod
        ratios.append(per_pod(c) / per_pod(s))
    dep.remove_canary()
    return float(np.mean(ratios))


def run_default(profile: Profile, seed: int, windows: int = MAX_WINDOWS,
                fleet: Fleet = Fleet()) -> Run:
    dep = _deployment(profile, seed, windows, fleet)
    for _ in range(windows):
        dep.window()
    return _ran(dep, Run(profile.default_n, [], dep.exploration_cost()))


def _finish(dep: Deployment) -> None:
    while len(dep.costs) < dep.horizon:
        dep.window()


def run_sweep(profile: Profile, seed: int, windows: int = MAX_WINDOWS,
              fleet: Fleet = Fleet()) -> Run:
    """Every candidate, in order; the sweep is the article's method, so it is not held to 8 canaries."""
    dep = _deployment(profile, seed, windows, fleet)
    best_n, best = profile.default_n, 1.0
    tried: list[int] = []
    for n in range(profile.max_n + 1):
        if n == profile.default_n:
            continue
        m = measure_canary(dep, n, BASELINE_WINDOWS)
        if m is None:
            break
        tried.append(n)
        if m > best:
            best_n, best = n, m
    dep.promote(best_n)
    _finish(dep)
    promotions = [(profile.default_n, best_n)] if best_n != profile.default_n else []
    return _ran(dep, Run(best_n, tried, dep.exploration_cost(), promotions))


def run_hill_climb(profile: Profile, seed: int, windows: int = MAX_WINDOWS,
                   fleet: Fleet = Fleet()) -> Run:
    dep = _deployment(profile, seed, windows, fleet)
    n = profile.default_n
    tried: list[int] = []
    promotions: list[tuple[int, int]] = []
    direction = 1
    turned = False
    while len(tried) < MAX_CANARIES:
        nxt = n + direction
        if not 0 <= nxt <= profile.max_n:
            if turned:
                break
            direction, turned = -direction, True
            continue
        m = measure_canary(dep, nxt, BASELINE_WINDOWS)
        if m is None:
            break
        tried.append(nxt)
        if m > 1.0:
            promotions.append((n, nxt))
            n = nxt
            dep.promote(n)
            turned = True  # found the slope: keep going this way only
        elif turned:
            break
        else:
            direction, turned = -direction, True
    _finish(dep)
    return _ran(dep, Run(n, tried, dep.exploration_cost(), promotions))


BASELINES = {"sweep": run_sweep, "default": run_default, "hill-climb": run_hill_climb}
