"""`specpilot load --phases`: the spec's parser and validation, the cycling, and clients that follow it."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiohttp import web

from specpilot.cli import main
from specpilot_harness.load.command import drive
from specpilot_harness.load.endpoints import Endpoint, StaticTargets
from specpilot_harness.load.runner import (LoadClock, LoadConfig, LoadPhase, PhaseError, parse_phases, phase_at,
                                           phases_text)


def test_parse_phases_reads_clients_and_seconds() -> None:
    assert parse_phases("2:30,32:30") == (LoadPhase(2, 30.0), LoadPhase(32, 30.0))
    assert parse_phases(" 4:2.5 , 64:1 ") == (LoadPhase(4, 2.5), LoadPhase(64, 1.0))
    assert parse_phases("8:60") == (LoadPhase(8, 60.0),)
    assert parse_phases(phases_text(parse_phases("2:30,32:7.5"))) == parse_phases("2:30,32:7.5")


@pytest.mark.parametrize("spec, says", [
    ("", "expected CLIENTS:SECONDS"),
    ("2", "expected CLIENTS:SECONDS"),
    ("2:30,", "expected CLIENTS:SECONDS"),
    ("x:30", "clients must be a whole number, got 'x'"),
    ("2.5:30", "clients must be a whole number"),
    ("2:soon", "seconds must be a number, got 'soon'"),
    ("0:30", "clients must be at least 1"),
    ("-1:30", "clients must be at least 1"),
    ("2:0", "seconds must be positive"),
    ("2:-5", "seconds must be positive"),
    ("2:inf", "seconds must be positive"),
    ("2:nan", "seconds must be positive"),
])
def test_parse_phases_errors_name_the_flag_and_the_part(spec: str, says: str) -> None:
    with pytest.raises(PhaseError) as e:
        parse_phases(spec)
    assert str(e.value).startswith("--phases ") and says in str(e.value)


def test_phases_cycle_until_the_end() -> None:
    phases = (LoadPhase(2, 30.0), LoadPhase(32, 10.0))
    assert phase_at(phases, 0.0) == (0, 30.0)
    assert phase_at(phases, 29.5) == (0, 0.5)
    assert phase_at(phases, 30.0) == (1, 10.0)
    assert phase_at(phases, 39.0) == (1, 1.0)
    assert phase_at(phases, 40.0) == (0, 30.0)  # the second cycle
    assert phase_at(phases, 75.0) == (1, 5.0)
    assert phase_at(phases, -1.0) == (0, 30.0)
    config = LoadConfig(concurrency=1, duration_s=100.0, phases=phases)
    assert [config.concurrency_at(t) for t in (0, 31, 41, 79.9, 80)] == [2, 32, 2, 32, 2]
    assert config.peak_concurrency == 32
    plain = LoadConfig(concurrency=5, duration_s=10.0)
    assert plain.peak_concurrency == plain.concurrency_at(123.0) == 5


def test_load_clock_tells_the_running_phase() -> None:
    config = LoadConfig(concurrency=1, duration_s=100.0, phases=(LoadPhase(2, 30.0), LoadPhase(32, 10.0)))
    clock = LoadClock()
    assert clock.phase(config) is None  # not started
    clock.started = 100.0
    assert clock.phase(config, now=135.0) == (1, 5.0)
    assert LoadClock().phase(LoadConfig(concurrency=1, duration_s=1.0)) is None


@pytest.mark.parametrize("argv, says", [
    (["--phases", "2:x"], "--phases '2:x': seconds must be a number"),
    (["--phases", "0:3"], "--phases '0:3': clients must be at least 1"),
    (["--phases", "2:3", "--concurrency", "3"], "--phases and --concurrency: give one"),
    ([], "give --concurrency C (clients) or --phases"),
])
def test_load_command_refuses_bad_phases(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "--url", "http://127.0.0.1:9", "--duration", "1", *argv]) == 2
    assert says in " ".join(capsys.readouterr().err.split())


class CountingServer:
    """A streaming completions endpoint that records how many requests were in flight when each began."""

    CHUNKS, CHUNK_S = 4, 0.01

    def __init__(self) -> None:
        self.inflight = 0
        self.starts: list[tuple[float, int]] = []  # (monotonic time, in flight including this one)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.inflight += 1
        self.starts.append((time.monotonic(), self.inflight))
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for _ in range(self.CHUNKS):
                await asyncio.sleep(self.CHUNK_S)
                await resp.write(b'data: {"choices": [{"text": "word "}]}\n\n')
            usage = {"choices": [], "usage": {"completion_tokens": self.CHUNKS}}
            await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            return resp
        finally:
            self.inflight -= 1


P = 1.0  # seconds per load phase


async def test_clients_follow_the_phases() -> None:
    server = CountingServer()
    app = web.Application()
    app.router.add_post("/v1/completions", server.completions)
    app.router.add_post("/v1/chat/completions", server.completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        url = f"http://127.0.0.1:{port}"
        clock = LoadClock()
        # Phases of a second: with two test workers on two cores, 0.6 s phases once saw no request start
        # in a phase's window.
        phases = (LoadPhase(1, P), LoadPhase(3, P))
        summary = await drive(StaticTargets((Endpoint(url, "one"),)),
                              LoadConfig(concurrency=1, duration_s=3 * P, model="m", phases=phases), clock=clock)
    finally:
        await runner.cleanup()
    assert summary.total.errors == 0 and summary.total.requests == len(server.starts) > 0
    assert clock.started is not None
    at = [(t - clock.started, n) for t, n in server.starts]
    slack = 0.25  # requests of the phase before finish after it ends
    # One client in the first phase and again when the cycle comes round; three in the second.
    assert max(n for t, n in at if t < P) == 1
    assert max(n for t, n in at if P + slack < t < 2 * P) == 3
    assert max(n for t, n in at if 2 * P + slack < t) == 1
    assert len([t for t, _ in at if P < t < 2 * P]) > len([t for t, _ in at if t < P])
