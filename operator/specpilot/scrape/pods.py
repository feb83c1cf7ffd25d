"""Scrape serving pods' vLLM /metrics concurrently: one `Snapshot` per pod, or why there is none.

The tuning loop calls this once per window for every Ready pod of both tracks. A pod is not trusted:
each scrape has an overall deadline (retries included, so a pod trickling one line every few seconds
times out), a byte cap (read as a stream, so a pod sending gigabytes costs at most the cap in memory;
a compressed answer, although `identity` is asked for, is decoded one gzip or deflate layer at most and
never past the cap, its compressed bytes counting against the cap too), a cap on series (sample lines,
counted while reading, so millions of tiny series are refused before parsing), and is parsed in a worker
thread (a large exposition must not stall the event loop that renews the Lease). At most `concurrency` pods are scraped at once across the operator. A pod that fails, or
answers with something that is not a finite Prometheus exposition, is reported with the reason so the
loop can say why it made no decision; the other pods' scrapes are unaffected.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

# httpx's package imports its own command-line client (httpx._main: click, pygments and 55 modules of rich)
# whenever those are installed, as they are beside the harness; the operator never runs it. Marked absent,
# httpx keeps its stub `main` and `specpilot run` loads no console library (tests/unit/test_product_boundary.py).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
import httpx

from specpilot_runtime import vllm_metrics
from specpilot_runtime.vllm_metrics import NonFiniteSample, Snapshot

from specpilot.api.names import N_LABEL, PORT_NAME, TRACK_LABEL
from specpilot.display import bounded, printable

RETRIES = 2
RETRY_PAUSE_S = 0.2
# vLLM's exposition is tens of kB even with many engines; 4 MiB leaves ample room and bounds memory.
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
# vLLM 0.32's exposition of one engine is 442 sample lines (tests/fixtures), nearly all repeated per engine
# (382 carry an `engine` label): 8 data-parallel engines, both per-position counters at 64 positions, are
# about 4,200. 20,000 leaves nearly 5x room; 4 MiB of minimal lines (`a 1`) would be a million series to parse.
DEFAULT_MAX_SERIES = 20_000
# Characters of a pod's failure kept: enough for a parser's complaint and the start of the line it quotes.
MAX_ERROR_CHARS = 300


@dataclass(frozen=True)
class ScrapeLimits:
    """What one scrape of one pod may cost."""

    max_bytes: int = DEFAULT_MAX_BYTES  # the answer, decoded; and its compressed bytes, when compressed
    max_series: int = DEFAULT_MAX_SERIES  # sample lines (those not `#` comments)
    deadline_s: float = 5.0  # the whole scrape, retries included
    concurrency: int = 16  # pods scraped at once, across the operator


class ScrapeFailed(Exception):
    """This attempt failed; the message says why (retried while the deadline allows)."""


class ScrapeRefused(Exception):
    """The pod answered, but with something retrying will not fix."""


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


def pod_url(ip: Any, port: int | None) -> str:
    """`http://<pod IP>:<port>`, the IP bracketed when it is IPv6 (an IPv6 cluster's pods); "" when the pod
    has no IP yet, or one that is not an IP address."""
    try:
        address = ipaddress.ip_address(ip) if isinstance(ip, str) else None
    except ValueError:
        address = None
    if address is None or not port:
        return ""
    return f"http://[{address}]:{port}" if address.version == 6 else f"http://{address}:{port}"


def pod_targets(pods: list[dict[str, Any]]) -> list[PodTarget]:
    """Serving pods (those with a track and an N label) as scrape targets, by name."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        n = labels.get(N_LABEL, "")
        if TRACK_LABEL not in labels or not (n.isascii() and n.isdigit()):
            continue
        base = pod_url((pod.get("status") or {}).get("podIP"), _port(pod))
        url = f"{base}/metrics" if base else ""
        out.append(PodTarget(meta["name"], meta["uid"], labels[TRACK_LABEL], int(n), url, _ready(pod) and bool(url)))
    return sorted(out, key=lambda t: t.name)


_PIECE = 64 * 1024  # decoded bytes per zlib call
# Content-Encoding -> zlib's window bits; deflate's are chosen by its first two bytes (below).
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": None}


def _encoding(header: str) -> str | None:
    """The one layer to decode (None: the body is as is), or ScrapeRefused: decoding layer after layer
    is how 38 KB became 16 GiB."""
    layers = [e.strip().lower() for e in header.split(",")]
    layers = [e for e in layers if e and e != "identity"]
    if len(layers) > 1:
        raise ScrapeRefused(f"Content-Encoding {header[:64]!r} stacks {len(layers)} layers; at most one layer "
                            "(gzip or deflate) is decoded")
    if layers and layers[0] not in _WBITS:
        raise ScrapeRefused(f"Content-Encoding {layers[0][:32]!r} is not gzip or deflate")
    return layers[0] if layers else None


class _Body:
    """One answer read chunk by chunk as it came off the wire: decoded (one layer at most) into at most
    `max_bytes`, its compressed bytes at most `max_bytes` too, its sample lines counted as they come."""

    def __init__(self, encoding: str | None, limits: ScrapeLimits) -> None:
        self.encoding, self.limits = encoding, limits
        self.wire = 0  # bytes received (compressed, when encoded)
        self.out = bytearray()
        self.series = 0
        self.last = b"\n"  # the byte before the next decoded one: a line starts after a newline
        self.pending = b""  # deflate's first bytes, until they say zlib or raw
        wbits = _WBITS.get(encoding or "")
        self.inflater = zlib.decompressobj(wbits) if wbits else None

    def feed(self, chunk: bytes) -> None:
        self.wire += len(chunk)
        if self.encoding is None:
            if self.wire > self.limits.max_bytes:
                raise ScrapeRefused(f"exposition larger than the {self.limits.max_bytes}-byte cap")
            self._decoded(chunk)
            return
        if self.wire > self.limits.max_bytes:
            raise ScrapeRefused(f"compressed {self.encoding} answer larger than the {self.limits.max_bytes}-byte cap")
        if self.inflater is None:  # deflate: zlib-wrapped as the RFC says, or raw as some servers send it
            self.pending += chunk
            if len(self.pending) < 2:
                return
            chunk, self.pending = self.pending, b""
            zlib_header = chunk[0] & 0x0F == 8 and (chunk[0] << 8 | chunk[1]) % 31 == 0
            self.inflater = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        inflater = self.inflater
        try:
            while chunk:
                if inflater.eof:
                    raise ScrapeRefused(f"data after the end of the {self.encoding} stream")
                # Decoded a piece at a time, one byte past the cap at most: the rest waits in unconsumed_tail.
                room = min(self.limits.max_bytes - len(self.out) + 1, _PIECE)
                self._decoded(inflater.decompress(chunk, room))
                chunk = inflater.unconsumed_tail or inflater.unused_data
        except zlib.error as exc:
            raise ScrapeRefused(f"not valid {self.encoding} ({exc})") from exc

    def _decoded(self, data: bytes) -> None:
        if len(self.out) + len(data) > self.limits.max_bytes:
            what = "exposition" if self.encoding is None else f"{self.encoding} answer decodes to"
            raise ScrapeRefused(f"{what} more than the {self.limits.max_bytes}-byte cap")
        if not data:
            return
        # Lines starting in `data` (after a newline, the previous piece's last byte included), less comments.
        first = self.last == b"\n" and data[:1] != b"#"
        self.series += first + data.count(b"\n") - data.endswith(b"\n") - data.count(b"\n#")
        self.last = data[-1:]
        if self.series > self.limits.max_series:
            raise ScrapeRefused(f"more than {self.limits.max_series} series (sample lines): the series cap")
        self.out += data

    def finish(self) -> bytearray:
        if self.encoding is not None and not (self.inflater and self.inflater.eof):
            raise ScrapeFailed(f"the {self.encoding} stream ends early")
        return self.out


async def _fetch(client: httpx.AsyncClient, url: str, limits: ScrapeLimits) -> bytearray:
    """The body of one GET, within the limits (read as a stream: never more is held). Asks for it
    uncompressed; reads the bytes as sent (httpx's own decoding would decode every layer, unbounded)."""
    async with client.stream("GET", url, headers={"Accept-Encoding": "identity"}) as resp:
        if resp.status_code >= 500:
            raise ScrapeFailed(f"HTTP {resp.status_code}")
        if resp.status_code != 200:
            raise ScrapeRefused(f"HTTP {resp.status_code}")
        declared = resp.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limits.max_bytes:
            raise ScrapeRefused(f"exposition of {declared} bytes is larger than the {limits.max_bytes}-byte cap")
        if resp.is_stream_consumed:  # made in memory (a mock transport's): read, and decoded, when made
            body = _Body(None, limits)
            body.feed(resp.content)
            return body.finish()
        body = _Body(_encoding(resp.headers.get("content-encoding", "")), limits)
        async for chunk in resp.aiter_raw():
            body.feed(chunk)
        return body.finish()


def _parse(body: bytearray) -> Snapshot:
    text = body.decode("utf-8", errors="replace")
    snapshot = vllm_metrics.parse(text, time.time())
    if "vllm:" not in text:
        raise ScrapeRefused("no vllm: metrics in the exposition")
    return snapshot


async def _attempts(client: httpx.AsyncClient, target: PodTarget, retries: int, limits: ScrapeLimits) -> Snapshot:
    error = "not scraped"
    for attempt in range(retries + 1):
        if attempt:
            await asyncio.sleep(RETRY_PAUSE_S)
        try:
            body = await _fetch(client, target.url, limits)
        except httpx.TimeoutException:
            error = "timed out"
            continue
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
            continue
        except ScrapeFailed as exc:
            error = str(exc)
            continue
        try:
            # Parsing a few MB takes a while: off the event loop, which also renews the Lease.
            return await asyncio.to_thread(_parse, body)
        except NonFiniteSample as exc:
            raise ScrapeRefused(f"non-finite metric: {exc}") from exc
        except ValueError as exc:
            raise ScrapeRefused(f"not Prometheus metrics ({exc})") from exc
    raise ScrapeFailed(error)


async def scrape_pod(client: httpx.AsyncClient, target: PodTarget, retries: int = RETRIES,
                     limits: ScrapeLimits = ScrapeLimits()) -> PodScrape:
    """GET the pod's /metrics and parse it, within the limits; retried on connection errors, timeouts
    and 5xx until the deadline."""
    try:
        async with asyncio.timeout(limits.deadline_s):
            return PodScrape(target, await _attempts(client, target, retries, limits))
    except TimeoutError:
        return PodScrape(target, None, f"timed out: no complete answer within {limits.deadline_s}s")
    except (ScrapeFailed, ScrapeRefused) as exc:
        # The message may quote the pod's own text (a label value of megabytes): it goes into a status.
        return PodScrape(target, None, bounded(printable(str(exc)), MAX_ERROR_CHARS))


async def scrape_pods(client: httpx.AsyncClient, targets: list[PodTarget], retries: int = RETRIES,
                      limits: ScrapeLimits = ScrapeLimits(),
                      slots: asyncio.Semaphore | None = None) -> list[PodScrape]:
    """Scrape every Ready target, at most `limits.concurrency` at once (or as many as `slots` allows,
    when the caller shares one across objects)."""
    slots = slots or asyncio.Semaphore(limits.concurrency)

    async def one(target: PodTarget) -> PodScrape:
        async with slots:
            return await scrape_pod(client, target, retries, limits)
    return list(await asyncio.gather(*(one(t) for t in targets if t.ready)))


@dataclass
class Scraper:
    """The operator's one scraper: a shared connection pool and concurrency bound for every tuned object."""

    limits: ScrapeLimits = field(default_factory=ScrapeLimits)
    _client: httpx.AsyncClient | None = None
    _slots: asyncio.Semaphore | None = None

    async def scrape(self, targets: list[PodTarget]) -> list[PodScrape]:
        if self._client is None or self._slots is None:
            self._client, self._slots = client(self.limits), asyncio.Semaphore(self.limits.concurrency)
        return await scrape_pods(self._client, targets, RETRIES, self.limits, self._slots)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def client(limits: ScrapeLimits = ScrapeLimits()) -> httpx.AsyncClient:
    """The scraper's HTTP client: per-read timeouts inside the overall deadline, no proxies from the
    environment (pod IPs are local)."""
    return httpx.AsyncClient(timeout=httpx.Timeout(limits.deadline_s), trust_env=False,
                             limits=httpx.Limits(max_connections=limits.concurrency))
