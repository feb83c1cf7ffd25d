"""Scrape serving pods' vLLM /metrics concurrently: one `Snapshot` per pod, or why there is none.

The tuning loop calls this once per window for every Ready pod of both tracks. Each request has a
timeout and a few retries (a scrape that lands on a busy event loop or a dropped connection is not a
reason to lose a window); a pod that still fails, or answers with something that is not a Prometheus
exposition, is reported with the reason so the loop can say why it made no decision.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from specpilot_runtime import vllm_metrics
from specpilot_runtime.vllm_metrics import Snapshot

from specpilot.render.names import N_LABEL, TRACK_LABEL
from specpilot.render.pod import PORT_NAME

TIMEOUT_S = 5.0
RETRIES = 2
RETRY_PAUSE_S = 0.2


@dataclass(frozen=True)
class PodTarget:
    """One serving pod as the scraper sees it."""

    name: str
    uid: str
    track: str
    n: int
    url: str  # http://<pod IP>:<port>/metrics; empty while the pod has no IP
    ready: bool


@dataclass(frozen=True)
class PodScrape:
    target: PodTarget
    snapshot: Snapshot | None
    error: str | None = None  # set when snapshot is None


def _ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _port(pod: dict[str, Any]) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME:
                return int(port["containerPort"])
    return None


def pod_targets(pods: list[dict[str, Any]]) -> list[PodTarget]:
    """Serving pods (those with a track and an N label) as scrape targets, by name."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        n = labels.get(N_LABEL, "")
        if TRACK_LABEL not in labels or not n.isdigit():
            continue
        ip, port = (pod.get("status") or {}).get("podIP"), _port(pod)
        url = f"http://{ip}:{port}/metrics" if ip and port else ""
        out.append(PodTarget(meta["name"], meta["uid"], labels[TRACK_LABEL], int(n), url, _ready(pod) and bool(url)))
    return sorted(out, key=lambda t: t.name)


async def scrape_pod(client: httpx.AsyncClient, target: PodTarget, retries: int = RETRIES) -> PodScrape:
    """GET the pod's /metrics and parse it; retried on connection errors, timeouts and 5xx."""
    error = "not scraped"
    for attempt in range(retries + 1):
        if attempt:
            await asyncio.sleep(RETRY_PAUSE_S)
        try:
            resp = await client.get(target.url)
        except httpx.TimeoutException:
            error = f"timed out after {client.timeout.read}s"
            continue
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
            continue
        if resp.status_code >= 500:
            error = f"HTTP {resp.status_code}"
            continue
        if resp.status_code != 200:
            return PodScrape(target, None, f"HTTP {resp.status_code}")
        # Not an exposition, or not vLLM's: retrying will not make it one.
        try:
            snapshot = vllm_metrics.parse(resp.text, time.time())
        except ValueError as exc:
            return PodScrape(target, None, f"not Prometheus metrics ({exc})")
        if "vllm:" not in resp.text:
            return PodScrape(target, None, "no vllm: metrics in the exposition")
        return PodScrape(target, snapshot)
    return PodScrape(target, None, error)


async def scrape_pods(client: httpx.AsyncClient, targets: list[PodTarget], retries: int = RETRIES) -> list[PodScrape]:
    """Scrape every Ready target at once."""
    ready = [t for t in targets if t.ready]
    return list(await asyncio.gather(*(scrape_pod(client, t, retries) for t in ready)))


def client(timeout_s: float = TIMEOUT_S) -> httpx.AsyncClient:
    """The scraper's HTTP client: short timeouts, no proxies from the environment (pod IPs are local)."""
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), trust_env=False)
