"""/healthz follows the event loop, not the HTTP thread; /readyz follows the replica's role."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request

import pytest
from specpilot_harness.ports import free_port

from specpilot.controller.health import LEADER, STANDBY, STOPPING, Health, serve
from specpilot.controller.metrics import OperatorMetrics


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_readiness_follows_the_role() -> None:
    health = Health(5)
    assert health.readiness() == (False, "not ready: starting")
    health.set_role(STANDBY)
    assert health.readiness()[0]
    health.set_role(LEADER)
    assert health.readiness() == (False, "not ready: leader, Kopf starting")
    health.kopf_ready.set()
    assert health.readiness() == (True, "ready: leader")
    health.set_role(STOPPING)
    assert health.readiness() == (False, "not ready: stopping")


def test_liveness_fails_once_the_heartbeat_is_older_than_the_limit() -> None:
    now = [100.0]
    health = Health(5, clock=lambda: now[0])
    now[0] += 4.9
    assert health.liveness()[0]
    now[0] += 0.2
    ok, text = health.liveness()
    assert not ok and "stalled" in text and "5.1 s" in text
    health.beat()
    assert health.liveness()[0]


def test_a_stall_limit_within_the_heartbeat_period_is_refused() -> None:
    with pytest.raises(ValueError, match="heartbeat"):
        Health(1.0)


def test_a_blocked_event_loop_fails_healthz_while_metrics_still_answers() -> None:
    port = free_port()
    health = Health(1.5)
    metrics = OperatorMetrics()
    serve(port, "127.0.0.1", health, metrics.registry)
    seen: list[tuple[int, int]] = []

    async def main() -> None:
        beat = asyncio.create_task(health.heartbeat())
        await asyncio.sleep(0.1)
        assert _get(port, "/healthz")[0] == 200

        def probe_during_block() -> None:
            time.sleep(2.5)
            seen.append((_get(port, "/healthz")[0], _get(port, "/metrics")[0]))
        prober = threading.Thread(target=probe_during_block)
        prober.start()
        time.sleep(3.5)  # the stuck loop: a synchronous call on the event loop
        prober.join()
        await asyncio.sleep(0.1)
        seen.append((_get(port, "/healthz")[0], _get(port, "/metrics")[0]))
        beat.cancel()

    asyncio.run(main())
    assert seen == [(503, 200), (200, 200)]
    status, text = _get(port, "/readyz")
    assert status == 503 and text.strip() == "not ready: starting"
