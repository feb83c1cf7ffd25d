"""The node agent's client of a real kube-apiserver: a few verbs over httpx, with the agent's client
certificate, and a watch that resumes from the last resourceVersion (a new list after 410 Gone) and
outlasts the API server's refusals."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import httpx

log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text[:500]}")
        self.status = status


@dataclass(frozen=True)
class Credentials:
    url: str
    ca: Path
    cert: Path
    key: Path

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.cert), str(self.key))
        return ctx


class Api:
    def __init__(self, creds: Credentials) -> None:
        self.http = httpx.AsyncClient(base_url=creds.url, verify=creds.ssl_context(),
                                      timeout=httpx.Timeout(30.0, read=None),
                                      headers={"User-Agent": "specpilot-node-agent"})

    async def close(self) -> None:
        await self.http.aclose()

    async def _call(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                    params: dict[str, str] | None = None) -> Any:
        resp = await self.http.request(method, path, params=params, headers={"Content-Type": content_type},
                                       content=None if body is None else json.dumps(body))
        if resp.status_code >= 400:
            raise ApiError(resp.status_code, resp.text)
        return resp.json() if resp.content else None

    async def get(self, path: str, cached: bool = False) -> dict[str, Any] | None:
        """The object, None if there is none. `cached`: from kube-apiserver's watch cache (resourceVersion=0),
        as the kubelet reads what its pods mount, no etcd read; an object missing there is asked of etcd
        before it is called missing (the cache may not have seen it yet)."""
        try:
            found: dict[str, Any] = await self._call("GET", path, params={"resourceVersion": "0"} if cached else None)
            return found
        except ApiError as exc:
            if exc.status != 404:
                raise
        return await self.get(path) if cached else None

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        made: dict[str, Any] = await self._call("POST", path, body)
        return made

    async def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        done: dict[str, Any] = await self._call("PUT", path, body)
        return done

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        done: dict[str, Any] = await self._call("PATCH", path, patch, MERGE)
        return done

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> None:
        try:
            await self._call("DELETE", path, body)
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone already, or another object by now (uid precondition)
                raise

    async def watch(self, path: str, params: dict[str, str] | None = None) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """("ADDED"/"MODIFIED"/"DELETED", object) for everything at `path`, starting with what exists (as
        ADDED), as an informer does: it re-lists after the server expires the resourceVersion (410 Gone),
        reporting what vanished meanwhile as DELETED, and outlasts the server's refusals. A restarted
        kube-apiserver answers 403 until its RBAC cache is warm and 5xx while etcd is away; a watch that
        ended there would leave the node blind to every pod created after it."""
        version = ""
        known: dict[str, dict[str, Any]] = {}  # by uid: what the list and the stream have delivered
        refused = 0
        while True:
            try:
                if not version:
                    listed = await self._call("GET", path, params=params)
                    version = listed["metadata"]["resourceVersion"]
                    items = {(i.get("metadata") or {}).get("uid", ""): i for i in listed.get("items") or []}
                    for uid in [u for u in known if u not in items]:
                        yield "DELETED", known.pop(uid)
                    for uid, item in items.items():
                        known[uid] = item
                        yield "ADDED", item
                query = {**(params or {}), "watch": "1", "resourceVersion": version,
                         "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
                async with self.http.stream("GET", path, params=query) as resp:
                    if resp.status_code == 410:
                        version = ""
                        continue
                    if resp.status_code >= 400:
                        raise ApiError(resp.status_code, (await resp.aread()).decode(errors="replace"))
                    refused = 0
                    async for line in resp.aiter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            if obj.get("code") == 410:
                                version = ""
                            break
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        uid = (obj.get("metadata") or {}).get("uid", "")
                        if kind in ("ADDED", "MODIFIED"):
                            known[uid] = obj
                        elif kind == "DELETED":
                            known.pop(uid, None)
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            yield kind, obj
            except (httpx.TransportError, json.JSONDecodeError) as exc:
                # The API server restarting, say: resume from the same version once it answers again.
                log.debug("watch of %s broke (%s); resuming", path, exc)
                await asyncio.sleep(1.0)
            except ApiError as exc:
                refused += 1
                log.warning("watch of %s refused (%s); trying again", path, exc)
                await asyncio.sleep(min(5.0, 0.5 * refused))
