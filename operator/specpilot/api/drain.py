"""The drain budget in force when spec.engine.drainSeconds is left out: derived from the serving pods' measured
p99 end-to-end request latency (vLLM's `vllm:e2e_request_latency_seconds` histogram). Pure; the controller
measures (controller/drain.py), render mounts the result (render/drain.py), the runtime obeys it
(runtime/specpilot_runtime/drain.py). docs/operator.md, "Drain time from the measured p99".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from specpilot_runtime.engine_config import MAX_SHUTDOWN_TIMEOUT_S

# The drain until one is measured (and spec.engine.drainSeconds' old default): long enough for a few thousand
# tokens of one request at a slow decode speed.
DEFAULT_DRAIN_SECONDS = 120
# The drain covers this multiple of the p99: requests in flight at SIGTERM may have just started, and the
# tail past the p99 needs room too. A safety bound chosen here, not a measured quantity.
DRAIN_P99_FACTOR = 2.0
# Added to the scaled p99: the queueing before a request's first step, which the e2e histogram counts only once
# the pod is busy (seconds).
DRAIN_MARGIN_S = 10
# The shortest automatic drain: Kubernetes' default terminationGracePeriodSeconds (30 s), so automatic never
# gives a pod less than Kubernetes itself would.
MIN_AUTO_DRAIN_S = 30
# The longest automatic drain: spec.engine.drainSeconds' own bound (engine_config.MAX_SHUTDOWN_TIMEOUT_S). In
# automatic mode vLLM's --shutdown-timeout and the pod's grace period are rendered at this constant, so that a
# new drain rolls no pod; the runtime cuts the drain to the value in force.
MAX_AUTO_DRAIN_S = MAX_SHUTDOWN_TIMEOUT_S
# Finished requests before a p99 counts: below 100 the p99 is the single slowest request or two.
MIN_DRAIN_REQUESTS = 100
# The drain in force moves only when the proposal differs from it by more than this share: the ConfigMap and
# the Event follow real changes, not a histogram's wobble.
DRAIN_HYSTERESIS = 0.25
# Buckets one histogram may have: vLLM's e2e histogram has 22; a pod is not trusted with more.
MAX_BUCKETS = 64
# Requests status.drain reports at most: a JSON number every client reads exactly.
MAX_REQUESTS = 2 ** 53
# The p99 status.drain says again when it moves by more than this share (or the requests doubled), so that a
# status is not rewritten for every scrape.
P99_REFRESH = 0.1

DrainSource = Literal["spec", "default", "measured"]  # models.DrainStatus.source


def checked_buckets(buckets: Iterable[tuple[float, float]]) -> list[tuple[float, float]] | None:
    """Cumulative (le, count) pairs sorted by le, or None when they are no latency histogram: more than
    MAX_BUCKETS, an le that is NaN, negative or repeated, a count that is not finite, negative or smaller than a
    lower bucket's, or no +Inf bucket (the total is unknown without it)."""
    out: list[tuple[float, float]] = []
    for i, (le, count) in enumerate(buckets):
        if i >= MAX_BUCKETS:
            return None
        try:
            le, count = float(le), float(count)
        except (TypeError, ValueError):
            return None
        if math.isnan(le) or le < 0 or not math.isfinite(count) or count < 0:
            return None
        out.append((le, count))
    out.sort()
    if not out or out[-1][0] != math.inf:
        return None
    for (le_a, count_a), (le_b, count_b) in zip(out, out[1:]):
        if le_a == le_b or count_b < count_a:
            return None
    return out


def p99_from_histogram(buckets: Iterable[tuple[float, float]], q: float = 0.99) -> float | None:
    """The q-quantile (seconds) of a cumulative Prometheus histogram, interpolated linearly inside its bucket
    as histogram_quantile does (the first bucket starts at 0). None for an empty or invalid histogram
    (checked_buckets). Where it falls in the +Inf bucket the answer is math.inf, not histogram_quantile's
    largest finite bound: that is only a lower bound, and a drain must not be cut by it."""
    rows = checked_buckets(buckets)
    if rows is None or rows[-1][1] <= 0:
        return None
    rank = q * rows[-1][1]
    below_le, below_count = 0.0, 0.0
    for le, count in rows:
        if count >= rank:  # the first such bucket: below_count < rank <= count
            if le == math.inf:
                return math.inf
            return below_le + (le - below_le) * (rank - below_count) / (count - below_count)
        below_le, below_count = le, count
    return math.inf  # unreachable: the +Inf bucket holds every request


def requests_in(buckets: Iterable[tuple[float, float]]) -> int:
    """Finished requests a histogram counts (its +Inf bucket); 0 when it is invalid."""
    rows = checked_buckets(buckets)
    return min(int(rows[-1][1]), MAX_REQUESTS) if rows else 0


def proposal_s(p99_s: float) -> int:
    """The drain the p99 asks for: DRAIN_P99_FACTOR x p99 + DRAIN_MARGIN_S, rounded up, within the bounds."""
    if not math.isfinite(p99_s):
        return MAX_AUTO_DRAIN_S
    return min(max(math.ceil(DRAIN_P99_FACTOR * max(p99_s, 0.0) + DRAIN_MARGIN_S), MIN_AUTO_DRAIN_S),
               MAX_AUTO_DRAIN_S)


def next_drain(current: int, p99_s: float | None, requests: int) -> tuple[int, str]:
    """The drain in force after a measurement, and why: `current` until MIN_DRAIN_REQUESTS requests finished,
    and while the proposal is within DRAIN_HYSTERESIS of it."""
    if p99_s is None or math.isnan(p99_s) or requests < MIN_DRAIN_REQUESTS:
        return current, f"{requests} requests finished, fewer than {MIN_DRAIN_REQUESTS}: {current} s kept"
    proposal = proposal_s(p99_s)
    p99_text = f"p99 {p99_s:.3g} s" if math.isfinite(p99_s) else "p99 above the histogram's largest bucket"
    if abs(proposal - current) <= DRAIN_HYSTERESIS * current:
        return current, f"{p99_text} over {requests} requests asks {proposal} s, within " \
                        f"{DRAIN_HYSTERESIS:.0%} of {current} s: kept"
    return proposal, f"{p99_text} over {requests} requests: {DRAIN_P99_FACTOR:g} x p99 + {DRAIN_MARGIN_S} s " \
                     f"within [{MIN_AUTO_DRAIN_S}, {MAX_AUTO_DRAIN_S}] s"


@dataclass(frozen=True)
class Drain:
    """status.drain: the drain in force and where it comes from; the last p99 measured and over how many
    requests (None before a measurement)."""

    seconds: int
    source: DrainSource
    p99_s: float | None = None
    requests: int | None = None

    def to_status(self) -> dict[str, Any]:
        """status.drain as a merge patch: a None removes the key."""
        return {"seconds": self.seconds, "source": self.source, "p99Seconds": self.p99_s, "requests": self.requests}

    def said_by(self, status_drain: Any) -> bool:
        """Whether status.drain as stored (a merge patch's None removed the key) already says this."""
        def kept(d: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in d.items() if v is not None}
        return isinstance(status_drain, dict) and kept(status_drain) == kept(self.to_status())

    def worth_writing(self, before: Drain) -> bool:
        """Whether status.drain should be written over `before`: the drain or its source changed, or the p99
        moved by more than P99_REFRESH, or the requests doubled."""
        if (self.seconds, self.source) != (before.seconds, before.source):
            return True
        if (self.p99_s is None) != (before.p99_s is None) or (self.requests is None) != (before.requests is None):
            return True
        if self.p99_s is not None and before.p99_s is not None and \
                abs(self.p99_s - before.p99_s) > P99_REFRESH * before.p99_s:
            return True
        return self.requests is not None and before.requests is not None and self.requests >= 2 * before.requests > 0


def _whole(value: Any, low: int, high: int) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high else None


def in_force(spec_seconds: int | None, status_drain: Any) -> Drain:
    """The drain in force: spec.engine.drainSeconds when set; else the one status.drain says was measured
    (read as hostile: a value the operator never writes counts as none); else DEFAULT_DRAIN_SECONDS."""
    old = status_drain if isinstance(status_drain, dict) else {}
    p99 = old.get("p99Seconds")
    p99 = float(p99) if isinstance(p99, (int, float)) and not isinstance(p99, bool) and math.isfinite(p99) \
        and 0 <= p99 <= 1e9 else None
    requests = _whole(old.get("requests"), 0, MAX_REQUESTS)
    if spec_seconds is not None:
        return Drain(spec_seconds, "spec")
    seconds = _whole(old.get("seconds"), MIN_AUTO_DRAIN_S, MAX_AUTO_DRAIN_S)
    if old.get("source") == "measured" and seconds is not None:
        return Drain(seconds, "measured", p99, requests)
    return Drain(DEFAULT_DRAIN_SECONDS, "default", p99, requests)


def measured(before: Drain, p99_s: float | None, requests: int) -> tuple[Drain, str]:
    """status.drain after a measurement of `requests` finished requests with this p99 (automatic mode only),
    and the reason: measured once MIN_DRAIN_REQUESTS requests finished, the drain following next_drain."""
    seconds, why = next_drain(before.seconds, p99_s, requests)
    enough = p99_s is not None and requests >= MIN_DRAIN_REQUESTS
    shown = p99_s if p99_s is not None and math.isfinite(p99_s) else None
    return Drain(seconds, "measured" if enough else before.source, shown, requests), why
