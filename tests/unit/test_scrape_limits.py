"""Pods are not trusted: a huge, slow or non-finite /metrics costs that pod's window only, within a byte
cap and an overall deadline, and parsing never runs on the event loop. Fake pods are real HTTP servers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from specpilot.scrape import pods
from specpilot.scrape.pods import PodTarget, ScrapeLimits, Scraper, scrape_pods

GOOD = b"# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total{engine=\"0\"} 10.0\n"
LIMITS = ScrapeLimits(max_bytes=64 * 1024, deadline_s=2.0, concurrency=4)


async def _good(request: web.Request) -> web.StreamResponse:
    return web.Response(body=GOOD)


SENT: list[int] = []  # bytes _huge managed to send, per request


async def _huge(request: web.Request) -> web.StreamResponse:
    """200 MB of valid-looking comments, streamed without a Content-Length; counts what it sent."""
    SENT.append(0)
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    line = b"# " + b"x" * 1022 + b"\n"
    try:
        for _ in range(200 * 1024):
            await resp.write(line)
            SENT[-1] += len(line)
    except (ConnectionResetError, RuntimeError):
        pass  # the scraper hung up: what this test wants
    return resp


async def _trickle(request: web.Request) -> web.StreamResponse:
    """One line every 3 s: each read is within any per-read timeout, the whole answer never is."""
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    try:
        for _ in range(100):
            await resp.write(b"# still here\n")
            await asyncio.sleep(3)
    except (ConnectionResetError, RuntimeError):
        pass
    return resp


async def _nan(request: web.Request) -> web.StreamResponse:
    return web.Response(body=GOOD + b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running NaN\n")


async def _inf(request: web.Request) -> web.StreamResponse:
    return web.Response(body=GOOD.replace(b"10.0", b"+Inf"))


async def _far_position(request: web.Request) -> web.StreamResponse:
    """A per-position counter at position 10^9: parsed as is, it sized an 8 GB vector (the operator OOM)."""
    return web.Response(body=GOOD + b"# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
                                    b"vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"1000000000\"} 1\n")


@asynccontextmanager
async def fake_pods(**routes: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[
        dict[str, PodTarget]]:
    app = web.Application()
    for name, handler in routes.items():
        app.router.add_get(f"/{name}/metrics", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    targets = {name: PodTarget(name, f"uid-{name}", "stable", 3, f"http://127.0.0.1:{port}/{name}/metrics", True)
               for name in routes}
    try:
        yield targets
    finally:
        await runner.cleanup()


def _by_name(scrapes: list[pods.PodScrape]) -> dict[str, pods.PodScrape]:
    return {s.target.name: s for s in scrapes}


def test_huge_slow_and_non_finite_pods_cost_only_their_own_scrape() -> None:
    async def run() -> dict[str, pods.PodScrape]:
        async with fake_pods(good=_good, huge=_huge, trickle=_trickle, nan=_nan, inf=_inf,
                             far=_far_position) as targets:
            async with pods.client(LIMITS) as client:
                return _by_name(await scrape_pods(client, list(targets.values()), limits=LIMITS))
    SENT.clear()
    got = asyncio.run(run())
    assert got["good"].snapshot is not None and got["good"].snapshot.drafts == 10.0
    assert got["huge"].snapshot is None and "byte cap" in (got["huge"].error or "")
    assert SENT and max(SENT) < 50 * 1024 * 1024  # the scraper hung up long before the 200 MB were sent
    assert got["trickle"].snapshot is None and "timed out" in (got["trickle"].error or "")
    for name in ("nan", "inf"):
        assert got[name].snapshot is None and "non-finite" in (got[name].error or ""), got[name]
    assert got["far"].snapshot is None and "position label '1000000000' is not a whole number below 64" in (
        got["far"].error or ""), got["far"]


def test_a_declared_length_over_the_cap_is_refused_before_reading() -> None:
    async def big(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"#" * (LIMITS.max_bytes + 1))

    async def run() -> pods.PodScrape:
        async with fake_pods(big=big) as targets:
            async with pods.client(LIMITS) as client:
                return (await scrape_pods(client, list(targets.values()), limits=LIMITS))[0]
    got = asyncio.run(run())
    assert got.snapshot is None and f"{LIMITS.max_bytes + 1} bytes" in (got.error or "")


def test_parsing_runs_off_the_event_loop(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    threads = []
    real = pods.vllm_metrics.parse

    def spy(text: str, scrape_time: float = 0.0):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread())
        return real(text, scrape_time)
    monkeypatch.setattr(pods.vllm_metrics, "parse", spy)

    async def run() -> list[pods.PodScrape]:
        async with fake_pods(good=_good) as targets:
            scraper = Scraper(LIMITS)
            try:
                return await scraper.scrape(list(targets.values()))
            finally:
                await scraper.close()
    got = asyncio.run(run())
    assert got[0].snapshot is not None
    assert threads and all(t is not threading.main_thread() for t in threads)


def test_concurrency_is_bounded() -> None:
    active, peak = 0, 0

    async def slow(request: web.Request) -> web.StreamResponse:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.2)
        active -= 1
        return web.Response(body=GOOD)

    async def run() -> list[pods.PodScrape]:
        async with fake_pods(slow=slow) as targets:
            many = [PodTarget(f"p{i}", f"u{i}", "stable", 3, targets["slow"].url, True) for i in range(10)]
            scraper = Scraper(ScrapeLimits(deadline_s=30.0, concurrency=3))
            try:
                return await scraper.scrape(many)
            finally:
                await scraper.close()
    got = asyncio.run(run())
    assert all(s.snapshot is not None for s in got) and peak == 3


def test_a_pod_with_an_ipv6_address_is_scraped() -> None:
    """On an IPv6 (or IPv6-first dual-stack) cluster a pod's IP is `fd00::1`: the URL was written without
    brackets, httpx refused it with InvalidURL (not an HTTPError), and every window of every deployment
    failed. A real HTTP server on ::1 stands for the pod."""
    async def run() -> list[pods.PodScrape]:
        app = web.Application()
        app.router.add_get("/metrics", _good)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "::1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        pod = {"metadata": {"name": "chat-x", "uid": "u", "labels": {"specpilot.io/track": "stable",
                                                                      "specpilot.io/num-speculative-tokens": "3"}},
               "spec": {"containers": [{"ports": [{"name": pods.PORT_NAME, "containerPort": port}]}]},
               "status": {"podIP": "::1", "conditions": [{"type": "Ready", "status": "True"}]}}
        targets = pods.pod_targets([pod])
        assert [t.url for t in targets] == [f"http://[::1]:{port}/metrics"]
        try:
            async with pods.client(LIMITS) as client:
                return await scrape_pods(client, targets, limits=LIMITS)
        finally:
            await runner.cleanup()
    got = asyncio.run(run())
    assert got[0].snapshot is not None and got[0].snapshot.drafts == 10.0


def test_a_pod_ip_that_is_not_an_address_is_not_a_target_url() -> None:
    """podIP `10.0.0.1/x#` would have moved the scrape to another path and port."""
    for ip in ("10.0.0.1/x#", "evil.example", "", None, 5):
        pod = {"metadata": {"name": "p", "uid": "u", "labels": {"specpilot.io/track": "stable",
                                                                "specpilot.io/num-speculative-tokens": "3"}},
               "spec": {"containers": [{"ports": [{"name": pods.PORT_NAME, "containerPort": 8000}]}]},
               "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}
        (target,) = pods.pod_targets([pod])
        assert target.url == "" and not target.ready
