"""API faults on purpose: rules that make the sandbox's API server answer as a struggling real one does.

A rule matches requests by client (User-Agent prefix; default the operator's, `specpilot/`, so kubectl
and load generators in a test are not hit), method, path substring and watch-ness; while active (a
schedule relative to when the rules were installed) it fires on a fraction `rate` of them, at most
`count` times (rules added later keep their own schedule):

- `error`: answer `status` without touching the store: 409 Conflict (optimistic concurrency), 429
  TooManyRequests with `Retry-After`, 5xx (InternalError, ServiceUnavailable);
- `latency`: hold the request `latency_s` seconds, then serve it;
- `gone`: at `after_s` the log is "compacted" as etcd does: watches in progress end with `ERROR 410
  Expired`, and a watch that resumes from a resourceVersion older than that moment gets the same (a fresh
  list and a watch from its resourceVersion work again);
- `restart`: at `after_s` the server closes its listener and every connection (watches included), stays
  away `down_s` seconds and comes back on the same port with its state (the store) kept.

Every matched request's time is recorded per rule, so a test can count requests per second during a
burst (a client without backoff shows up as a hot loop). Pure decisions here; server.py does the I/O.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = frozenset({"error", "latency", "gone", "restart"})
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
REASONS = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 502: "BadGateway",
           503: "ServiceUnavailable", 504: "Timeout"}
MAX_TIMES = 100_000  # recorded request times per rule: a bound for long soaks


@dataclass
class Fault:
    kind: str
    status: int = 500
    agent: str = "specpilot/"
    methods: tuple[str, ...] = ()  # empty: any; "WRITE" stands for POST, PUT, PATCH and DELETE
    path: str = ""  # substring of the request path, e.g. "/status" or "/namespaces/team-a/"
    watch: bool | None = None  # True: only watches; False: never watches; None: both
    rate: float = 1.0
    count: int | None = None
    after_s: float = 0.0
    for_s: float | None = None
    retry_after_s: int = 1
    latency_s: float = 2.0
    down_s: float = 2.0
    compacted_rv: int | None = None  # `gone`: the resourceVersion the log was compacted at
    installed: float = field(default_factory=time.monotonic)
    injected: int = 0
    times: list[float] = field(default_factory=list)  # seconds since install of every matched request

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {sorted(KINDS)}")
        if self.kind == "error" and not 400 <= self.status < 600:
            raise ValueError(f"fault status {self.status} is not an HTTP error")
        self.methods = tuple(m.upper() for m in self.methods)

    def active(self, now: float) -> bool:
        elapsed = now - self.installed
        started = elapsed >= self.after_s
        ended = self.for_s is not None and elapsed >= self.after_s + self.for_s
        exhausted = self.count is not None and self.injected >= self.count
        return started and not ended and not exhausted

    def matches(self, method: str, path: str, agent: str, watching: bool, since: int | None) -> bool:
        """`since`: the resourceVersion a watch resumes from (None: not a resuming watch)."""
        wanted = {m for want in self.methods for m in (WRITE_METHODS if want == "WRITE" else {want})}
        if self.kind == "gone" and (since is None or self.compacted_rv is None or since > self.compacted_rv):
            return False
        return (agent.startswith(self.agent) and (not wanted or method in wanted) and self.path in path
                and (self.watch is None or self.watch == watching))

    def report(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Injection:
    """What to do to one request: hold it `delay_s`, then answer `status` (None: serve it)."""

    delay_s: float = 0.0
    status: int | None = None
    reason: str = ""
    retry_after_s: int | None = None


def parse(rules: list[dict[str, Any]]) -> list[Fault]:
    known = set(Fault.__dataclass_fields__) - {"injected", "times", "compacted_rv", "installed"}
    for rule in rules:
        unknown = set(rule) - known
        if unknown:
            raise ValueError(f"unknown fault fields {sorted(unknown)}; known: {sorted(known)}")
    return [Fault(**rule) for rule in rules]


class FaultInjector:
    def __init__(self, seed: int | None = None) -> None:
        self.rules: list[Fault] = []
        self.rng = random.Random(seed)

    def decide(self, method: str, path: str, agent: str, watching: bool, since: int | None) -> Injection:
        """The injection for one request (rules in order; latency adds up, the first error answers)."""
        now, delay = time.monotonic(), 0.0
        for rule in self.rules:
            if rule.kind == "restart" or not rule.active(now) \
                    or not rule.matches(method, path, agent, watching, since):
                continue
            if len(rule.times) < MAX_TIMES:
                rule.times.append(round(now - rule.installed, 3))
            if self.rng.random() >= rule.rate:
                continue
            rule.injected += 1
            if rule.kind == "latency":
                delay += rule.latency_s
            elif rule.kind == "gone":
                return Injection(delay, 410, "Expired")
            else:
                retry_after = rule.retry_after_s if rule.status == 429 else None
                return Injection(delay, rule.status, REASONS.get(rule.status, "InternalError"), retry_after)
        return Injection(delay)

    def report(self) -> dict[str, Any]:
        return {"faults": [r.report() for r in self.rules]}
