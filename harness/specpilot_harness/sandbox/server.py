"""The emulated Kubernetes API server over HTTP (aiohttp): routing, content negotiation, watch streams."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import ssl
from collections import Counter
from typing import Any

import yaml
from aiohttp import web

from specpilot_harness.sandbox import discovery, errors, protobuf
from specpilot_harness.sandbox.errors import ApiError
from specpilot_harness.sandbox.faults import Fault, FaultInjector, Injection, parse
from specpilot_harness.sandbox.resources import Registry, ResourceType
from specpilot_harness.sandbox.selectors import SelectorError
from specpilot_harness.sandbox.store import Admission, Store
from specpilot_harness.sandbox.table import to_table

log = logging.getLogger(__name__)

BOOKMARK_EVERY_S = 30.0
DEFAULT_WATCH_TIMEOUT_S = 1800.0


def _json(data: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers = {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)} if warnings else None
    return web.Response(body=json.dumps(data, separators=(",", ":")).encode(), status=status,
                        content_type="application/json", headers=headers)


# What a real API server reads, by verb (a PATCH names its patch format; other bodies are objects).
BODY_TYPES = frozenset({"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"})
PATCH_TYPES = frozenset({"application/json-patch+json", "application/merge-patch+json",
                         "application/strategic-merge-patch+json", "application/apply-patch+yaml"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})
# The API server's limit on a write's body (twice etcd's object limit: JSON is larger than the protobuf
# it stores).
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _strict_json(raw: bytes) -> Any:
    """JSON as Go's encoding/json reads it: NaN and Infinity are not numbers (Python would accept them)."""
    return json.loads(raw, parse_constant=_refuse_constant)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("true", "1")


class ApiServer:
    def __init__(self, admission: Admission | None = None, ssl_context: ssl.SSLContext | None = None,
                 token: str | None = None) -> None:
        """`token`: every request must carry `Authorization: Bearer <token>` (None: no authentication)."""
        self.registry = Registry()
        self.ssl_context = ssl_context
        self.token = token
        self.store = Store(self.registry, admission)
        self.address = "127.0.0.1:0"
        self._runner: web.AppRunner | None = None
        self._streams: set[web.StreamResponse] = set()
        self.faults = FaultInjector()
        self.requests: Counter[str] = Counter()  # by client (User-Agent up to its first "/"), for benchmarks
        self._bound: tuple[str, int] = ("127.0.0.1", 0)
        self._scheduled: set[asyncio.Task[None]] = set()
        self._watch_agents: dict[Any, tuple[str, str]] = {}  # live watch -> (User-Agent, path)

    # ---- lifecycle -----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=self.ssl_context)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.address = f"{host}:{bound}"
        self._bound = (host, int(bound))
        return int(bound)

    async def stop(self) -> None:
        for task in self._scheduled:
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- faults on purpose (faults.py) ---------------------------------------------------------

    def set_faults(self, rules: list[dict[str, Any]], seed: int | None = None, replace: bool = True) -> None:
        """Replace the fault rules (or add to them); each rule's schedule counts from now."""
        added = parse(rules)
        if replace:
            self.faults = FaultInjector(seed)
            for task in self._scheduled:
                task.cancel()
        self.faults.rules.extend(added)
        for rule in (r for r in added if r.kind in ("restart", "gone")):
            task = asyncio.ensure_future(self._restart(rule) if rule.kind == "restart" else self._compact(rule))
            self._scheduled.add(task)
            task.add_done_callback(self._scheduled.discard)

    async def _restart(self, rule: Fault) -> None:
        """Like an API server process restarting: every connection drops, nothing listens for `down_s`,
        then the same port serves the same store (watches resume from their resourceVersion)."""
        await asyncio.sleep(rule.after_s)
        log.warning("fault: API server restarting, down for %.1fs", rule.down_s)
        rule.injected += 1
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await asyncio.sleep(rule.down_s)
        await self.start(*self._bound)

    async def _compact(self, rule: Fault) -> None:
        """Like etcd compacting its history: the matching watches in progress end with 410 Expired, and
        resuming from a resourceVersion up to now gets 410 (faults.Fault.matches)."""
        await asyncio.sleep(rule.after_s)
        rule.compacted_rv = self.store.rv
        expired = ApiError(410, "Expired", f"too old resource version: {self.store.rv}").status()
        for watch, (agent, path) in list(self._watch_agents.items()):
            if rule.matches("GET", path, agent, True, rule.compacted_rv):
                rule.injected += 1
                watch.queue.put_nowait(("ERROR", expired))

    async def _control(self, request: web.Request) -> web.StreamResponse:
        """`/sandbox/faults`: GET the rules with their counts, PUT {"faults": [...], "seed": n} to replace
        them, POST {"faults": [...]} to add some (schedules count from then), DELETE to clear.
        `/sandbox/requests`: requests served so far by User-Agent product; `/sandbox/watches`: the watches
        open now, as [User-Agent, path] pairs (a benchmark waits for the operator's before it applies)."""
        if request.path.rstrip("/") == "/sandbox/requests":
            return _json(dict(self.requests))
        if request.path.rstrip("/") == "/sandbox/watches":
            return _json({"watches": [list(pair) for pair in self._watch_agents.values()]})
        if request.path.rstrip("/") != "/sandbox/faults":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if request.method in ("PUT", "POST"):
            body = await self._body(request)
            try:
                self.set_faults(body.get("faults") or [], body.get("seed"), replace=request.method == "PUT")
            except (TypeError, ValueError) as exc:
                raise errors.bad_request(f"invalid faults: {exc}") from exc
        elif request.method == "DELETE":
            self.set_faults([])
        return _json(self.faults.report())

    async def _inject(self, request: web.Request) -> web.StreamResponse | None:
        """The injected answer for this request, None to serve it (after any injected latency)."""
        q = request.query
        watching = _flag(request, "watch")
        since = q.get("resourceVersion", "0")
        got: Injection = self.faults.decide(request.method, request.path, request.headers.get("User-Agent", ""),
                                            watching, int(since) if watching and since.isdigit() and since != "0"
                                            else None)
        if got.delay_s:
            await asyncio.sleep(got.delay_s)
        if got.status is None:
            return None
        if got.status == 410:
            expired = ApiError(410, "Expired", f"too old resource version: {q.get('resourceVersion')}")
            return web.Response(body=json.dumps({"type": "ERROR", "object": expired.status()}).encode() + b"\n",
                                content_type="application/json")
        message = {409: "the object has been modified; please apply your changes to the latest version and "
                        "try again", 429: "the server has received too many requests and has asked us to try "
                                          "again later"}.get(got.status, "injected fault")
        resp = _json(ApiError(got.status, got.reason, message).status(), got.status)
        if got.retry_after_s is not None:
            resp.headers["Retry-After"] = str(got.retry_after_s)
        return resp

    # ---- routing -------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            self._authenticate(request)
            self._refuse_browsers(request)
            self._check_media_type(request)
            if request.path.startswith("/sandbox/"):
                return await self._control(request)
            self.requests[request.headers.get("User-Agent", "").split("/", 1)[0]] += 1
            if self.faults.rules:
                injected = await self._inject(request)
                if injected is not None:
                    return injected
            return await self._route(request)
        except ApiError as exc:
            return _json(exc.status(), exc.code)
        except SelectorError as exc:
            return _json(errors.bad_request(str(exc)).status(), 400)
        except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
            return _json(errors.bad_request(f"invalid request body: {exc}").status(), 400)

    def _authenticate(self, request: web.Request) -> None:
        """Like an API server with only a static token: anything else is 401 before it is looked at."""
        if self.token is None:
            return
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), self.token.encode()):
            raise ApiError(401, "Unauthorized", "Unauthorized")

    @staticmethod
    def _refuse_browsers(request: web.Request) -> None:
        """Only clients on this machine that are not web pages: kubectl and Kubernetes clients send no
        Origin, a browser always does on a cross-site write; a loopback Host header rules out DNS
        rebinding (a page whose own name resolves to 127.0.0.1)."""
        if "Origin" in request.headers:
            raise ApiError(403, "Forbidden", "requests from web pages (with an Origin header) are refused")
        if request.host.rsplit(":", 1)[0] not in LOOPBACK_HOSTS:
            raise ApiError(403, "Forbidden", f"Host {request.host!r} is not a loopback address")

    @staticmethod
    def _check_media_type(request: web.Request) -> None:
        if request.method not in ("POST", "PUT", "PATCH", "DELETE") or not request.can_read_body:
            return
        allowed = PATCH_TYPES if request.method == "PATCH" else BODY_TYPES
        if "Content-Type" not in request.headers and request.method != "PATCH":
            return  # the real server reads a body without a media type as JSON (the kubernetes client sends none)
        if request.content_type not in allowed:
            raise ApiError(415, "UnsupportedMediaType",
                           f'the body of the request was in an unknown format - accepted media types '
                           f'include: {", ".join(sorted(allowed))}')

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        accept = request.headers.get("Accept", "")
        if not parts:
            return _json({"paths": ["/api", "/apis", "/openapi/v3", "/version", "/healthz"]})
        head = parts[0]
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if head == "version":
            return _json({"major": "1", "minor": "32", "gitVersion": "v1.32.0-specpilot-sandbox",
                          "gitCommit": "", "gitTreeState": "clean", "buildDate": "", "goVersion": "",
                          "compiler": "gc", "platform": "linux/amd64"})
        if head == "openapi":
            return self._openapi(parts[1:])
        if head == "api" and len(parts) == 1:
            if "as=APIGroupDiscoveryList" in accept:
                return self._aggregated(core=True)
            return _json(discovery.api_versions(self.address))
        if head == "apis" and len(parts) == 1:
            if "as=APIGroupDiscoveryList" in accept:
                return self._aggregated(core=False)
            return _json(discovery.api_group_list(self.registry))
        if head == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        elif head == "apis" and len(parts) == 2:
            group_doc = next((g for g in discovery.api_group_list(self.registry)["groups"]
                              if g["name"] == parts[1]), None)
            if group_doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return _json({"kind": "APIGroup", "apiVersion": "v1", **group_doc})
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            doc = discovery.resource_list(self.registry, group, version)
            if doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return _json(doc)
        return await self._resource(request, group, version, rest)

    def _aggregated(self, core: bool) -> web.Response:
        return web.Response(body=json.dumps(discovery.aggregated(self.registry, core)).encode(),
                            headers={"Content-Type": discovery.AGGREGATED_V2})

    def _openapi(self, parts: list[str]) -> web.Response:
        if parts == ["v3"]:
            return _json(discovery.openapi_root(self.registry))
        doc = None
        if parts[:2] == ["v3", "api"] and len(parts) == 3:
            doc = discovery.openapi_group_version(self.registry, "", parts[2])
        elif parts[:2] == ["v3", "apis"] and len(parts) == 4:
            doc = discovery.openapi_group_version(self.registry, parts[2], parts[3])
        if doc is not None:
            return _json(doc)
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _locate(self, group: str, version: str, rest: list[str]) -> tuple[ResourceType, str | None, str | None, str | None]:
        """(resource type, namespace, name, subresource) from the path after /api/v1 or /apis/g/v."""
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        rtype = self.registry.lookup(group, version, rest[0])
        if rtype is None or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if namespace is not None and not rtype.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return rtype, namespace, name, sub

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return {}
        if len(raw) > MAX_REQUEST_BODY_BYTES:
            raise ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}")
        if "protobuf" in request.content_type:
            try:
                return protobuf.decode(raw)
            except (ValueError, IndexError) as exc:
                raise ApiError(415, "UnsupportedMediaType", str(exc)) from exc
        try:
            if "yaml" not in request.content_type:
                return _strict_json(raw)
            try:
                return _strict_json(raw)  # most clients send apply patches as JSON, which is valid YAML
            except json.JSONDecodeError:
                body = yaml.safe_load(raw)
                json.dumps(body, allow_nan=False)  # .nan/.inf have no JSON form: refused like NaN
                return body
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError):
                raise
            raise errors.bad_request(f"invalid request body: {exc}") from exc

    async def _resource(self, request: web.Request, group: str, version: str, rest: list[str]) -> web.StreamResponse:
        rtype, namespace, name, sub = self._locate(group, version, rest)
        q = request.query
        dry_run = "dryRun" in q
        field_validation = q.get("fieldValidation", "Warn")
        warnings: list[str] = []
        method = request.method
        store = self.store
        if name is None:
            if method == "GET" and _flag(request, "watch"):
                return await self._watch(request, rtype, namespace)
            if method == "GET":
                items = store.list(rtype, namespace, q.get("labelSelector"), q.get("fieldSelector"))
                return self._list_response(request, rtype, items)
            if method == "POST":
                obj = store.create(rtype, namespace, await self._body(request), dry_run=dry_run,
                                   field_validation=field_validation, warnings=warnings)
                return _json(obj, 201, warnings)
            if method == "DELETE":
                body = await self._body(request)
                for obj in store.list(rtype, namespace, q.get("labelSelector"), q.get("fieldSelector")):
                    store.delete(rtype, namespace, obj["metadata"]["name"],
                                 propagation=body.get("propagationPolicy") or q.get("propagationPolicy"))
                return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection")
        if sub == "scale":
            return await self._scale(request, rtype, namespace, name)
        if method == "GET" and sub is None:
            return self._list_response(request, rtype, [store.get(rtype, namespace, name)], single=True)
        if method == "GET":
            return _json(store.get(rtype, namespace, name))
        if method == "PUT":
            obj = store.replace(rtype, namespace, name, await self._body(request), subresource=sub,
                                dry_run=dry_run, field_validation=field_validation, warnings=warnings)
            return _json(obj, 200, warnings)
        if method == "PATCH":
            obj = store.patch(rtype, namespace, name, request.content_type, await self._body(request),
                              subresource=sub, field_manager=q.get("fieldManager"), dry_run=dry_run,
                              field_validation=field_validation, warnings=warnings)
            return _json(obj, 200, warnings)
        if method == "DELETE":
            body = await self._body(request)
            pre = body.get("preconditions") or {}
            grace = body.get("gracePeriodSeconds", q.get("gracePeriodSeconds"))
            obj = store.delete(rtype, namespace, name,
                               propagation=body.get("propagationPolicy") or q.get("propagationPolicy"),
                               preconditions=pre, dry_run=dry_run or bool(body.get("dryRun")),
                               grace_period=None if grace is None else int(grace))
            return _json(obj)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    def _list_response(self, request: web.Request, rtype: ResourceType, items: list[dict[str, Any]],
                       single: bool = False) -> web.Response:
        """A list, or one object; as a Table when kubectl asks for server-side printing."""
        rv = str(self.store.rv)
        meta: dict[str, Any] = {"resourceVersion": rv}
        if not single:
            items, meta = self._page(request, items, meta)
        if "as=Table" in request.headers.get("Accept", ""):
            table = to_table(rtype, items, rv, request.query.get("includeObject", "PartialObjectMetadata"))
            table["metadata"] = meta
            return _json(table)
        if single:
            return _json(items[0])
        return _json({"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version, "metadata": meta,
                      "items": items})

    @staticmethod
    def _page(request: web.Request, items: list[dict[str, Any]],
              meta: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """`limit`/`continue` chunking. The token holds the offset into the (name-sorted) list; unlike the
        real server's, later pages show the current state, not the first page's snapshot."""
        start = 0
        token = request.query.get("continue")
        if token:
            try:
                start = int(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise errors.bad_request(f"invalid continue token: {exc}") from exc
        limit = int(request.query.get("limit") or 0)
        if limit <= 0 and not start:
            return items, meta
        end = start + limit if limit > 0 else len(items)
        if end < len(items):
            meta = {**meta, "continue": base64.urlsafe_b64encode(json.dumps({"start": end}).encode()).decode(),
                    "remainingItemCount": len(items) - end}
        return items[start:end], meta

    async def _scale(self, request: web.Request, rtype: ResourceType, namespace: str | None, name: str) -> web.Response:
        if request.method in ("PUT", "PATCH"):
            body = await self._body(request)
            replicas = (body.get("spec") or {}).get("replicas")
            if replicas is not None:
                self.store.patch(rtype, namespace, name, "application/merge-patch+json",
                                 {"spec": {"replicas": int(replicas)}})
        obj = self.store.get(rtype, namespace, name)
        selector = ",".join(f"{k}={v}" for k, v in
                            ((obj.get("spec", {}).get("selector") or {}).get("matchLabels") or {}).items())
        return _json({"kind": "Scale", "apiVersion": "autoscaling/v1",
                      "metadata": {k: obj["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                                    "creationTimestamp") if k in obj["metadata"]},
                      "spec": {"replicas": obj.get("spec", {}).get("replicas", 0)},
                      "status": {"replicas": obj.get("status", {}).get("replicas", 0), "selector": selector}})

    async def _watch(self, request: web.Request, rtype: ResourceType, namespace: str | None) -> web.StreamResponse:
        q = request.query
        watch = self.store.watch(rtype, namespace, q.get("labelSelector"), q.get("fieldSelector"),
                                 q.get("resourceVersion"), _flag(request, "sendInitialEvents"))
        bookmarks = _flag(request, "allowWatchBookmarks")
        # `kubectl get -w` asks for Tables: then each event carries its object as a one-row Table.
        as_table = "as=Table" in request.headers.get("Accept", "")
        include = q.get("includeObject", "PartialObjectMetadata")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(q.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT_S)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        self._watch_agents[watch] = (request.headers.get("User-Agent", ""), request.path)
        try:
            await resp.prepare(request)
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    event_type, obj = await asyncio.wait_for(watch.queue.get(), min(remaining, BOOKMARK_EVERY_S))
                except TimeoutError:
                    if request.transport is None or request.transport.is_closing():
                        break  # the client left; aiohttp does not cancel the handler for us
                    if not bookmarks or loop.time() >= deadline:
                        continue
                    event_type, obj = "BOOKMARK", {"kind": rtype.kind, "apiVersion": rtype.api_version,
                                                   "metadata": {"resourceVersion": str(self.store.rv)}}
                if event_type == "BOOKMARK" and not bookmarks and "k8s.io/initial-events-end" not in str(obj):
                    continue
                if as_table and event_type in ("ADDED", "MODIFIED", "DELETED"):
                    obj = to_table(rtype, [obj], obj["metadata"]["resourceVersion"], include)
                await resp.write(json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode()
                                 + b"\n")
                if event_type == "ERROR":
                    break
        except ConnectionResetError:
            pass  # the client went away; its watch ends here
        finally:
            self._watch_agents.pop(watch, None)
            self.store.unwatch(watch)
        return resp
