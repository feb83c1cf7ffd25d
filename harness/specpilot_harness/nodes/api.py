"""The node agent's client of a real kube-apiserver: a few verbs over httpx, with the agent's client
certificate, and a watch that resumes from the last resourceVersion (a new list after 410 Gone)."""

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
        ADDED); re-lists after the server expires the resourceVersion (410 Gone) or the stream ends badly."""
        version = ""
        while True:
            if not version:
                try:
                    listed = await self._call("GET", path, params=params)
                except httpx.TransportError:
                    await asyncio.sleep(1.0)
                    continue
                version = listed["metadata"]["resourceVersion"]
                for item in listed.get("items") or []:
                    yield "ADDED", item
            query = {**(params or {}), "watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true",
                     "timeoutSeconds": "300"}
            try:
                async with self.http.stream("GET", path, params=query) as resp:
                    if resp.status_code == 410:
                        version = ""
                        continue
                    if resp.status_code >= 400:
                        raise ApiError(resp.status_code, (await resp.aread()).decode(errors="replace"))
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
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            yield kind, obj
            except (httpx.TransportError, json.JSONDecodeError) as exc:
                # The API server restarting, say: resume from the same version once it answers again.
                log.debug("watch of %s broke (%s); resuming", path, exc)
                await asyncio.sleep(1.0)
