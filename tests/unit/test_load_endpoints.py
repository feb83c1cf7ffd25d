"""Which pods `specpilot load --deployment` sends to: the Service's ready endpoints, read from the API."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from specpilot_harness.load.endpoints import EndpointError, ServiceTargets, ready_endpoints

SERVICE = {"metadata": {"name": "chat"}, "spec": {
    "selector": {"specpilot.io/deployment": "chat"},
    "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]}}


def pod(name: str, ip: str, track: str, n: int, ready: bool = True, deployment: str = "chat",
        terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"specpilot.io/deployment": deployment,
                                                     "specpilot.io/track": track,
                                                     "specpilot.io/num-speculative-tokens": str(n)}}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    return {"metadata": meta,
            "spec": {"containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": 8000}]}]},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_ready_selected_pods_are_endpoints_at_the_named_target_port() -> None:
    pods = [pod("chat-a", "127.0.0.11", "stable", 3), pod("chat-b", "127.0.0.12", "stable", 3),
            pod("chat-canary-a", "127.0.0.13", "canary", 5),
            pod("chat-c", "127.0.0.14", "stable", 3, ready=False),
            pod("chat-d", "127.0.0.15", "stable", 3, terminating=True),
            pod("other-a", "127.0.0.16", "stable", 3, deployment="other")]
    eps = ready_endpoints(SERVICE, pods)
    assert sorted(e.url for e in eps) == ["http://127.0.0.11:8000", "http://127.0.0.12:8000", "http://127.0.0.13:8000"]
    assert {e.url: e.label for e in eps}["http://127.0.0.13:8000"] == "canary N=5 chat-canary-a"


def test_ipv6_pods_are_bracketed() -> None:
    eps = ready_endpoints(SERVICE, [pod("chat-a", "fd00::b", "stable", 3)])
    assert [e.url for e in eps] == ["http://[fd00::b]:8000"]


def test_a_numeric_target_port_is_used_as_is() -> None:
    service = {**SERVICE, "spec": {**SERVICE["spec"], "ports": [{"port": 80, "targetPort": 9000}]}}
    assert ready_endpoints(service, [pod("chat-a", "127.0.0.11", "stable", 3)])[0].url == "http://127.0.0.11:9000"


def test_a_service_without_selector_is_refused() -> None:
    with pytest.raises(EndpointError, match="no selector"):
        ready_endpoints({"metadata": {"name": "x"}, "spec": {"ports": [{"port": 80}]}}, [])


class FakeApi(BaseHTTPRequestHandler):
    """Just the two reads specpilot load makes: the Service, and pods by label selector."""

    pods: list[dict[str, Any]] = []
    selectors: list[str] = []
    answers: list[int] = []  # statuses the next reads of the Service get before it is served

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urlparse(self.path)
        if url.path == "/api/v1/namespaces/ns/services/chat" and FakeApi.answers:
            self._status(FakeApi.answers.pop(0))
            return
        if url.path == "/api/v1/namespaces/ns/services/chat":
            body: dict[str, Any] = {"kind": "Service", "apiVersion": "v1", **SERVICE}
        elif url.path == "/api/v1/namespaces/ns/pods":
            FakeApi.selectors.append(parse_qs(url.query).get("labelSelector", [""])[0])
            body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": FakeApi.pods}
        else:
            self._status(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"kind": "Status", "code": code}).encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def kubeconfig(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "t", "user": {"token": "t"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))
    yield str(path)
    server.shutdown()
    server.server_close()


def test_service_targets_resolve_through_the_kubernetes_api(kubeconfig: str) -> None:
    FakeApi.pods = [pod("chat-a", "127.0.0.11", "stable", 3), pod("chat-canary-a", "127.0.0.13", "canary", 5)]
    targets = ServiceTargets("chat", "ns", kubeconfig)
    try:
        assert sorted(e.url for e in targets.resolve()) == ["http://127.0.0.11:8000", "http://127.0.0.13:8000"]
        assert FakeApi.selectors[-1] == "specpilot.io/deployment=chat"
        missing = ServiceTargets("nope", "ns", kubeconfig)
        with pytest.raises(EndpointError, match="no Service ns/nope"):
            missing.resolve()
        missing.close()
    finally:
        targets.close()


def test_load_waits_for_a_service_the_operator_has_not_created_yet(kubeconfig: str) -> None:
    FakeApi.pods = [pod("chat-a", "127.0.0.11", "stable", 3)]
    FakeApi.answers = [404, 503, 429]  # not created yet, then the API server busy
    targets = ServiceTargets("chat", "ns", kubeconfig)
    try:
        asyncio.run(targets.start(wait_s=20))
        assert [e.url for e in targets.current()] == ["http://127.0.0.11:8000"]
        assert FakeApi.answers == []
        FakeApi.answers = [404, 404]
        with pytest.raises(EndpointError, match="no Service ns/chat"):
            asyncio.run(targets.start(wait_s=0))  # no wait: the first answer is final
        FakeApi.answers = [403]
        with pytest.raises(EndpointError, match="HTTP 403"):
            asyncio.run(targets.start(wait_s=20))  # forbidden does not go away by asking again
    finally:
        FakeApi.answers = []
        targets.close()
