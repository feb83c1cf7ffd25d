"""The node agent's watch behaves as an informer across what a restarted kube-apiserver does: it answers 403
until its RBAC cache is warm and 5xx while etcd is away, and expires resourceVersions (410). The watch must
outlast all of it, or the sandbox's node stops starting pods for the rest of the run."""

from __future__ import annotations

import json
from typing import Any

import httpx

from specpilot_harness.nodes import api as node_api


def _pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv}}


def _lines(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


class Server:
    """Answers in turn: each request to the path pops the next (status, body)."""

    def __init__(self, answers: list[tuple[int, bytes]]) -> None:
        self.answers = answers
        self.seen: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(("watch " if request.url.params.get("watch") else "list ")
                         + request.url.params.get("resourceVersion", ""))
        status, body = self.answers.pop(0)
        return httpx.Response(status, content=body)


async def _collect(server: Server, count: int, monkeypatch: Any) -> list[tuple[str, str]]:
    async def no_sleep(_: float) -> None:
        return None

    monkeypatch.setattr(node_api.asyncio, "sleep", no_sleep)
    client = node_api.Api.__new__(node_api.Api)
    client.http = httpx.AsyncClient(base_url="https://apiserver", transport=httpx.MockTransport(server))
    got: list[tuple[str, str]] = []
    async for kind, obj in client.watch("/api/v1/pods"):
        got.append((kind, obj["metadata"]["name"]))
        if len(got) == count:
            break
    await client.close()
    return got


async def test_watch_outlasts_refusals_and_reports_what_vanished_across_a_relist(monkeypatch: Any) -> None:
    forbidden = (403, b'{"kind":"Status","code":403,"message":"pods is forbidden"}')
    server = Server([
        forbidden,  # the first list, RBAC cache cold
        (200, json.dumps({"metadata": {"resourceVersion": "10"}, "items": [_pod("a", "9")]}).encode()),
        (500, b'{"kind":"Status","code":500,"message":"etcdserver: request timed out"}'),  # the watch, etcd away
        (200, _lines({"type": "ADDED", "object": _pod("b", "11")},
                     {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}})),
        forbidden,  # the re-list, the API server restarted meanwhile
        # a was deleted while nobody watched; c was created.
        (200, json.dumps({"metadata": {"resourceVersion": "20"}, "items": [_pod("b", "11"), _pod("c", "19")]}).encode()),
        (200, _lines({"type": "DELETED", "object": _pod("c", "21")})),
    ])
    got = await _collect(server, 6, monkeypatch)
    assert got == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("ADDED", "b"), ("ADDED", "c"),
                   ("DELETED", "c")]
    assert server.seen == ["list ", "list ", "watch 10", "watch 10", "list ", "list ", "watch 20"]
