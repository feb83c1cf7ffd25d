"""API faults on the real control plane: an HTTPS reverse proxy in front of kube-apiserver that injects
faults.py's per-request faults, and a control endpoint for server-wide drills on the real processes.

`specpilot sandbox --fault-proxy` starts it beside the real control plane and points the operator at it
(its kubeconfig: the proxy's URL, the control plane's CA, which signed the proxy's certificate). Every
request is forwarded with its own headers, Authorization included, so the API server authenticates and
authorizes the client itself (a ServiceAccount token stays that ServiceAccount); bodies pass through
byte for byte (gzip included) and watches are streamed. What the rules of faults.py match (by
User-Agent, method, path, watch-ness; on a schedule) is answered here instead, or held first:

- `error`: the Status a struggling API server sends (409 Conflict, 429 with Retry-After, 5xx);
- `latency`: held `latency_s`, then forwarded;
- `restart`: the proxy itself closes its listener and every connection (watches included) for `down_s`.

`gone` is refused: the real drill expires watches for real (`expire-watches` below).

Same API as the emulator's: `/sandbox/faults` GET/PUT/POST/DELETE. Besides, `/sandbox/control`:

- `POST /sandbox/control/restart-apiserver`: SIGTERM kube-apiserver, start it on the same port and etcd;
- `POST /sandbox/control/restart-etcd`: stop etcd and start it on the same data;
- `POST /sandbox/control/compact-etcd`: compact etcd to its current revision;
- `POST /sandbox/control/expire-watches`: compact, then restart the apiserver, whose new watch cache starts
  at the current revision: every watch resuming from before gets 410 Expired (ControlPlane.compact_etcd);
- `GET /sandbox/control`: requests forwarded and 410 watch events seen, by client, and the drills run.

Each drill answers once the control plane is ready again, with how long it took. The `/sandbox/` paths
want the sandbox's admin token; nothing else is checked here (the API server does that).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from specpilot_harness.controlplane.controlplane import ControlPlane
from specpilot_harness.controlplane.pki import serving_cert
from specpilot_harness.sandbox.faults import Fault, FaultInjector, Injection, parse
from specpilot_harness.sandbox.kubeconfig import Access, write_kubeconfig

if TYPE_CHECKING:
    from specpilot_harness.sandbox.real_cluster import RealSandbox

log = logging.getLogger(__name__)

# Per connection, not end to end: never forwarded (RFC 9110 7.6.1), or set by the client library itself
# (Expect: this side already answered 100 Continue and holds the whole body).
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "content-length", "expect"})
MESSAGES = {409: "the object has been modified; please apply your changes to the latest version and try again",
            429: "the server has received too many requests and has asked us to try again later"}
MAX_BODY = 64 * 1024 * 1024
EXPIRED_MARK = b'"code":410'

Drill = Callable[[], Awaitable[dict[str, Any]]]


def proxy_kubeconfig_path(kubeconfig: Path) -> Path:
    """Where `specpilot sandbox --fault-proxy` writes the proxy's kubeconfig (admin token), beside its own."""
    return kubeconfig.with_name(kubeconfig.name + ".fault-proxy")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")


def _watching(request: web.Request) -> bool:
    return request.query.get("watch", "").lower() in ("1", "true")


class FaultProxy:
    def __init__(self, upstream: str, upstream_ssl: ssl.SSLContext, server_ssl: ssl.SSLContext, admin_token: str,
                 drills: Mapping[str, Drill] | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.upstream_ssl, self.server_ssl, self.admin_token = upstream_ssl, server_ssl, admin_token
        self.drills = dict(drills or {})
        self.faults = FaultInjector()
        self.requests: Counter[str] = Counter()  # forwarded, by User-Agent up to its first "/"
        self.expired: Counter[str] = Counter()  # watch streams that carried a 410 ERROR event, by User-Agent
        self.history: list[dict[str, Any]] = []  # drills run
        self._drill_lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._bound = ("127.0.0.1", 0)
        self._scheduled: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"https://{self._bound[0]}:{self._bound[1]}"

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        if self._session is None:
            # No pool limit (every watch holds a connection), no total timeout (watches last), bytes as sent.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.upstream_ssl, limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10), auto_decompress=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"))
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        # handler_cancellation: a client that goes away ends its upstream request (a watch) too.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=self.server_ssl)
        await site.start()
        self._bound = (host, int(site._server.sockets[0].getsockname()[1]))  # type: ignore[union-attr]
        return self.url

    async def stop(self) -> None:
        for task in list(self._scheduled):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def write_kubeconfig(self, path: Path, token: str, ca_pem: bytes, namespace: str = "default") -> Path:
        return write_kubeconfig(path, Access(self.url, ca_pem, token), namespace)

    # ---- faults (faults.py decides) ------------------------------------------------------------

    def set_faults(self, rules: list[dict[str, Any]], seed: int | None = None, replace: bool = True) -> None:
        added = parse(rules)
        if any(rule.kind == "gone" for rule in added):
            raise ValueError("kind gone is the emulator's; on the real control plane POST "
                             "/sandbox/control/expire-watches (etcd compaction, then an apiserver restart)")
        if replace:
            self.faults = FaultInjector(seed)
            for task in list(self._scheduled):
                task.cancel()
        self.faults.rules.extend(added)
        for rule in (r for r in added if r.kind == "restart"):
            task = asyncio.ensure_future(self._restart(rule))
            self._scheduled.add(task)
            task.add_done_callback(self._scheduled.discard)

    async def _restart(self, rule: Fault) -> None:
        """The proxy goes away as an API server process does: listener and connections closed for
        `down_s`, then the same port again (the API server behind it kept everything)."""
        await asyncio.sleep(rule.after_s)
        log.warning("fault: proxy down for %.1fs", rule.down_s)
        rule.injected += 1
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await asyncio.sleep(rule.down_s)
        await self.start(self._bound[1], self._bound[0])

    def _inject(self, request: web.Request, watching: bool) -> Injection:
        return self.faults.decide(request.method, request.path, request.headers.get("User-Agent", ""), watching, None)

    @staticmethod
    def _injected(got: Injection) -> web.Response:
        assert got.status is not None
        resp = _json(_status(got.status, got.reason, MESSAGES.get(got.status, "injected fault")), got.status)
        if got.retry_after_s is not None:
            resp.headers["Retry-After"] = str(got.retry_after_s)
        return resp

    # ---- the control endpoint ------------------------------------------------------------------

    async def _control(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization", "") != f"Bearer {self.admin_token}":
            return _json(_status(401, "Unauthorized", "Unauthorized"), 401)
        path = request.path.rstrip("/")
        if path == "/sandbox/faults":
            if request.method in ("PUT", "POST"):
                try:
                    body = await request.json()
                    self.set_faults(body.get("faults") or [], body.get("seed"), replace=request.method == "PUT")
                except (TypeError, ValueError, AttributeError) as exc:
                    return _json(_status(400, "BadRequest", f"invalid faults: {exc}"), 400)
            elif request.method == "DELETE":
                self.set_faults([])
            return _json(self.faults.report())
        if path == "/sandbox/control" and request.method == "GET":
            return _json({"requests": dict(self.requests), "watch_expired": dict(self.expired),
                          "drills": self.history, "available": sorted(self.drills)})
        name = path.removeprefix("/sandbox/control/")
        if path.startswith("/sandbox/control/") and request.method == "POST" and name in self.drills:
            async with self._drill_lock:  # one at a time: a restart under a restart is no drill
                started = time.monotonic()
                log.warning("drill: %s", name)
                result = {"drill": name, **await self.drills[name](), "seconds": 0.0}
                result["seconds"] = round(time.monotonic() - started, 3)
                self.history.append(result)
            return _json(result)
        return _json(_status(404, "NotFound", f"no {request.method} {path}; drills: {sorted(self.drills)}"), 404)

    # ---- forwarding ----------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/sandbox/"):
            return await self._control(request)
        watching = _watching(request)
        if self.faults.rules:
            got = self._inject(request, watching)
            if got.delay_s:
                await asyncio.sleep(got.delay_s)
            if got.status is not None:
                return self._injected(got)
        agent = request.headers.get("User-Agent", "")
        self.requests[agent.split("/", 1)[0]] += 1
        return await self._forward(request, watching, agent)

    async def _forward(self, request: web.Request, watching: bool, agent: str) -> web.StreamResponse:
        assert self._session is not None
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
        body = await request.read() if request.body_exists else None
        try:
            upstream = await self._session.request(request.method, URL(self.upstream + request.raw_path, encoded=True),
                                                   headers=headers, data=body, allow_redirects=False)
        except (aiohttp.ClientError, OSError) as exc:
            # The API server is not there (restarting): the client sees its connection drop, as it would.
            log.debug("%s %s: upstream unreachable (%s)", request.method, request.path, exc)
            return self._drop(request)
        async with upstream:
            resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    resp.headers.add(key, value)
            if upstream.content_length is not None and not watching:
                resp.content_length = upstream.content_length
            await resp.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    if watching and EXPIRED_MARK in chunk:
                        self.expired[agent.split("/", 1)[0]] += 1
                    await resp.write(chunk)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                # The stream broke upstream (the API server died mid-watch): break it downstream too.
                return self._drop(request, resp)
            await resp.write_eof()
            return resp

    @staticmethod
    def _drop(request: web.Request, resp: web.StreamResponse | None = None) -> web.StreamResponse:
        """Close the client's connection without an answer (or mid-answer)."""
        if request.transport is not None:
            request.transport.abort()
        return resp if resp is not None else web.Response(status=502)


def control_plane_drills(plane: ControlPlane) -> dict[str, Drill]:
    """The server-wide drills on a ControlPlane (controlplane.py); each blocking call runs off the loop."""

    async def restart_apiserver() -> dict[str, Any]:
        await asyncio.to_thread(plane.restart_apiserver)
        return {}

    async def restart_etcd() -> dict[str, Any]:
        await asyncio.to_thread(plane.restart_etcd)
        return {}

    async def compact_etcd() -> dict[str, Any]:
        return {"revision": await asyncio.to_thread(plane.compact_etcd)}

    async def expire_watches() -> dict[str, Any]:
        revision = await asyncio.to_thread(plane.compact_etcd)
        await asyncio.to_thread(plane.restart_apiserver)
        return {"revision": revision}

    return {"restart-apiserver": restart_apiserver, "restart-etcd": restart_etcd, "compact-etcd": compact_etcd,
            "expire-watches": expire_watches}


async def in_front_of(sandbox: RealSandbox, port: int = 0) -> FaultProxy:
    """A started proxy in front of a started RealSandbox's API server, with a certificate from its CA and
    its control plane's drills."""
    plane = sandbox.plane
    assert plane is not None, "start the sandbox first"
    pair = serving_cert(plane.pki.ca, plane.pki.dir / "fault-proxy", "specpilot-fault-proxy", ("127.0.0.1",),
                        ("localhost",))
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(pair.cert, pair.key)
    upstream_ssl = ssl.create_default_context(cafile=str(plane.ca_path))
    proxy = FaultProxy(plane.url, upstream_ssl, server_ssl, plane.admin_token, control_plane_drills(plane))
    await proxy.start(port)
    return proxy
