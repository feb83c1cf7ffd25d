"""What users of LLM serving judge a track by besides its decode speed, read off one window's counter deltas
(pure): the time-to-first-token and time-per-output-token percentiles, requests waiting, preemptions, and
the token-weighted time per output token.

Every number comes from a pod and is hostile: a histogram that is not one (api/drain.py's `checked_buckets`),
a count that is negative or not finite, gives None ("not measured"), never a number that steers a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from specpilot_runtime.vllm_metrics import Snapshot

from specpilot.api.drain import checked_buckets, p99_from_histogram

from .constants import LATENCY_CEILING_S, MAX_LOAD, MAX_MAGNITUDE


def percentile_s(buckets: Iterable[tuple[float, float]], q: float) -> float | None:
    """The q-quantile (seconds) of one window's (le, count) buckets, interpolated inside its bucket as
    Prometheus' histogram_quantile does; None when the window counted no request or the buckets are no
    histogram. Where it falls in the +Inf bucket it is LATENCY_CEILING_S: above every finite bound, so above
    any SLO the spec allows, and a number a status can hold."""
    if not 0.0 < q < 1.0:
        return None
    value = p99_from_histogram(buckets, q)
    return None if value is None else min(value, LATENCY_CEILING_S)


def share_within(buckets: Iterable[tuple[float, float]], limit_s: float | None) -> float | None:
    """The share of one window's requests whose latency was at most `limit_s` (an SLO), interpolated inside its
    bucket as `percentile_s`; None without a limit, a request or a histogram. A request in the +Inf bucket
    never meets it: its latency is only known to be above the largest bound."""
    rows = checked_buckets(buckets)
    if limit_s is None or rows is None or rows[-1][1] <= 0:
        return None
    below_le, below_count = 0.0, 0.0
    for le, count in rows:
        if le == math.inf:
            break
        if limit_s <= le:
            return (below_count + (count - below_count) * (limit_s - below_le) / (le - below_le)) / rows[-1][1]
        below_le, below_count = le, count
    return below_count / rows[-1][1]


def _count(x: float) -> float | None:
    return x if math.isfinite(x) and 0.0 <= x <= MAX_MAGNITUDE else None


def waiting_per_pod(d: Snapshot, window_s: float, pods: int) -> float | None:
    """Mean requests waiting for a batch slot per pod over the window. By Little's law, the seconds the
    window's requests spent queued over the window's seconds; pods that do not export vLLM's queue-time
    histogram give the waiting gauge as last scraped (one sample: noisier, not biased)."""
    if not window_s > 0 or not math.isfinite(window_s):
        return None
    queued, finished, gauge = _count(d.queue_time_sum), _count(d.queue_time_count), _count(d.waiting)
    if finished:
        mean = None if queued is None else queued / window_s
    else:
        mean = gauge
    return None if mean is None else min(mean / max(pods, 1), MAX_LOAD)


def preemptions_per_pod(d: Snapshot, pods: int) -> float | None:
    """Requests the engines preempted (to free KV blocks) in the window, per pod."""
    count = _count(d.preemptions)
    return None if count is None else count / max(pods, 1)


def token_weighted_tpot(d: Snapshot) -> float | None:
    """Seconds per output token weighted by tokens: the decode seconds of the window's finished requests over
    the tokens they decoded after their first (a request's first token is its TTFT's). The mean of vLLM's
    per-request TPOT weighs a 3-token answer as much as a 3,000-token one; this is what a token costs. None
    without vLLM's decode-time and generation-token histograms, or when no request decoded a second token."""
    decode, tokens, requests = _count(d.decode_time_sum), _count(d.request_tokens_sum), _count(d.request_tokens_count)
    if decode is None or tokens is None or requests is None or tokens - requests <= 0:
        return None
    return min(decode / (tokens - requests), LATENCY_CEILING_S)
