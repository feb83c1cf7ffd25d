"""The product's one API client: typed verbs, retries with backoff for what may go away (429 with its
Retry-After, 5xx, connection errors) and none for answers that will not change, strict JSON (no NaN or
Infinity reaches the API server; status is made finite), and the leader fence before every write."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from specpilot.controller.kube import Backoff, Kube, KubeError, NotLeader, finite

FAST = Backoff(attempts=4, base_s=0.001, cap_s=0.01)
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}


class FakeApi:
    """Answers from a script, one per request; records what it got."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str], dict[str, Any]]] = []
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.seen.append((self.command, self.path, dict(self.headers), body))
                status, headers, payload = fake.script.pop(0) if fake.script else (200, {}, {"items": []})
                data = json.dumps(payload).encode()
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()


def _kube(api: FakeApi, fence: Any = None) -> Kube:
    cfg = client.Configuration(host=api.url)
    return Kube(client.ApiClient(cfg), fence, FAST, user_agent="specpilot/test")


def _status(code: int, reason: str) -> dict[str, Any]:
    return {"kind": "Status", "code": code, "reason": reason, "message": f"{reason} it is"}


def test_429_5xx_and_dropped_connections_are_retried(api: FakeApi) -> None:
    api.script = [(429, {"Retry-After": "0"}, _status(429, "TooManyRequests")),
                  (503, {}, _status(503, "ServiceUnavailable")), (200, {}, {"metadata": {"name": "c"}})]
    assert _kube(api).get("/api/v1/namespaces/ns/configmaps/c") == {"metadata": {"name": "c"}}
    assert len(api.seen) == 3


def test_retries_are_bounded(api: FakeApi) -> None:
    api.script = [(500, {}, _status(500, "InternalError"))] * 10
    with pytest.raises(KubeError) as err:
        _kube(api).apply(CM)
    assert err.value.status == 500 and len(api.seen) == FAST.attempts


def test_a_connection_error_is_retried_then_named() -> None:
    kube = Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")), backoff=FAST)
    with pytest.raises(KubeError) as err:
        kube.get("/api/v1/namespaces")
    assert err.value.status == 0 and err.value.retriable


@pytest.mark.parametrize("code,reason", [(409, "Conflict"), (422, "Invalid"), (403, "Forbidden")])
def test_answers_that_will_not_change_are_not_retried(api: FakeApi, code: int, reason: str) -> None:
    api.script = [(code, {}, _status(code, reason))]
    with pytest.raises(KubeError) as err:
        _kube(api).merge_patch("/api/v1/namespaces/ns/configmaps/c", {"data": {"a": "b"}})
    assert (err.value.status, err.value.reason, len(api.seen)) == (code, reason, 1)


def test_a_missing_object_is_none_and_delete_of_one_is_quiet(api: FakeApi) -> None:
    api.script = [(404, {}, _status(404, "NotFound")), (404, {}, _status(404, "NotFound"))]
    assert _kube(api).get("/api/v1/namespaces/ns/configmaps/c") is None
    _kube(api).delete(CM)


def test_verbs_send_the_content_types_a_real_api_server_takes(api: FakeApi) -> None:
    kube = _kube(api)
    kube.apply(CM)
    kube.merge_patch("/p", {"a": 1})
    kube.patch_status("/p", {"phase": "Running"})
    kube.create(CM)
    types = [(m, h["Content-Type"]) for m, _, h, _ in api.seen]
    assert types == [("PATCH", "application/apply-patch+yaml"), ("PATCH", "application/merge-patch+json"),
                     ("PATCH", "application/merge-patch+json"), ("POST", "application/json")]
    assert "fieldManager=specpilot" in api.seen[0][1] and api.seen[2][1] == "/p/status"
    assert all(h["User-Agent"] == "specpilot/test" for _, _, h, _ in api.seen)


def test_status_numbers_are_finite_or_null(api: FakeApi) -> None:
    status = {"acceptedLength": float("nan"),
              "tuning": {"history": [{"numbers": {"verdict": {"lower_pct": float("-inf"), "upper_pct": float("inf"),
                                                              "gain_pct": 1.5}}}]}}
    _kube(api).patch_status("/p", status)
    sent = json.loads(api.seen[0][3])  # json.loads would accept NaN: the raw body must not hold it
    assert b"NaN" not in api.seen[0][3] and b"Infinity" not in api.seen[0][3]
    assert sent["status"]["acceptedLength"] is None
    assert sent["status"]["tuning"]["history"][0]["numbers"]["verdict"] == {
        "lower_pct": None, "upper_pct": None, "gain_pct": 1.5}


def test_non_finite_numbers_elsewhere_are_refused_before_sending(api: FakeApi) -> None:
    with pytest.raises(ValueError):
        _kube(api).merge_patch("/p", {"spec": {"weight": float("nan")}})
    assert api.seen == []


def test_finite_leaves_everything_else_alone() -> None:
    assert finite({"a": [1, 2.5, None, "x", True], "b": {"c": float("nan")}}) == {
        "a": [1, 2.5, None, "x", True], "b": {"c": None}}


class Gate:
    def __init__(self) -> None:
        self.open = True

    def check(self) -> None:
        if not self.open:
            raise NotLeader("not the leader")


def test_a_closed_fence_sends_no_write_but_reads_still_work(api: FakeApi) -> None:
    gate = Gate()
    kube = _kube(api, gate)
    kube.apply(CM)
    gate.open = False
    for write in (lambda: kube.apply(CM), lambda: kube.create(CM), lambda: kube.delete(CM),
                  lambda: kube.patch_status("/p", {}), lambda: kube.merge_patch("/p", {}), lambda: kube.replace(CM)):
        with pytest.raises(NotLeader):
            write()
    kube.list("v1", "configmaps", "ns")
    assert [m for m, *_ in api.seen] == ["PATCH", "GET"]


def test_the_fence_is_checked_before_each_retry(api: FakeApi) -> None:
    gate = Gate()

    def lose_after_first(*_: Any) -> None:
        gate.open = False
    api.script = [(503, {}, _status(503, "ServiceUnavailable"))] * 3
    kube = _kube(api, gate)
    real_send = kube._send

    def send(*args: Any) -> Any:
        try:
            return real_send(*args)
        finally:
            lose_after_first()
    kube._send = send  # type: ignore[method-assign]
    with pytest.raises(NotLeader):
        kube.apply(CM)
    assert len(api.seen) == 1


def test_a_body_server_side_apply_cannot_type_is_refused_not_retried() -> None:
    # kube-apiserver answers an ill-typed field in an apply with a 500, which no retry will change.
    typed = KubeError(500, "InternalError", "failed to create typed patch object (ns/x; apps/v1, Kind=Deployment): "
                                            ".spec.template.spec.tolerations[0].tolerationSeconds: expected numeric")
    assert not typed.retriable and not typed.transient
    assert KubeError(500, "InternalError", "etcdserver: request timed out").retriable
