"""The load loop: C concurrent clients sending streamed task prompts until the time or count runs out.

Each request picks a task and an endpoint at random, as a Service picks a pod per connection, so
traffic splits across stable and canary pods by their replica ratio. Timing is measured client-side
from the stream: TTFT to the first token, TPOT over the rest.
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


@dataclass(frozen=True)
class LoadConfig:
    concurrency: int
    duration_s: float
    max_tokens: int = 256
    max_requests: int | None = None
    timeout_s: float = 60.0
    model: str | None = None  # default: what each endpoint's /v1/models serves
    seed: int | None = None


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


async def run_load(targets: Targets, tasks: tuple[Task, ...], config: LoadConfig) -> tuple[list[RequestResult], float]:
    """Send load until the duration or request count runs out; returns the results and wall seconds."""
    rng = random.Random(config.seed)
    results: list[RequestResult] = []
    models: dict[str, str] = {}
    start = time.monotonic()
    budget = _Budget(start + config.duration_s, config.max_requests)
    limits = httpx.Limits(max_connections=config.concurrency * 2, max_keepalive_connections=config.concurrency)

    async with httpx.AsyncClient(timeout=config.timeout_s, limits=limits) as client:
        async def worker() -> None:
            while budget.take():
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

        await asyncio.gather(*(worker() for _ in range(config.concurrency)))
    return results, time.monotonic() - start
