"""Mixed load in the demo (pure): a profile with more than one load level is served under load that moves
between its levels, by a deployment in schedule mode.

The profile's levels are sequences per pod. The demo runs MIXED_REPLICAS stable pods and a canary that
replaces one of them while it runs (`canary.mode: replace`), so the pods serving stay MIXED_REPLICAS and a
phase of `level x MIXED_REPLICAS` clients puts about `level` sequences on each pod whether a canary runs or
not (with a surge canary, each pod's load would halve while it runs). The clients are capped (MAX_CLIENTS:
every engine step streams a chunk per sequence, and this is one small machine); above the cap every level
is scaled down alike. The phases cycle in the order of the levels, each lasting its weight's share of a
cycle in which the rarest level gets PHASE_WINDOWS analysis windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specpilot_harness.load.runner import LoadPhase
from specpilot_harness.sim.profile import Profile

from .readings import served_goodput

MAX_CLIENTS = 64
PHASE_WINDOWS = 4
MIXED_REPLICAS = 2


def is_mixed(profile: Profile) -> bool:
    """More than one load level: the demo cycles them and tunes in schedule mode."""
    return sum(1 for w in profile.concurrency.values() if w > 0) > 1


@dataclass(frozen=True)
class MixPlan:
    levels: tuple[int, ...]  # the profile's load levels, sequences per pod, ascending
    phases: tuple[LoadPhase, ...]  # one per level, same order
    pods: int  # pods serving at once (stable + canary)
    scale: float  # clients per (level x pods): 1 unless the cap bit

    def per_pod(self, index: int) -> float:
        """Sequences per pod that phase `index` puts on each pod."""
        return self.phases[index].concurrency / self.pods

    def label(self, index: int, left_s: float | None = None) -> str:
        """"phase 2/2: 64 clients (32 per pod, level 32), 7 s left"."""
        p = self.phases[index]
        text = f"phase {index + 1}/{len(self.phases)}: {p.concurrency} clients ({self.per_pod(index):g} per pod"
        if self.scale != 1.0:
            text += f", the profile's level {self.levels[index]} scaled by {self.scale:.2g}"
        text += ")"
        if left_s is not None:
            text += f", {left_s:.0f} s left"
        return text


def mix_plan(profile: Profile, window_s: float, pods: int = MIXED_REPLICAS, max_clients: int = MAX_CLIENTS,
             phase_windows: int = PHASE_WINDOWS) -> MixPlan:
    """The load phases that play the profile's load mix (see the module docstring)."""
    if not profile.concurrency:
        raise ValueError(f"profile {profile.name!r} has no load levels (concurrency)")
    if window_s <= 0 or pods < 1 or max_clients < 1 or phase_windows < 1:
        raise ValueError("window_s, pods, max_clients and phase_windows must be positive")
    levels = tuple(sorted(b for b, w in profile.concurrency.items() if w > 0))
    scale = min(1.0, max_clients / (levels[-1] * pods))
    weights = [profile.concurrency[b] for b in levels]
    cycle = phase_windows * window_s / min(weights)
    phases = tuple(LoadPhase(max(1, round(b * pods * scale)), round(w * cycle, 1)) for b, w in zip(levels, weights))
    return MixPlan(levels, phases, pods, scale)


def spread_goodput(profile: Profile, plan: MixPlan, n: int, rows: list[list[int]] | None) -> float:
    """Goodput per pod over the mix (tokens/s, profile truth) as the demo's load spreads over the pods: each
    request goes to a random pod, so a phase of C clients puts B ~ Binomial(C, 1/pods) sequences on a pod
    (about; a faster pod holds fewer), each batch size drafting its own K under a schedule. The profile's
    levels are exact batch sizes; this is what the demo's pods see instead."""
    total = 0.0
    for i, b in enumerate(plan.levels):
        c, p = plan.phases[i].concurrency, 1.0 / plan.pods
        level = sum(math.comb(c, k) * p ** k * (1 - p) ** (c - k) * served_goodput(profile, n, rows, k)
                    for k in range(1, c + 1))
        total += profile.concurrency[b] * level
    return total
