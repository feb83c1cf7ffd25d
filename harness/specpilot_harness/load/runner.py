"""The load loop: C concurrent clients sending streamed task prompts until the time or count runs out.

Each request picks a task and an endpoint at random, as a Service picks a pod per connection, so
traffic splits across stable and canary pods by their replica ratio. Timing is measured client-side
from the stream: TTFT to the first token, TPOT over the rest.

Load that moves: with `phases`, ((C1, S1), (C2, S2), ...), C1 clients send for S1 seconds, then C2 for
S2, and so on, cycled until the duration ends. A client above the phase's count sends nothing new; its
request in flight finishes (load falls as requests end, as it does when users leave).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass

import httpx

from .endpoints import Endpoint, Targets
from .prompts import Task


ERROR_PAUSE_S = 0.1
IDLE_POLL_S = 0.25  # how often a client above the phase's count looks whether the phase changed


class PhaseError(ValueError):
    """A phases spec that cannot drive load; the message names the flag and the bad part."""


@dataclass(frozen=True)
class LoadPhase:
    concurrency: int  # clients sending during the phase
    seconds: float  # how long the phase lasts


def parse_phases(text: str, flag: str = "--phases") -> tuple[LoadPhase, ...]:
    """"C:S,C:S,...": C clients for S seconds each, e.g. "2:30,32:30"; PhaseError names `flag`."""
    phases = []
    for part in text.split(","):
        item = part.strip()
        c, sep, sec = item.partition(":")
        if not sep:
            raise PhaseError(f"{flag} {item!r}: expected CLIENTS:SECONDS, e.g. 2:30,32:30")
        try:
            concurrency = int(c)
        except ValueError:
            raise PhaseError(f"{flag} {item!r}: clients must be a whole number, got {c.strip()!r}") from None
        try:
            seconds = float(sec)
        except ValueError:
            raise PhaseError(f"{flag} {item!r}: seconds must be a number, got {sec.strip()!r}") from None
        if concurrency < 1:
            raise PhaseError(f"{flag} {item!r}: clients must be at least 1")
        if not 0 < seconds < float("inf"):
            raise PhaseError(f"{flag} {item!r}: seconds must be positive")
        phases.append(LoadPhase(concurrency, seconds))
    return tuple(phases)


def phases_text(phases: tuple[LoadPhase, ...]) -> str:
    """The spec `parse_phases` reads back: "2:30,32:30"."""
    return ",".join(f"{p.concurrency}:{p.seconds:g}" for p in phases)


def phase_at(phases: tuple[LoadPhase, ...], elapsed: float) -> tuple[int, float]:
    """(index of the phase running `elapsed` seconds after the start, seconds left in it), cycling."""
    cycle = sum(p.seconds for p in phases)
    t = max(0.0, elapsed) % cycle
    for i, p in enumerate(phases):
        if t < p.seconds:
            return i, p.seconds - t
        t -= p.seconds
    return len(phases) - 1, 0.0  # float rounding at the cycle's end


@dataclass(frozen=True)
class LoadConfig:
    concurrency: int  # clients; with phases, ignored in favour of each phase's count
    duration_s: float
    max_tokens: int = 256
    max_requests: int | None = None
    timeout_s: float = 60.0
    model: str | None = None  # default: what each endpoint's /v1/models serves
    seed: int | None = None
    phases: tuple[LoadPhase, ...] = ()  # cycled (clients, seconds) until duration_s ends

    @property
    def peak_concurrency(self) -> int:
        return max(p.concurrency for p in self.phases) if self.phases else self.concurrency

    def concurrency_at(self, elapsed: float) -> int:
        """Clients that send `elapsed` seconds after the start."""
        return self.phases[phase_at(self.phases, elapsed)[0]].concurrency if self.phases else self.concurrency


class LoadClock:
    """When the load started (monotonic), for whoever shows which phase is running; set by run_load."""

    def __init__(self) -> None:
        self.started: float | None = None

    def phase(self, config: LoadConfig, now: float | None = None) -> tuple[int, float] | None:
        """(phase index, seconds left in it), or None before the start or without phases."""
        if self.started is None or not config.phases:
            return None
        return phase_at(config.phases, (time.monotonic() if now is None else now) - self.started)


@dataclass(frozen=True)
class RequestResult:
    endpoint: str
    kind: str
    ok: bool
    completion_tokens: int = 0
    ttft_s: float | None = None
    tpot_s: float | None = None
    error: str | None = None


class _Budget:
    """Hands out request slots until the deadline passes or the count is spent."""

    def __init__(self, deadline: float, max_requests: int | None) -> None:
        self.deadline = deadline
        self.left = max_requests

    def take(self) -> bool:
        if time.monotonic() >= self.deadline or self.left == 0:
            return False
        if self.left is not None:
            self.left -= 1
        return True


async def _model_for(client: httpx.AsyncClient, endpoint: Endpoint, cache: dict[str, str]) -> str:
    if endpoint.url not in cache:
        r = await client.get(f"{endpoint.url}/v1/models")
        r.raise_for_status()
        cache[endpoint.url] = r.json()["data"][0]["id"]
    return cache[endpoint.url]


async def one_request(client: httpx.AsyncClient, endpoint: Endpoint, task: Task, model: str,
                      max_tokens: int) -> RequestResult:
    """One streamed request; any failure becomes an error result rather than an exception."""
    path = "/v1/chat/completions" if task.chat else "/v1/completions"
    body: dict[str, object] = {"model": model, "max_tokens": max_tokens, "stream": True,
                               "stream_options": {"include_usage": True}, "temperature": 0.0}
    if task.chat:
        body["messages"] = [{"role": "user", "content": task.prompt}]
    else:
        body["prompt"] = task.prompt
    start = time.monotonic()
    first = last = None
    tokens = 0
    try:
        async with client.stream("POST", f"{endpoint.url}{path}", json=body) as r:
            if r.status_code != 200:
                await r.aread()
                return RequestResult(endpoint.label, task.kind, False, error=f"HTTP {r.status_code}")
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[len("data: "):])
                if "error" in event:
                    return RequestResult(endpoint.label, task.kind, False, error="error event in stream")
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
                if any(_text(c) for c in event.get("choices") or []):
                    last = time.monotonic()
                    first = first or last
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as e:
        return RequestResult(endpoint.label, task.kind, False, error=type(e).__name__)
    if first is None or not tokens:
        return RequestResult(endpoint.label, task.kind, False, error="no tokens")
    assert last is not None
    tpot = (last - first) / (tokens - 1) if tokens > 1 else None
    return RequestResult(endpoint.label, task.kind, True, tokens, first - start, tpot)


def _text(choice: dict) -> str:
    return choice.get("text") or (choice.get("delta") or {}).get("content") or ""


async def run_load(targets: Targets, tasks: tuple[Task, ...], config: LoadConfig,
                   clock: LoadClock | None = None) -> tuple[list[RequestResult], float]:
    """Send load until the duration or request count runs out; returns the results and wall seconds."""
    rng = random.Random(config.seed)
    results: list[RequestResult] = []
    models: dict[str, str] = {}
    start = time.monotonic()
    if clock is not None:
        clock.started = start
    budget = _Budget(start + config.duration_s, config.max_requests)
    peak = config.peak_concurrency
    limits = httpx.Limits(max_connections=peak * 2, max_keepalive_connections=peak)

    async def my_turn(i: int) -> bool:
        """Client i may send now (a client above the phase's count waits for a phase that has it)."""
        while True:
            now = time.monotonic()
            if now >= budget.deadline:
                return False
            if i < config.concurrency_at(now - start):
                return True
            _, left = phase_at(config.phases, now - start)
            await asyncio.sleep(min(left, IDLE_POLL_S, budget.deadline - now) + 1e-3)

    async with httpx.AsyncClient(timeout=config.timeout_s, limits=limits) as client:
        async def worker(i: int) -> None:
            while await my_turn(i) and budget.take():
                endpoints = targets.current()
                if not endpoints:
                    results.append(RequestResult("(no ready endpoints)", "-", False, error="no endpoints"))
                    await asyncio.sleep(0.5)
                    continue
                endpoint = rng.choice(endpoints)
                task = rng.choice(tasks)
                try:
                    model = config.model or await _model_for(client, endpoint, models)
                except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
                    results.append(RequestResult(endpoint.label, task.kind, False, error=f"models: {type(e).__name__}"))
                    await asyncio.sleep(ERROR_PAUSE_S)
                    continue
                result = await one_request(client, endpoint, task, model, config.max_tokens)
                results.append(result)
                if not result.ok:
                    # A refusing endpoint answers at once; pause so errors do not spin the loop.
                    await asyncio.sleep(ERROR_PAUSE_S)

        await asyncio.gather(*(worker(i) for i in range(peak)))
    return results, time.monotonic() - start
