"""The tuner on simulated engines (sim/engine.py), scraped as the operator scrapes them.

`specpilot bench tuner` draws each window's counters from the profile's step times (simulate.py): it has no
queue, no KV cache and no time to first token, so it cannot see what a draft's KV costs at high load. Here
every pod is a `sim.engine.Engine` (the one source of truth for admission, KV blocks, preemption and TTFT,
opt-in per profile through its `kv` section) fed evenly spaced requests at a fixed rate per pod, and every
window is the difference of two parsed expositions, as the operator's scraper takes it. The pods run as
`tuning.canary.mode: replace` with two stable replicas: while a canary serves it took one stable pod's place,
so every pod keeps its rate (the rate a promotion will serve).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import specpilot_runtime.vllm_metrics as vm
from specpilot.api.models import Canary, Slo, Tuning
from specpilot.scrape.windows import add
from specpilot.tuning import ActionKind, Observations, Phase, TrackWindow, TunerState, step

from specpilot_harness.sim.engine import Engine
from specpilot_harness.sim.metrics import SimMetrics
from specpilot_harness.sim.profile import Profile

STABLE_REPLICAS = 2
WINDOW = "30s"  # short windows keep an event-driven run affordable; the gates count windows, not seconds
WINDOW_S = 30.0


@dataclass(frozen=True)
class Requests:
    """The traffic one pod gets: a request every 1/rate seconds, of these prompt and output lengths."""

    rate: float
    prompt_tokens: int
    output_tokens: int


class Pod:
    """One serving pod at N from `start` on, scraped every window."""

    def __init__(self, profile: Profile, n: int, requests: Requests, seed: int, start: float) -> None:
        self.n, self.requests = n, requests
        self.engine = Engine(profile, n, random.Random(seed))
        self.engine.catch_up(start)
        self.next_arrival, self.count = start, 0
        self.metrics = SimMetrics("bench", n)
        self.previous = vm.parse(self.metrics.exposition().decode())

    def run_until(self, t: float) -> None:
        e, r = self.engine, self.requests
        while True:
            while self.next_arrival <= e.clock and self.next_arrival < t:
                e.submit(f"r{self.count}", r.prompt_tokens, r.output_tokens)
                self.count += 1
                self.next_arrival += 1.0 / r.rate
            if e.clock >= t:
                return
            if not e.busy:
                e.catch_up(min(self.next_arrival, t))
                continue
            self.metrics.record(e.step())
            self.metrics.set_queue(e.running, e.waiting)

    def window(self) -> vm.Snapshot:
        now = vm.parse(self.metrics.exposition().decode())
        d, self.previous = vm.delta(self.previous, now), now
        return d


@dataclass
class EngineRun:
    """What the tuner did on the engines: the N it serves at the end, the canaries it started, and the
    reasons of those an SLO or queueing gate rolled back (`numbers.gate` in the decision's record)."""

    chosen_n: int
    tried: list[int] = field(default_factory=list)
    gate_rollbacks: list[str] = field(default_factory=list)
    windows: int = 0


def tuning_for(profile: Profile, slo: Slo | None) -> Tuning:
    """The spec a user would write: defaults, candidates 0..max_n, replace canaries, these SLOs."""
    return Tuning(enabled=True, candidates=list(range(profile.max_n + 1)),
                  canary=Canary(analysis_window=WINDOW, mode="replace"), slo=slo)


def tune_on_engines(profile: Profile, requests: Requests, slo: Slo | None, windows: int, seed: int) -> EngineRun:
    """One tuning round from the profile's default N on engines at `requests`, until it converges or
    `windows` windows have passed."""
    tuning = tuning_for(profile, slo)
    state = TunerState.new(profile.method, profile.default_n)
    seeds = iter(range(seed * 1000, seed * 1000 + 1000))
    stable = [Pod(profile, profile.default_n, requests, next(seeds), 0.0) for _ in range(STABLE_REPLICAS)]
    canary: Pod | None = None
    run = EngineRun(profile.default_n)
    for w in range(1, windows + 1):
        t = w * WINDOW_S
        for pod in stable + ([canary] if canary else []):
            pod.run_until(t)
        track = TrackWindow(stable[0].n, _sum([p.window() for p in stable]), len(stable), len(stable))
        seen = None if canary is None else TrackWindow(canary.n, canary.window(), 1, 1)
        state, action = step(state, tuning, Observations(WINDOW_S, track, seen, stable_replicas=STABLE_REPLICAS), t)
        run.windows = w
        if action.kind == ActionKind.START_CANARY and action.n is not None:
            run.tried.append(action.n)
            canary, stable = Pod(profile, action.n, requests, next(seeds), t), stable[:-1]
        elif action.kind == ActionKind.PROMOTE and action.n is not None:
            canary = None
            stable = [Pod(profile, action.n, requests, next(seeds), t) for _ in range(STABLE_REPLICAS)]
        elif action.kind in (ActionKind.ROLLBACK, ActionKind.STOP) and canary is not None:
            if action.kind == ActionKind.ROLLBACK and "gate" in state.history[-1].get("numbers", {}):
                run.gate_rollbacks.append(action.reason)
            canary = None
            stable.append(Pod(profile, stable[0].n, requests, next(seeds), t))
        if state.phase == Phase.CONVERGED:
            break
    run.chosen_n = state.stable_n
    return run


def _sum(deltas: list[vm.Snapshot]) -> vm.Snapshot:
    out = deltas[0]
    for d in deltas[1:]:
        out = add(out, d)
    return out
