"""A simulated deployment: per window, the counter deltas a scrape of the stable and canary tracks gives.

Per window the load level B is drawn from the profile's concurrency weights (load moves slowly next to a
window, so one window sits at one level): the sequences per pod the stable track serves alone. Traffic
splits by ready pod, as a Service spreads it: while canary pods serve, every pod of both tracks runs
B x stable pods / all pods (a surge canary adds pods, not traffic; with one stable replica, half; `specpilot
bench tuner --stable-replicas R`). Then, per track:
- the step time is the profile's t(N, B) with log-normal noise of sd `noise` per window; 80% of its
  variance is shared by both tracks (they serve the same traffic mix and context lengths in the same
  window), 20% is the track's own (its subset of requests, its GPUs);
- drafts = steps x B x pods; accepted tokens per position are nested binomials given the drafts
  (A_1 ~ Bin(D, S_1), A_k ~ Bin(A_{k-1}, S_k / S_{k-1}));
- the window's request mix scales every conditional acceptance by a shared log-normal factor, which is
  what makes drafts of one window correlated (batch means, not binomial errors, are the right error);
- TPOT sums and counts follow from finished requests of OUTPUT_TOKENS tokens.
A canary serves nothing for `restart_s` after it is started. `served` keeps the true (noise-free) goodput
of both tracks for the exploration cost.

A track may serve a batch-size schedule (vLLM 0.33's `num_speculative_tokens_per_batch_size`, rows
[lo, hi, K]) under its started N: in a window at load B it drafts K = `schedule_k(schedule, N, B)` tokens.
Its step time is the profile's t(K, B); its acceptance is the first K positions of the curve at N (vLLM
drafts N and truncates centrally to K: the same as the curve at K unless the drafter's curve depends on N,
i.e. a parallel drafter's `survival_by_n`; as the simulated engine does, `sim/engine.py`); its true
goodput follows from both (`served_goodput_at`). Its counters are what vLLM counts under a schedule:
`draft_tokens` grows by N per draft while only positions < K can be accepted; specpilot's
drafted-per-position counter (`drafted_per_pos`) counts the drafts at positions < K and nothing beyond.
K = 0: no drafts that window. A track without a schedule draws exactly what it drew before schedules
existed (same random numbers) and reports no `drafted_per_pos`.

Measured by switchback (`Fleet.measure`, spec.tuning.measure): the engines start at the largest candidate
(`started_n`) and serve the tuner's N as a live arm, a table under it (live.py). A canary whose N fits under
the started N with the same drafter is no new pod: every stable pod alternates between the stable's arm
and the canary's on a dwell of seconds, so both arms see the same load in the same window, each for half of
it. What they share: the window's load level, request mix and noise; what is each arm's own: the
dwell-level noise averaged over the window's dwells of that arm (sd `noise` x sqrt(2 x dwell / window), the
mean dwell the operator sets for the window, `api.switchback.dwell_range`),
and the steps right after each switch, which the engine discounts (SWITCH_COST_FRACTION of an arm's steps).
The arms' counters are read per arm (the engine's switchback counters), scaled to the window as a whole
pod would have counted them, so the tuner sees the same TrackWindow pair a canary gives. Anything else (a
drafter of its own, an N above the started one) is a canary as before, and counts a restart; so does a
promotion that is not a live arm.

The table's cost (`Profile.table_cost`): a track whose pods serve a batch-size table steps 1 + table_cost
times slower at every K, K = 0 included (vLLM stops padding decode requests to one draft length and falls
back from full CUDA graphs to piecewise ones; vllm-project/vllm#49548), and its true goodput is that much lower.
Under switchback the stable's pods carry a table (a live method's; a parallel drafter's pods never do)
until the tuner's table check promotes static pods (`Action.static`: `stable_static` from then on), and a
canary does too (the operator renders it with a table, the cost both tracks pay alike) unless it is
started `static`: then it is pods of their own without a table, a restart, never a live arm; after the
fall-back to static every canary is. A track serving a schedule (schedule mode) carries a table under any
measure; under measure=canary in single mode nothing does. The oracles (report.py) stay the profile's best
static configuration, no table: a tuner that keeps a costly table shows it as regret.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import get_args

import numpy as np

from specpilot.api.switchback import dwell_range
from specpilot.api.models import CanaryMode, CanaryPods, Tuning, TuningMeasure, canary_pods
from specpilot.tuning import Action, ActionKind
from specpilot.tuning.observations import Observations, TrackWindow
from specpilot_runtime.live import MAX_BATCH_SIZE, band_of
from specpilot_runtime.speculative import METHODS, OFF, SCHEDULE_METHODS, live_method, schedule_k
from specpilot_runtime.vllm_metrics import Snapshot

from specpilot_harness.sim.profile import Profile

OUTPUT_TOKENS = 256
ACCEPTANCE_JITTER = 0.02
SHARED_NOISE_FRACTION = 0.8
STABLE_PODS = 3  # stable replicas of a simulated deployment; a canary is one more pod
CANARY_MODES: tuple[str, ...] = get_args(CanaryMode)
MEASURES: tuple[str, ...] = get_args(TuningMeasure)
# Switchback: the share of an arm's steps the engine discounts after switches (live.SWITCH_DISCOUNT_STEPS
# steps per visit of ~100 steps).
SWITCH_COST_FRACTION = 0.02


@dataclass(frozen=True)
class Fleet:
    """How a simulated deployment runs its pods: the stable replicas, and where a canary's pod comes from
    (surge: beside them, every pod runs lighter while it serves; replace: one of them, every pod runs at the
    load it ran before, and while the canary starts the stable's remaining pods carry more): the spec's
    tuning.canary.mode as it applies to these replicas (`canary_pods`). And the spec's tuning.confidence
    its judge promotes with."""

    stable_replicas: int = STABLE_PODS
    canary_mode: CanaryPods = canary_pods("auto", STABLE_PODS, 1)
    confidence: float = Tuning().confidence
    measure: TuningMeasure = "canary"

Schedule = list[list[int]]  # [[lo, hi, K], ...]: vLLM's num_speculative_tokens_per_batch_size


def drafted_curve(profile: Profile, n: int, k: int) -> tuple[float, ...]:
    """S_1..S_K of a track started at N drafting K (<= N): vLLM drafts N and truncates to K centrally, so
    the first K positions of the curve at N."""
    return profile.survival_at(n)[:k] if n > 0 else ()


def served_goodput_at(profile: Profile, n: int, k: int, load: float, table: bool = False) -> float:
    """True tokens per ms per pod of a track started at N that drafts K at this load; `table`: its pods serve
    a batch-size table, every step 1 + `profile.table_cost` times as long."""
    slower = 1.0 + profile.table_cost if table else 1.0
    if k == n:
        return profile.goodput_at(n, load) / slower
    return load * (1.0 + sum(drafted_curve(profile, n, k))) / (profile.step_time(k, max(1, round(load))) * slower)


@dataclass
class WindowCost:
    """Noise-free goodput of one window, per pod, for the exploration cost."""

    stable: float
    canary: float | None  # None when no canary; 0 while it restarts
    load: int = 0  # sequences per pod in the window
    stable_k: int = 0  # draft tokens per sequence each track drafted (its N, or the schedule's K at the load)
    canary_k: int | None = None
    share: float = 0.0  # the share of the deployment's serving the canary (or canary arm) took


@dataclass
class Deployment:
    profile: Profile
    rng: np.random.Generator
    stable_n: int
    stable_pods: int = STABLE_PODS
    canary_pods: int = 1
    canary_mode: CanaryPods = "surge"  # Fleet.canary_mode
    window_s: float = 300.0
    restart_s: float = 240.0
    horizon: int = 48  # windows a benchmark run lasts (strategies stop measuring there)
    canary_n: int | None = None
    stable_schedule: Schedule | None = None  # the batch-size schedule the track serves under its N, if any
    canary_schedule: Schedule | None = None
    canary_ready_in: float = 0.0  # seconds of restart left
    # A method canary's profile (another drafter for the same target; None: the stable's profile).
    canary_profile: Profile | None = None
    now: float = 0.0
    costs: list[WindowCost] = field(default_factory=list)
    measure: TuningMeasure = "canary"
    started_n: int = 0  # switchback: the N the engines start with; every live arm's K is at most it
    stable_live: bool = False  # the stable's N is served as a live arm under started_n
    canary_live: bool = False  # the canary is an arm in the stable's pods, not pods of its own
    restarts: int = 0  # pod rollouts the tuning caused: canaries started, promotions rolled out
    stable_static: bool = False  # switchback fell back to static pods (the table check): no table, no arms
    canary_static: bool = False  # the canary is static pods (no table), started by the table check or after it

    def __post_init__(self) -> None:
        self.stable_live = self._live_ok(self.stable_n, self.stable_schedule, None)

    def _live_ok(self, n: int, schedule: Schedule | None, profile: Profile | None) -> bool:
        """A configuration the stable's running engines can serve live: same drafter, K under the started N."""
        return (self.measure == "switchback" and profile is None and self.profile.method in SCHEDULE_METHODS
                and METHODS[self.profile.method].prefix_transfers
                and n <= self.started_n and all(row[2] <= self.started_n for row in schedule or ()))

    @property
    def canary_share(self) -> float:
        return self.canary_pods / (self.canary_pods + self._beside())

    def _beside(self) -> int:
        """The stable's pods while a canary runs."""
        return self.stable_pods - self.canary_pods if self.canary_mode == "replace" else self.stable_pods

    def _table(self, profile: Profile, schedule: Schedule | None, static: bool) -> bool:
        """Whether pods of `profile` serving `schedule` carry a batch-size table: a schedule always does;
        under switchback a live method's pods do unless they are static."""
        return bool(schedule) or (self.measure == "switchback" and not static and live_method(profile.method))

    @property
    def stable_table(self) -> bool:
        """The stable's pods carry a batch-size table, and pay its cost."""
        return self.stable_live or self._table(self.profile, self.stable_schedule, self.stable_static)

    @property
    def canary_table(self) -> bool:
        """The canary serves under a batch-size table (a live arm's is the stable pods' own)."""
        return self.canary_n is not None and (self.canary_live or self._table(
            self.canary_profile or self.profile, self.canary_schedule, self.canary_static))

    def start_canary(self, n: int, schedule: Schedule | None = None, profile: Profile | None = None,
                     static: bool = False) -> None:
        """`static`: pods without a table (the table check; every canary after the fall-back to static)."""
        self.canary_n = n
        self.canary_profile = profile
        self.canary_schedule = _copy(schedule)
        self.canary_static = static or self.stable_static
        self.canary_live = self.stable_live and not self.canary_static and self._live_ok(n, schedule, profile)
        self.canary_ready_in = 0.0 if self.canary_live else self.restart_s
        self.restarts += not self.canary_live

    def remove_canary(self) -> None:
        self.canary_n = None
        self.canary_profile = None
        self.canary_schedule = None
        self.canary_live = False
        self.canary_static = False

    def promote(self, n: int, schedule: Schedule | None = None, profile: Profile | None = None,
                static: bool = False) -> None:
        """A rolling update with surge: the stable track keeps serving while it moves to N (and schedule,
        and another drafter's profile). `static`: to static pods, no table, no live arms, for good."""
        self.stable_static = static or self.stable_static
        live = self.stable_live and not self.stable_static and self._live_ok(n, schedule, profile)
        self.restarts += not live
        self.stable_live = live
        self.canary_live = False
        self.canary_static = False
        self.profile = profile or self.profile
        self.canary_profile = None
        self.stable_n = n
        self.stable_schedule = _copy(schedule)
        self.canary_n = None
        self.canary_schedule = None

    def apply(self, action: Action, profile: Profile | None = None) -> None:
        """What the tuner's action asks of the deployment, done as the operator does it (holding and
        analysing change nothing). `profile`: the drafter a method canary or promotion brings (a
        tournament's contender; None: the stable's)."""
        static = bool(getattr(action, "static", False))  # the table check's static pods
        if action.kind == ActionKind.START_CANARY and action.n is not None:
            self.start_canary(action.n, action.schedule, profile, static)
        elif action.kind == ActionKind.PROMOTE and action.n is not None:
            self.promote(action.n, action.schedule, profile, static)
        elif action.kind in (ActionKind.ROLLBACK, ActionKind.STOP):
            self.remove_canary()

    def _track(self, p: Profile, n: int, load: float, serve_s: float, pods: int, jitter: float,
               shared: float, schedule: Schedule | None = None, arm_sd: float | None = None,
               table: bool = False) -> tuple[Snapshot, float, int]:
        """One track's window. `arm_sd`: a switchback arm, which shares the whole window noise and has only
        this much of its own (None: a track of its own pods, SHARED_NOISE_FRACTION shared). `table`: its pods
        serve a batch-size table, each step 1 + `p.table_cost` times as long."""
        k = schedule_k(schedule, n, round(load)) if schedule else n  # tokens drafted per sequence this window
        own = self.rng.standard_normal()
        if arm_sd is None:
            eps = math.sqrt(SHARED_NOISE_FRACTION) * shared + math.sqrt(1 - SHARED_NOISE_FRACTION) * own
        else:
            eps = shared + arm_sd * own
        step_ms = p.step_time(k, load) * (1.0 + p.table_cost if table else 1.0) * math.exp(p.noise * eps)
        steps = serve_s * 1000.0 / step_ms
        seqs = int(round(steps * load * pods))
        accepted: list[float] = []
        if k > 0 and seqs > 0:
            prev_s, prev_a = 1.0, seqs
            for s in drafted_curve(p, n, k):
                cond = min(1.0, (s / prev_s if prev_s > 0 else 0.0) * jitter)
                a = int(self.rng.binomial(prev_a, cond))
                accepted.append(float(a))
                prev_s, prev_a = s, a
        drafts = float(seqs) if k > 0 else 0.0
        tokens = float(seqs) + sum(accepted)
        per_step = tokens / seqs if seqs else 1.0
        finished = tokens / OUTPUT_TOKENS
        drafted: tuple[float, ...] | None = None
        if schedule and n > 0:
            # vLLM's per-position vectors have N entries; positions K..N-1 were truncated away.
            accepted += [0.0] * (n - len(accepted))
            drafted = (drafts,) * k + (0.0,) * (n - k)
        snap = Snapshot(drafts=drafts, draft_tokens=drafts * n, accepted_tokens=sum(accepted),
                        accepted_per_pos=tuple(accepted), drafted_per_pos=drafted, generation_tokens=tokens,
                        tpot_sum=finished * step_ms / 1000.0 / per_step, tpot_count=finished,
                        running=float(load * pods) if serve_s > 0 else 0.0, scrape_time=self.now)
        return snap, served_goodput_at(p, n, k, load, table), k

    def window(self) -> Observations:
        """Advance one window and return what the scrapes show."""
        p = self.profile
        levels = sorted(p.concurrency)
        load = int(self.rng.choice(levels, p=[p.concurrency[b] for b in levels]))
        jitter = math.exp(ACCEPTANCE_JITTER * self.rng.standard_normal())
        shared = self.rng.standard_normal()
        self.now += self.window_s
        serve = 0.0
        pods = self.stable_pods
        if self.canary_n is not None:
            serve = max(0.0, self.window_s - self.canary_ready_in)
            self.canary_ready_in = max(0.0, self.canary_ready_in - self.window_s)
            pods = self._beside()
        # Per-pod load while the canary serves, and the stable's mean over the window (its pods served the
        # traffic alone while the canary started).
        split = load * self.stable_pods / (pods + self.canary_pods)
        starting = load * self.stable_pods / pods
        stable_load = starting + (split - starting) * serve / self.window_s
        if self.canary_live:
            return self._switchback_window(load, jitter, shared)
        snap, g_stable, k_stable = self._arm(p, self.stable_n, self.stable_schedule, self.stable_live, stable_load,
                                             self.window_s, pods, jitter, shared, table=self.stable_table)
        stable = TrackWindow(self.stable_n, snap, pods, pods, method=_method(p, self.stable_n))
        canary = None
        g_canary: float | None = None
        k_canary: int | None = None
        if self.canary_n is not None:
            ready = self.canary_pods if self.canary_ready_in == 0 else 0
            cp = self.canary_profile or p
            snap_c, g, k_canary = self._track(cp, self.canary_n, split, serve, self.canary_pods, jitter, shared,
                                              self.canary_schedule, table=self.canary_table)
            canary = TrackWindow(self.canary_n, snap_c if ready else Snapshot(scrape_time=self.now), ready,
                                 self.canary_pods, method=_method(cp, self.canary_n))
            g_canary = g * serve / self.window_s
        self.costs.append(WindowCost(g_stable, g_canary, load, k_stable, k_canary, self.canary_share))
        return Observations(window_s=self.window_s, stable=stable, canary=canary, stable_replicas=self.stable_pods)

    def _arm(self, p: Profile, n: int, schedule: Schedule | None, live: bool, load: float, serve_s: float,
             pods: int, jitter: float, shared: float, arm_sd: float | None = None,
             table: bool = False) -> tuple[Snapshot, float, int]:
        """A track's window as the tuner sees N: a live arm runs under the started N (its table, or N at every
        batch size, and the table's cost) with vLLM's per-position vectors cut to N, the positions its arm can
        draft. `table`: a track that is no live arm serves a table (`_track`)."""
        if not live:
            return self._track(p, n, load, serve_s, pods, jitter, shared, schedule, arm_sd, table)
        rows = schedule if schedule else [[1, MAX_BATCH_SIZE, n]]
        snap, g, k = self._track(p, self.started_n, load, serve_s, pods, jitter, shared, rows, arm_sd, table=True)
        cut = replace(snap, accepted_per_pos=snap.accepted_per_pos[:n], draft_tokens=snap.drafts * n,
                      drafted_per_pos=None if snap.drafted_per_pos is None else snap.drafted_per_pos[:n])
        return cut, g, k

    def _switchback_window(self, load: int, jitter: float, shared: float) -> Observations:
        """Both arms in every stable pod, at the window's load, each half of the time."""
        assert self.canary_n is not None
        p, pods = self.profile, self.stable_pods
        arm_sd = math.sqrt(2.0 * sum(dwell_range(self.window_s)) / 2 / self.window_s)
        serve = self.window_s * (1.0 - SWITCH_COST_FRACTION)
        snap_s, g_s, k_s = self._arm(p, self.stable_n, self.stable_schedule, True, load, serve, pods, jitter,
                                     shared, arm_sd)
        snap_c, g_c, k_c = self._arm(p, self.canary_n, self.canary_schedule, True, load, serve, pods, jitter,
                                     shared, arm_sd)
        stable = TrackWindow(self.stable_n, snap_s, pods, pods, method=_method(p, self.stable_n),
                             bands=_band_counts(snap_s, load, serve, pods))
        canary = TrackWindow(self.canary_n, snap_c, pods, pods, method=_method(p, self.canary_n),
                             bands=_band_counts(snap_c, load, serve, pods))
        self.costs.append(WindowCost(g_s, g_c, load, k_s, k_c, 0.5))
        return Observations(window_s=self.window_s, stable=stable, canary=canary, stable_replicas=pods,
                            switchback=True)

    def exploration_cost(self) -> float:
        """Goodput lost to canaries (restarts, worse N) as a fraction of what the stable track served."""
        lost = sum(c.share * max(0.0, c.stable - c.canary) for c in self.costs if c.canary is not None)
        return lost / max(sum(c.stable for c in self.costs), 1e-12)

    def served(self) -> tuple[int, Schedule | None]:
        """What the stable's engines serve: a live arm is the started N with the arm's table (whether the pods
        carry a table, and pay its cost, is `stable_table`)."""
        if self.stable_live and self.stable_n != self.started_n:
            return self.started_n, self.stable_schedule or [[1, MAX_BATCH_SIZE, self.stable_n]]
        return self.stable_n, self.stable_schedule


def _band_counts(snap: Snapshot, load: int, serve_s: float, pods: int) -> dict[str, tuple[float, ...]]:
    """An arm's switchback counters (live.BAND_COUNTERS' order) for its half of the window: one window sits at
    one load level, so every step ran at that batch size, in its band. The step time is the one `_track`
    drew (TPOT x tokens per sequence-step), the tokens the arm's own."""
    tokens, done = snap.generation_tokens, snap.tpot_count
    if tokens <= 0 or done <= 0:
        return {}
    per_seq = 1.0 + snap.accepted_tokens / snap.drafts if snap.drafts > 0 else 1.0
    step_s = snap.tpot_sum / done * per_seq
    steps = serve_s / step_s * pods / 2.0
    seq_steps = tokens / per_seq / 2.0
    return {band_of(load): (steps, steps * step_s, seq_steps, tokens / 2.0, snap.draft_tokens / 2.0,
                            snap.accepted_tokens / 2.0, done / 2.0)}


def _method(profile: Profile, n: int) -> str:
    """What the track's pods run: N = 0 is no speculation (vLLM without a speculative config)."""
    return profile.method if n > 0 else OFF


def _copy(schedule: Schedule | None) -> Schedule | None:
    return [list(map(int, row)) for row in schedule] if schedule else None
