"""What the demo shows, read from `status.tuning` and the profile (pure).

Goodput here is output tokens per second per pod on the engines' clock at one reference load: the mean
number of sequences a stable pod served per window (per-pod goodput grows with load, and a pod serves
fewer sequences while a canary takes its share, so windows are compared at one load). Measured = tokens
per sequence-second of a window (tokens per step / step time, from the tuner's window records) times that
load; predicted = the newest plan's expected gain over the N it was made at, applied to that N's
measurement; profile = the profile's survival curve and step-time table at that load (the truth).

A track serving a batch-size schedule steps at several K, so its windows are no point of goodput against N
and `observed` leaves them out. For a profile with several load levels, `mix_truth` gives the profile's
goodput per level for the default N, the best single N over the mix and what the stable track serves (its N,
or K = schedule_k(rows, N, level) per level under a schedule), and their totals over the mix.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import mean
from typing import Any

from specpilot_harness.sim.profile import Profile
from specpilot_runtime.speculative import schedule_k

from specpilot.controller.tuning.metrics import latest_plan
from specpilot.tuning.schedule import schedule_text

DEFAULT_LOAD = 4.0


def records(tuning: dict[str, Any], track: str | None = None) -> list[dict[str, Any]]:
    return [r for r in tuning.get("records") or [] if track is None or r["track"] == track]


def reference_load(tuning: dict[str, Any]) -> float:
    """Mean concurrent sequences per stable pod over the windows seen."""
    loads = [r["b"] for r in records(tuning, "stable")]
    return mean(loads) if loads else DEFAULT_LOAD


def survival(record: dict[str, Any]) -> list[float | None]:
    """S_1..S_N of one window: accepted at position k over drafts (over the drafts that reached position k
    when the window has that counter, "dr": a track serving a schedule drafts fewer than N at some loads;
    None where none did)."""
    if record["drafts"] <= 0:
        return []
    reached = record.get("dr") or [record["drafts"]] * len(record["acc"])
    return [a / d if d > 0 else None for a, d in zip(record["acc"], reached)]


def latest(tuning: dict[str, Any], track: str) -> dict[str, Any] | None:
    found = records(tuning, track)
    return found[-1] if found else None


def observed(tuning: dict[str, Any], time_scale: float = 1.0) -> dict[int, float]:
    """Measured goodput per pod at the reference load, for each N that served a window (either track).
    The engines report step times in wall seconds (engine seconds / their time scale); `time_scale` turns
    the rate back to the engine clock the profile's truth is on."""
    load = reference_load(tuning) / time_scale
    by_n: dict[int, list[float]] = defaultdict(list)
    for r in records(tuning):
        if r["t"] and "dr" not in r:  # "dr": a track serving a schedule, no single N
            by_n[r["n"]].append(r["l"] / r["t"])
    return {n: load * mean(v) for n, v in sorted(by_n.items())}


def predicted(tuning: dict[str, Any], time_scale: float = 1.0) -> dict[int, float]:
    """The newest plan's goodput per candidate N, scaled by the measurement at the N it was made at."""
    plan, measured = latest_plan(tuning.get("history") or []), observed(tuning, time_scale)
    if plan is None or plan[0] not in measured:
        return {}
    base = measured[plan[0]]
    return {n: base * (1 + g / 100) for n, g in sorted(plan[1].items())}


def truth(profile: Profile, load: float, exact: bool = False) -> dict[int, float]:
    """The profile's goodput per pod at every N at `load` sequences per pod: rounded to a whole batch, or
    `exact`ly that mean load (the step of the nearest whole batch), as the measurements are."""
    b = load if exact else max(1, round(load))
    return {n: 1000 * profile.goodput_at(n, b) for n in range(profile.max_n + 1)}


def best(values: dict[int, float]) -> int:
    return max(values, key=values.__getitem__)


def served_goodput(profile: Profile, n: int, rows: list[list[int]] | None, load: int) -> float:
    """The profile's goodput per pod (tokens/s, engine clock) at `load` sequences of a track started at N
    serving `rows` (None: N at every batch size): K = schedule_k drafted from the curve at N, t(K, load)."""
    k = schedule_k(rows, n, load) if rows else n
    return 1000 * load * (1 + sum(profile.survival_at(n)[:k])) / profile.step_time(k, load)


@dataclass(frozen=True)
class Series:
    label: str  # "default N=3", "best single N=3", "served 1-5:6 6+:2 (N=6)"
    n: int
    rows: list[list[int]] | None
    by_level: dict[int, float]  # goodput per pod at each load level
    k_by_level: dict[int, int]  # tokens drafted per sequence at each level
    total: float  # over the load mix (the profile's weights)


@dataclass(frozen=True)
class MixTruth:
    levels: tuple[int, ...]
    weights: dict[int, float]
    default: Series
    single: Series
    served: Series
    best_k: dict[int, int]  # the best K at each level alone
    oracle: Series  # the best K at every level: the most a schedule can serve here

    def gain(self, series: Series, over: Series) -> float:
        return series.total / over.total - 1


def mix_truth(profile: Profile, default_n: int, served_n: int, rows: list[list[int]] | None) -> MixTruth:
    """Profile truth per load level (see the module docstring)."""
    levels = tuple(sorted(b for b, w in profile.concurrency.items() if w > 0))
    weights = {b: profile.concurrency[b] for b in levels}

    def series(label: str, n: int, r: list[list[int]] | None) -> Series:
        by_level = {b: served_goodput(profile, n, r, b) for b in levels}
        ks = {b: schedule_k(r, n, b) if r else n for b in levels}
        return Series(label, n, r, by_level, ks, sum(weights[b] * by_level[b] for b in levels))

    single = profile.oracle_n()
    served = f"served {schedule_text(rows)} (N={served_n})" if rows else f"served N={served_n}"
    best_k = {b: max(range(profile.max_n + 1), key=lambda k: profile.goodput_at(k, b)) for b in levels}
    by_level = {b: 1000 * profile.goodput_at(k, b) for b, k in best_k.items()}
    oracle = Series("best K per level: " + ", ".join(f"{k} at {b}" for b, k in best_k.items()),
                    max(best_k.values()), None, by_level, best_k, sum(weights[b] * by_level[b] for b in levels))
    return MixTruth(levels, weights, series(f"default N={default_n}", default_n, None),
                    series(f"best single N={single}", single, None), series(served, served_n, rows), best_k,
                    oracle)
