"""From per-pod scrapes to per-track window deltas (pure).

vLLM's counters are cumulative per pod, so a window's counts are the difference of two scrapes of the
same pod (`vllm_metrics.delta`, which survives restarts), summed over the pods of a track. The previous
scrape of each pod is kept here, in memory: after an operator restart the first scrape only
re-establishes it, so at most the window in progress is lost (the tuner's own state is in the status).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specpilot_runtime.vllm_metrics import Snapshot, delta

from .pods import PodScrape

# Snapshot fields that add up across pods (counters of a window, and the running/waiting gauges).
_SUMMED = ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens", "tpot_sum", "tpot_count",
           "running", "waiting", "prompt_tokens", "preemptions", "queue_time_sum", "queue_time_count",
           "decode_time_sum", "request_tokens_sum", "request_tokens_count")


def _add_histograms(a: tuple[tuple[float, float], ...],
                    b: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    """Two pods' cumulative (le, count) buckets as one: at the bounds both have, where each count is exact
    (pods of two vLLM versions may bucket differently; +Inf they share). A pod that counted nothing adds
    nothing."""
    if not a or not b:
        return a or b
    theirs = dict(b)
    return tuple((le, count + theirs[le]) for le, count in a if le in theirs)


def _add_vectors(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
    return tuple(x + (shorter[i] if i < len(shorter) else 0.0) for i, x in enumerate(longer))


def add(a: Snapshot, b: Snapshot) -> Snapshot:
    """Two pods' window deltas as one track's; positions add up where both pods have them. The drafted-
    per-position counter is the track's only when every pod exports it: a pod without it would add
    accepted tokens and no drafted ones, so acceptance read off the sum would be too high."""
    summed = {name: getattr(a, name) + getattr(b, name) for name in _SUMMED}
    drafted = None if a.drafted_per_pos is None or b.drafted_per_pos is None \
        else _add_vectors(a.drafted_per_pos, b.drafted_per_pos)
    return replace(a, **summed,
                   accepted_per_pos=_add_vectors(a.accepted_per_pos, b.accepted_per_pos),
                   drafted_per_pos=drafted,
                   scrape_time=max(a.scrape_time, b.scrape_time),
                   kv_cache_usage=max(a.kv_cache_usage, b.kv_cache_usage),
                   reset=a.reset or b.reset, extra={},
                   ttft_buckets=_add_histograms(a.ttft_buckets, b.ttft_buckets),
                   tpot_buckets=_add_histograms(a.tpot_buckets, b.tpot_buckets),
                   switchback={key: _add_vectors(a.switchback.get(key, ()), b.switchback.get(key, ()))
                               for key in {**a.switchback, **b.switchback}})


@dataclass(frozen=True)
class TrackDelta:
    """One track's window at one N: counts summed over the pods that were scraped at both ends."""

    n: int
    delta: Snapshot
    pods: int  # pods that contributed a delta
    restarts: int  # of those, pods whose counters restarted inside the window


@dataclass
class WindowCounter:
    """Previous scrape per pod uid; `advance` turns a new round of scrapes into per-track deltas."""

    previous: dict[str, Snapshot] = field(default_factory=dict)
    started_at: float | None = None  # wall time of the previous round (None before the first)

    def advance(self, scrapes: list[PodScrape], now: float) -> tuple[dict[tuple[str, int], TrackDelta], float | None]:
        """Deltas by (track, N) since the previous round, and its length in seconds (None on the first
        round, which only sets the baseline). Failed scrapes must be dropped by the caller first."""
        out: dict[tuple[str, int], TrackDelta] = {}
        for s in scrapes:
            assert s.snapshot is not None
            prev = self.previous.get(s.target.uid)
            if prev is not None:
                d = delta(prev, s.snapshot)
                key = (s.target.track, s.target.n)
                was = out.get(key)
                out[key] = TrackDelta(s.target.n, d if was is None else add(was.delta, d),
                                      1 + (was.pods if was else 0), int(d.reset) + (was.restarts if was else 0))
        self.previous = {s.target.uid: s.snapshot for s in scrapes if s.snapshot is not None}
        elapsed = None if self.started_at is None else now - self.started_at
        self.started_at = now
        return out, elapsed

    def reset(self) -> None:
        """Forget every baseline: the next round starts a new window from scratch."""
        self.previous.clear()
        self.started_at = None

