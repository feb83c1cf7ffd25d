"""Kopf's connection: the kubernetes client's credentials, and the same write fence as `Kube`.

Kopf writes on its own (finalizers, its progress and diff-base annotations). It accepts a ready aiohttp
session from the login handler, so that session carries a request hook that refuses every write while the
fence is closed: a replica that lost the Lease sends nothing, whether from our code or Kopf's.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp
import kopf

from specpilot.controller.kube import WRITES, Fence, Kube


def connection_info(kube: Kube) -> kopf.ConnectionInfo:
    """Exactly the credentials the kubernetes client loaded: one source of truth."""
    cfg = kube.api.configuration
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook(cfg)  # in-cluster tokens rotate; Kopf calls the login again on a 401
    token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    scheme = None
    if token and " " in token:
        scheme, token = token.split(" ", 1)
    return kopf.ConnectionInfo(server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl,
                               scheme=scheme or ("Bearer" if token else None), token=token,
                               certificate_path=cfg.cert_file, private_key_path=cfg.key_file,
                               default_namespace="default")


def _fence_hook(fence: Fence) -> aiohttp.TraceConfig:
    async def on_request_start(_: aiohttp.ClientSession, __: SimpleNamespace,
                               params: aiohttp.TraceRequestStartParams) -> None:
        if params.method.upper() in WRITES:
            fence.check()  # raises NotLeader: aiohttp sends nothing
    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_request_start)
    return trace


def session(kube: Kube, fence: Fence | None) -> kopf.AiohttpSession:
    info = connection_info(kube)
    traces: list[Any] = [_fence_hook(fence)] if fence is not None else []
    http = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers={**info.as_http_headers(), "User-Agent": f"{kube.user_agent} kopf"}, trace_configs=traces)
    return kopf.AiohttpSession(server=info.server, default_namespace=info.default_namespace, aiohttp_session=http)
