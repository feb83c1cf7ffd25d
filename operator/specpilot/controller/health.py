"""The operator's HTTP endpoint: `/metrics`, `/healthz` (liveness) and `/readyz` (readiness) on one port.

The server runs on a thread, so it answers whatever the event loop does; that is why `/metrics` alone
cannot tell a stuck operator from a live one. `/healthz` therefore reports the age of a heartbeat that a
task on the event loop refreshes every second: when the loop is blocked (a handler calling something
synchronous, a deadlock) the heartbeat ages and `/healthz` answers 503, so the kubelet restarts the pod.

`/readyz` is 200 on the leader once Kopf has started and on a standby waiting for the Lease: a standby is
a healthy replica whose job is to wait, and an unready standby would hold every rolling update of the
operator (the new pod is always a standby first) and use up the PodDisruptionBudget. Leadership is the
metric `specpilot_operator_leader`, and the body of `/readyz` names it. 503 while starting and stopping."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

HEARTBEAT_S = 1.0
DEFAULT_STALL_S = 30.0

STARTING, STANDBY, LEADER, STOPPING = "starting", "standby", "leader", "stopping"


class Health:
    """Liveness from a heartbeat on the event loop, readiness from the replica's role."""

    def __init__(self, stall_after_s: float = DEFAULT_STALL_S, clock: Callable[[], float] = time.monotonic) -> None:
        if stall_after_s <= HEARTBEAT_S:
            raise ValueError(f"the stall limit must exceed the heartbeat period ({HEARTBEAT_S} s)")
        self.stall_after_s = stall_after_s
        self._clock = clock
        self._beat = clock()
        self._role = STARTING
        self.kopf_ready = threading.Event()  # Kopf's ready_flag: set once its startup is done
        self._guard = threading.Lock()

    async def heartbeat(self) -> None:
        while True:
            self.beat()
            await asyncio.sleep(HEARTBEAT_S)

    def beat(self) -> None:
        with self._guard:
            self._beat = self._clock()

    def set_role(self, role: str) -> None:
        with self._guard:
            self._role = role

    def liveness(self) -> tuple[bool, str]:
        with self._guard:
            age = self._clock() - self._beat
        if age > self.stall_after_s:
            return False, f"event loop stalled: no heartbeat for {age:.1f} s (limit {self.stall_after_s:g} s)"
        return True, f"alive: event loop heartbeat {age:.1f} s ago"

    def readiness(self) -> tuple[bool, str]:
        with self._guard:
            role = self._role
        if role == STANDBY:
            return True, "ready: standby, waiting for the leader Lease"
        if role == LEADER and self.kopf_ready.is_set():
            return True, "ready: leader"
        if role == LEADER:
            return False, "not ready: leader, Kopf starting"
        return False, f"not ready: {role}"


def wsgi_app(health: Health, registry: CollectorRegistry) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app(registry)
    checks = {"/healthz": health.liveness, "/readyz": health.readiness}

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        check = checks.get(environ.get("PATH_INFO", ""))
        if check is None:
            return metrics(environ, start_response)
        ok, text = check()
        start_response("200 OK" if ok else "503 Service Unavailable",
                       [("Content-Type", "text/plain; charset=utf-8")])
        return [text.encode() + b"\n"]
    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # probes every 10 s would flood the log
        return None


def serve(port: int, host: str, health: Health, registry: CollectorRegistry) -> None:
    """Serve /metrics, /healthz and /readyz from a daemon thread."""
    server = _Server6 if ":" in host else _Server
    httpd = make_server(host, port, wsgi_app(health, registry), server, handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="metrics-health", daemon=True).start()
