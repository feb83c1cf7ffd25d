"""A pod's /metrics may come compressed although the scraper asks for `identity`: at most one layer (gzip
or deflate) is decoded, as a stream, never past the byte cap, and a pod with millions of tiny series is
refused before parsing. Before, httpx decoded every layer a pod named: 16 pods answering `gzip, gzip`
(16 GiB of zeros in 38 KB) took the operator to gigabytes, over the chart's 512Mi limit. Fake pods are
real HTTP servers; the memory test scrapes them from a subprocess, so its peak RSS is the scrape's own."""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import sys
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from specpilot.scrape import pods
from specpilot.scrape.pods import PodScrape, PodTarget, ScrapeLimits, scrape_pods
from specpilot_runtime import vllm_metrics

MiB = 1 << 20
FIXTURE = (Path(__file__).parents[1] / "fixtures" / "vllm-0.32-cpu-draft_model-n4.prom").read_bytes()
LIMITS = ScrapeLimits(max_bytes=256 * 1024, deadline_s=5.0, concurrency=4)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _crc32_shift(crc: int, zero_bytes: int) -> int:
    """The CRC-32 of some data followed by `zero_bytes` zeros, from the data's CRC (zlib's crc32_combine
    with a CRC of zeros for the second part: the CRC of gigabytes of zeros without reading them)."""
    def times(mat: list[int], vec: int) -> int:
        out, i = 0, 0
        while vec:
            if vec & 1:
                out ^= mat[i]
            vec, i = vec >> 1, i + 1
        return out

    def square(mat: list[int]) -> list[int]:
        return [times(mat, mat[n]) for n in range(32)]
    # crc32(data + zeros) = shift(crc32(data) ^ 0xffffffff) ^ 0xffffffff: the pre/post inversions of CRC-32.
    crc ^= 0xFFFFFFFF
    op = square(square(square([0xEDB88320] + [1 << n for n in range(31)])))  # one zero bit squared thrice: a byte
    while zero_bytes:
        if zero_bytes & 1:
            crc = times(op, crc)
        zero_bytes >>= 1
        op = square(op)
    return crc ^ 0xFFFFFFFF


@functools.cache
def gzip_of_zeros(mib: int) -> bytes:
    """A valid gzip member of `mib` MiB of zeros (about 1 KB per MiB), built in milliseconds: one MiB is
    compressed with a full flush (the compressor forgets it), so every further MiB compresses to the same
    bytes."""
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = c.compress(bytes(MiB)) + c.flush(zlib.Z_FULL_FLUSH)
    size = mib * MiB
    trailer = _crc32_shift(0, size).to_bytes(4, "little") + (size % 2**32).to_bytes(4, "little")
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + block * mib + c.flush() + trailer


@functools.cache
def bombs() -> dict[str, bytes]:
    """Content-Encoding -> body: one layer of 4 GiB of zeros (4 MB), and two layers of 16 GiB (38 KB)."""
    return {"gzip": gzip_of_zeros(4096), "gzip, gzip": gzip.compress(gzip_of_zeros(16384), 9)}


def test_the_bomb_builder_makes_valid_gzip() -> None:
    assert gzip.decompress(gzip_of_zeros(3)) == bytes(3 * MiB)


def streamed(body: bytes, encoding: str, seen: list[str] | None = None, piece: int = 64 * 1024) -> Handler:
    """A pod answering `body` with this Content-Encoding, chunked (no Content-Length to refuse it by), in
    pieces; it records the Accept-Encoding it was sent."""
    async def handler(request: web.Request) -> web.StreamResponse:
        if seen is not None:
            seen.append(request.headers.get("Accept-Encoding", "<none>"))
        resp = web.StreamResponse(headers={"Content-Encoding": encoding} if encoding else {})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            for start in range(0, len(body), piece):
                await resp.write(body[start:start + piece])
        except (ConnectionError, RuntimeError):
            pass  # the scraper hung up
        return resp
    return handler


@asynccontextmanager
async def servers(handlers: dict[str, Handler]) -> AsyncIterator[dict[str, PodTarget]]:
    """One HTTP server on loopback per pod."""
    runners, targets = [], {}
    try:
        for name, handler in handlers.items():
            app = web.Application()
            app.router.add_get("/metrics", handler)
            runner = web.AppRunner(app, shutdown_timeout=0.1)
            await runner.setup()
            runners.append(runner)
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            targets[name] = PodTarget(name, f"uid-{name}", "stable", 3, f"http://127.0.0.1:{port}/metrics", True)
        yield targets
    finally:
        for runner in runners:
            await runner.cleanup()


def scrape(handlers: dict[str, Handler], limits: ScrapeLimits = LIMITS) -> dict[str, PodScrape]:
    async def run() -> list[PodScrape]:
        async with servers(handlers) as targets:
            async with pods.client(limits) as client:
                return await scrape_pods(client, list(targets.values()), retries=0, limits=limits)
    return {s.target.name: s for s in asyncio.run(run())}


# The scraping side of the memory test: the product's client and scrape_pods with the default limits, its
# address space capped so that a regression fails this test rather than the machine.
CHILD = r"""
import asyncio, json, resource, sys, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
from specpilot.scrape import pods

def used(rss):  # KiB: the current RSS, or the peak so far; CPU-seconds
    r = resource.getrusage(resource.RUSAGE_SELF)
    now = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() // 1024
    return now if rss == "now" else r.ru_maxrss, r.ru_utime + r.ru_stime

async def main(urls):
    targets = [pods.PodTarget(f"pod-{i}", f"uid-{i}", "stable", 3, url, True) for i, url in enumerate(urls)]
    limits = pods.ScrapeLimits()
    async with pods.client(limits) as client:
        rss0, cpu0 = used("now")
        tracemalloc.start()
        got = await pods.scrape_pods(client, targets, limits=limits)
        traced_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rss1, cpu1 = used("peak")
    print(json.dumps({"errors": {s.target.name: s.error for s in got}, "rss_growth_mib": (rss1 - rss0) / 1024,
                      "traced_peak_mib": traced_peak / 2**20, "cpu_s": cpu1 - cpu0}))

asyncio.run(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("encoding", ["gzip", "gzip, gzip"])
def test_sixteen_gzip_bombs_are_refused_within_little_memory(encoding: str) -> None:
    body = bombs()[encoding]

    async def run() -> dict[str, object]:
        async with servers({f"pod-{i}": streamed(body, encoding) for i in range(16)}) as targets:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", CHILD, *(t.url for t in targets.values()),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            try:
                out, err = await asyncio.wait_for(proc.communicate(), 60)
            except TimeoutError:  # before bounded decoding: the event loop decoded 16 GiB, deadline or not
                proc.kill()
                await proc.wait()
                raise
        assert proc.returncode == 0, err.decode()[-3000:]
        return dict(json.loads(out))
    got = asyncio.run(run())
    print(f"16 pods, {encoding}: peak RSS +{got['rss_growth_mib']:.1f} MiB, Python allocations peak "
          f"{got['traced_peak_mib']:.1f} MiB, {got['cpu_s']:.2f} CPU-s")
    errors = got["errors"]
    assert isinstance(errors, dict) and len(errors) == 16
    limit = "one layer" if "," in encoding else f"{ScrapeLimits().max_bytes}-byte cap"
    for name, error in errors.items():
        # On a loaded machine a pod's stream may not reach the cap before the scrape's deadline: refused too.
        assert error and (limit in error or error.startswith("timed out")), (name, error)
    assert any(limit in error for error in errors.values()), errors
    # The chart's limit is 512Mi. Measured on 2 cores: peak RSS +65 MiB over the RSS before (an upper bound:
    # it includes the imports' own peak), 63 MiB of Python allocations at most (16 pods of up to the 4 MiB
    # cap), 0.5 CPU-s. Before, one layer took +955 MiB of peak RSS and 3.2 CPU-s; two layers took 4.4 GiB
    # and 87 CPU-s and had not finished after two minutes (the event loop decoding, the deadline unheard).
    # RSS also counts what the child's imports and event loop peak at, which moves with the machine's load
    # (+60 MiB quiet, +210 MiB beside a full test run): the bound is the chart's limit with room to spare; the
    # scrape's own allocations (tracemalloc) are what the fix bounds.
    assert got["rss_growth_mib"] < 400 and got["traced_peak_mib"] < 200, got  # type: ignore[operator]


def test_identity_is_asked_for() -> None:
    seen: list[str] = []
    got = scrape({"plain": streamed(FIXTURE, "", seen)})
    assert got["plain"].snapshot is not None
    assert seen == ["identity"]


def test_one_layer_of_gzip_or_deflate_still_parses() -> None:
    expected = vllm_metrics.parse(FIXTURE.decode())
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    got = scrape({"gzip": streamed(gzip.compress(FIXTURE), "gzip", piece=1000),
                  "x-gzip": streamed(gzip.compress(FIXTURE), "x-gzip"),
                  "deflate": streamed(zlib.compress(FIXTURE), "deflate", piece=1),
                  "raw-deflate": streamed(raw.compress(FIXTURE) + raw.flush(), "Deflate")})
    for name, s in got.items():
        assert s.snapshot is not None, (name, s.error)
        assert s.snapshot.drafts == expected.drafts > 0 and s.snapshot.accepted_per_pos == expected.accepted_per_pos


def test_unknown_and_stacked_encodings_are_refused_by_name() -> None:
    body = gzip.compress(FIXTURE)
    got = scrape({"br": streamed(body, "br"), "stacked": streamed(gzip.compress(body), "gzip, gzip"),
                  "deflate-gzip": streamed(body, "deflate,gzip"), "good": streamed(body, "gzip")})
    assert "'br'" in (got["br"].error or "") and "gzip or deflate" in (got["br"].error or ""), got["br"]
    for name in ("stacked", "deflate-gzip"):
        assert got[name].snapshot is None and "one layer" in (got[name].error or ""), got[name]
    assert got["good"].snapshot is not None


def test_compressed_input_counts_against_the_cap() -> None:
    """Empty deflate blocks decode to nothing: 5 bytes each, forever, would cost CPU and never the decoded cap."""
    empty_stored_block = b"\x00\x00\x00\xff\xff"  # not final, stored, length 0
    body = b"\x78\x9c" + empty_stored_block * (4 * LIMITS.max_bytes // 5)  # a zlib header, then only those
    assert zlib.decompressobj().decompress(body) == b""
    got = scrape({"empty-blocks": streamed(body, "deflate")})
    error = got["empty-blocks"].error or ""
    assert "compressed" in error and f"{LIMITS.max_bytes}-byte cap" in error, error


def test_the_series_cap_refuses_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[int] = []
    real = pods.vllm_metrics.parse

    def spy(text: str, scrape_time: float = 0.0) -> vllm_metrics.Snapshot:
        parsed.append(len(text))
        return real(text, scrape_time)
    monkeypatch.setattr(pods.vllm_metrics, "parse", spy)
    limits = ScrapeLimits(max_series=1000)
    many = FIXTURE.splitlines(keepends=True)[:40] + [b"vllm:x%d 1\n" % i for i in range(1001)]
    got = scrape({"many": streamed(b"".join(many), ""), "many-gzip": streamed(gzip.compress(b"".join(many)), "gzip"),
                  "real": streamed(FIXTURE, "")}, limits)
    for name in ("many", "many-gzip"):
        assert got[name].snapshot is None and "more than 1000 series" in (got[name].error or ""), got[name]
    assert got["real"].snapshot is not None and len(parsed) == 1


def test_the_default_series_cap_leaves_room_for_many_engines() -> None:
    """The fixture is one engine; a pod of 8 data-parallel engines repeats nearly every line per engine."""
    samples = [line for line in FIXTURE.splitlines() if line and not line.startswith(b"#")]
    assert 8 * len(samples) < ScrapeLimits().max_series / 4
