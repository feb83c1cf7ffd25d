"""`specpilot load` against simulated engines: traffic splits by endpoint count, tokens add up."""

from __future__ import annotations

import json
import math
from contextlib import AsyncExitStack

import httpx
import pytest

from specpilot.cli import main
from specpilot_harness.load.command import drive
from specpilot_harness.load.endpoints import Endpoint, StaticTargets
from specpilot_harness.load.report import percentile
from specpilot_harness.load.runner import LoadConfig
from specpilot_harness.sim.profile import read_profile
from specpilot_harness.sim.server import SimConfig, SimServer

PROFILE = read_profile(None, "example-mtp-sequential")


def sim(n: int, seed: int) -> SimServer:
    return SimServer(SimConfig(profile=PROFILE, num_speculative_tokens=n, served_model_name="chat",
                               method="mtp", port=0, time_scale=1000.0, seed=seed))


async def generation_tokens(url: str) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{url}/metrics")).text
    line = next(l for l in text.splitlines() if l.startswith("vllm:generation_tokens_total"))
    return float(line.split()[-1])


async def test_traffic_splits_across_pods_by_replica_ratio() -> None:
    async with AsyncExitStack() as stack:
        stable = await stack.enter_async_context(sim(3, seed=1))
        canary = await stack.enter_async_context(sim(5, seed=2))
        # Two stable replicas (both served by one simulated engine here) and one canary: 2/3 vs 1/3.
        targets = StaticTargets((Endpoint(stable.url, "stable-a"), Endpoint(stable.url, "stable-b"),
                                 Endpoint(canary.url, "canary-a")))
        requests = 300
        summary = await drive(targets, LoadConfig(concurrency=6, duration_s=300, max_tokens=24,
                                                  max_requests=requests, seed=4))

        assert summary.total.requests == requests and summary.total.errors == 0
        shares = {row.target: row.share for row in summary.endpoints}
        sigma = math.sqrt((1 / 3) * (2 / 3) / requests)
        assert abs(shares["canary-a"] - 1 / 3) < 5 * sigma
        # Every token a client counted, an engine counted, and none twice.
        rows = {row.target: row for row in summary.endpoints}
        assert await generation_tokens(canary.url) == rows["canary-a"].output_tokens
        assert await generation_tokens(stable.url) == rows["stable-a"].output_tokens + rows["stable-b"].output_tokens
        assert summary.total.output_tokens == requests * 24
        assert summary.total.tpot_p50_ms is not None and summary.total.tpot_p99_ms >= summary.total.tpot_p50_ms


async def test_unreachable_endpoints_count_as_errors_not_crashes() -> None:
    async with sim(2, seed=1) as up:
        targets = StaticTargets((Endpoint(up.url, "up"), Endpoint("http://127.0.0.1:9", "down")))
        summary = await drive(targets, LoadConfig(concurrency=2, duration_s=60, max_tokens=8, max_requests=40,
                                                  seed=3))
    rows = {row.target: row for row in summary.endpoints}
    assert rows["down"].errors == rows["down"].requests > 0
    assert rows["up"].errors == 0 and rows["up"].output_tokens == rows["up"].requests * 8
    assert sum(summary.errors.values()) == rows["down"].requests


def test_load_command_prints_a_summary_and_writes_json(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio
    import threading

    ready = threading.Event()
    state: dict[str, object] = {}

    async def serve() -> None:
        async with sim(4, seed=1) as s:
            state["url"] = s.url
            state["stop"] = asyncio.Event()
            state["loop"] = asyncio.get_running_loop()
            ready.set()
            await state["stop"].wait()  # type: ignore[union-attr]

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    out = tmp_path / "load.json"
    try:
        rc = main(["load", "--url", str(state["url"]), "--concurrency", "3", "--duration", "120",
                   "--requests", "12", "--max-tokens", "16", "--json", str(out)])
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)  # type: ignore[union-attr]
        thread.join(30)
    assert rc == 0
    printed = capsys.readouterr().out
    assert "specpilot load" in printed and "TPOT" in printed
    doc = json.loads(out.read_text())
    assert doc["total"]["requests"] == 12 and doc["total"]["output_tokens"] == 12 * 16


def test_percentiles_use_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([], 50) is None
