"""What the demo shows, read from `status.tuning` and the profile (pure).

Goodput here is output tokens per second per pod on the engines' clock at one reference load: the mean
number of sequences a stable pod served per window (per-pod goodput grows with load, and a pod serves
fewer sequences while a canary takes its share, so windows are compared at one load). Measured = tokens
per sequence-second of a window (tokens per step / step time, from the tuner's window records) times that
load; predicted = the newest plan's expected gain over the N it was made at, applied to that N's
measurement; profile = the profile's survival curve and step-time table at that load (the truth).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean
from typing import Any

from specpilot_harness.sim.profile import Profile

from specpilot.controller.tuning_metrics import latest_plan

DEFAULT_LOAD = 4.0


def records(tuning: dict[str, Any], track: str | None = None) -> list[dict[str, Any]]:
    return [r for r in tuning.get("records") or [] if track is None or r["track"] == track]


def reference_load(tuning: dict[str, Any]) -> float:
    """Mean concurrent sequences per stable pod over the windows seen."""
    loads = [r["b"] for r in records(tuning, "stable")]
    return mean(loads) if loads else DEFAULT_LOAD


def survival(record: dict[str, Any]) -> list[float]:
    """S_1..S_N of one window: accepted at position k over drafts."""
    return [a / record["drafts"] for a in record["acc"]] if record["drafts"] > 0 else []


def latest(tuning: dict[str, Any], track: str) -> dict[str, Any] | None:
    found = records(tuning, track)
    return found[-1] if found else None


def observed(tuning: dict[str, Any]) -> dict[int, float]:
    """Measured goodput per pod at the reference load, for each N that served a window (either track)."""
    load = reference_load(tuning)
    by_n: dict[int, list[float]] = defaultdict(list)
    for r in records(tuning):
        if r["t"]:
            by_n[r["n"]].append(r["l"] / r["t"])
    return {n: load * mean(v) for n, v in sorted(by_n.items())}


def predicted(tuning: dict[str, Any]) -> dict[int, float]:
    """The newest plan's goodput per candidate N, scaled by the measurement at the N it was made at."""
    plan, measured = latest_plan(tuning.get("history") or []), observed(tuning)
    if plan is None or plan[0] not in measured:
        return {}
    base = measured[plan[0]]
    return {n: base * (1 + g / 100) for n, g in sorted(plan[1].items())}


def truth(profile: Profile, load: float) -> dict[int, float]:
    """The profile's goodput per pod at every N at `load` sequences per pod."""
    b = max(1, round(load))
    return {n: 1000 * profile.goodput_at(n, b) for n in range(profile.max_n + 1)}


def best(values: dict[int, float]) -> int:
    return max(values, key=values.__getitem__)
