"""The simulated engine over HTTP: what a client and a metrics scraper see.

Engines run in-process on 127.0.0.1 (ephemeral port) with engine time sped up; nothing here asserts on
wall-clock time.
"""

from __future__ import annotations

import asyncio
import json
import math

import httpx
import pytest

from specpilot_runtime import vllm_metrics as vm
from specpilot_harness.sim.profile import read_profile
from specpilot_harness.sim.server import VERSION, SimConfig, SimServer

MODEL = "sim-model"
FAST = 1000.0  # engine time runs 1000x wall time


def config(n: int, profile: str = "example-mtp-sequential", seed: int = 7, time_scale: float = FAST,
           **kw: object) -> SimConfig:
    p = read_profile(None, profile)
    return SimConfig(profile=p, num_speculative_tokens=n, served_model_name=MODEL,
                     method=p.method if n else "off", port=0, time_scale=time_scale, seed=seed, **kw)


async def scrape(client: httpx.AsyncClient, url: str) -> vm.Snapshot:
    """What the operator's scraper sees: the runtime's own parser over /metrics."""
    return vm.parse((await client.get(f"{url}/metrics")).text)


async def complete(client: httpx.AsyncClient, url: str, max_tokens: int, chat: bool = False) -> dict:
    path, body = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Add 17 and 25."}]}) if chat \
        else ("/v1/completions", {"prompt": "def fib(n):"})
    r = await client.post(f"{url}{path}", json={"model": MODEL, "max_tokens": max_tokens, **body})
    assert r.status_code == 200, r.text
    return r.json()


async def stream(client: httpx.AsyncClient, url: str, max_tokens: int, chat: bool) -> list[dict]:
    path, body = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello there"}]}) if chat \
        else ("/v1/completions", {"prompt": "Once upon a time"})
    events = []
    async with client.stream("POST", f"{url}{path}", json={
            "model": MODEL, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, **body}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                events.append({"done": True} if data == "[DONE]" else json.loads(data))
    return events


async def test_observed_survival_converges_to_the_profile() -> None:
    n = 4
    cfg = config(n)
    survival = cfg.profile.survival_at(n)
    async with SimServer(cfg) as sim, httpx.AsyncClient(timeout=60) as client:
        results = await asyncio.gather(*(complete(client, sim.url, 300, chat=i % 2 == 0) for i in range(24)))
        m = await scrape(client, sim.url)

    assert m.drafts > 2000
    for k, (observed, s_k) in enumerate(zip(vm.survival(m), survival, strict=True), start=1):
        # Five standard errors of a proportion: a fixed seed makes this deterministic, the width robust.
        assert abs(observed - s_k) < 5 * math.sqrt(s_k * (1 - s_k) / m.drafts), (k, observed, s_k)
    assert abs(vm.mean_acceptance_length(m) - (1 + sum(survival))) < 0.1
    assert m.draft_tokens == n * m.drafts
    assert m.drafted_per_pos == (m.drafts,) * n  # the plugin counter: every draft is N long
    # Every output token is counted once, prompts too, and the engine is idle again.
    assert m.generation_tokens == sum(r["usage"]["completion_tokens"] for r in results) == 24 * 300
    assert m.prompt_tokens == sum(r["usage"]["prompt_tokens"] for r in results)
    assert m.running == 0 and m.waiting == 0
    assert m.tpot_count == 24 and m.tpot_sum > 0
    assert m.extra[vm.E2E_LATENCY + "_count"] == m.extra[vm.TTFT + "_count"] == 24


async def test_parallel_profile_uses_its_survival_override_at_that_n() -> None:
    cfg = config(15, profile="example-dflash-parallel")
    override = cfg.profile.survival_by_n[15]
    assert cfg.profile.survival_at(15) == tuple(override)
    async with SimServer(cfg) as sim, httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*(complete(client, sim.url, 400) for _ in range(16)))
        m = await scrape(client, sim.url)
    s1 = vm.survival(m)[0]
    assert abs(s1 - override[0]) < 5 * math.sqrt(override[0] * (1 - override[0]) / m.drafts)


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
async def test_streaming_delivers_every_token_then_usage_and_done(chat: bool) -> None:
    async with SimServer(config(3)) as sim, httpx.AsyncClient(timeout=60) as client:
        events = await stream(client, sim.url, 50, chat)
        m = await scrape(client, sim.url)

    assert events[-1] == {"done": True}
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 50
    chunks = events[:-2]
    texts = [c["choices"][0]["delta"].get("content", "") if chat else c["choices"][0]["text"] for c in chunks]
    assert sum(len(t.split()) for t in texts) == 50  # one filler word per token
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    # Speculation shows: some chunks carry several tokens, so there are fewer chunks than tokens.
    assert len([t for t in texts if t]) < 50
    if chat:
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert chunks[0]["object"] == "chat.completion.chunk"
    assert m.generation_tokens == 50


async def test_speculation_off_generates_one_token_per_step() -> None:
    async with SimServer(config(0)) as sim, httpx.AsyncClient(timeout=60) as client:
        events = await stream(client, sim.url, 20, chat=False)
        m = await scrape(client, sim.url)
    assert len(events) == 20 + 2
    assert m.drafts == 0 and m.accepted_per_pos == () and m.drafted_per_pos is None
    assert m.extra[vm.INTER_TOKEN_LATENCY + "_count"] == 19


async def test_service_endpoints_answer_like_vllm() -> None:
    async with SimServer(config(2)) as sim, httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(f"{sim.url}/health")).status_code == 200
        models = (await client.get(f"{sim.url}/v1/models")).json()
        assert [m["id"] for m in models["data"]] == [MODEL]
        assert (await client.get(f"{sim.url}/version")).json() == {"version": VERSION}

        wrong = await client.post(f"{sim.url}/v1/completions", json={"model": "other", "prompt": "x"})
        assert wrong.status_code == 404 and "other" in wrong.json()["message"]
        bad = await client.post(f"{sim.url}/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 0})
        assert bad.status_code == 400 and "max_tokens" in bad.json()["message"]
        too_long = await client.post(f"{sim.url}/v1/completions",
                                     json={"model": MODEL, "prompt": "x", "max_tokens": 5000})
        assert too_long.status_code == 400 and "maximum context length" in too_long.json()["message"]
        garbage = await client.post(f"{sim.url}/v1/chat/completions", content=b"{not json",
                                    headers={"content-type": "application/json"})
        assert garbage.status_code == 400

        whole = await complete(client, sim.url, 16)
        assert whole["object"] == "text_completion" and whole["choices"][0]["finish_reason"] == "length"
        chat = await complete(client, sim.url, 5, chat=True)
        assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
        assert chat["usage"]["completion_tokens"] == 5


async def test_a_client_that_hangs_up_frees_its_slot() -> None:
    # Real time: the request would take minutes, so it is still running when the client leaves.
    async with SimServer(config(3, time_scale=1.0)) as sim, httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", f"{sim.url}/v1/completions", json={
                "model": MODEL, "prompt": "long", "max_tokens": 4000, "stream": True}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    break
            assert (await scrape(client, sim.url)).running == 1  # still connected: still running
        for _ in range(200):  # the server notices the hang-up on its next write
            if (await scrape(client, sim.url)).running == 0:
                break
            await asyncio.sleep(0.05)
        assert (await scrape(client, sim.url)).running == 0


async def test_batch_limit_queues_requests_as_waiting() -> None:
    async with SimServer(config(2, time_scale=1.0, max_num_seqs=1)) as sim, httpx.AsyncClient(timeout=30) as client:
        first = asyncio.create_task(complete(client, sim.url, 3000))
        second = asyncio.create_task(complete(client, sim.url, 3000))
        for _ in range(200):
            m = await scrape(client, sim.url)
            if m.running == 1 and m.waiting == 1:
                break
            await asyncio.sleep(0.02)
        assert (m.running, m.waiting) == (1, 1)
        first.cancel()
        second.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
