"""The simulated vLLM server: the HTTP edge and the asyncio loop that paces engine steps.

Start one in-process with `async with SimServer(config) as sim: ... sim.url ...`, or as a process with
`specpilot-runtime simulate`. Endpoints: /v1/completions and /v1/chat/completions (streamed or whole),
/health, /v1/models, /version, /metrics.

With a live file (engine.json's `live_file`), the server polls it and has the engine serve what it asks
(`specpilot_runtime.live`): a refused file is logged once and counted, and the engine keeps serving what it
served; /metrics then carries the switchback counters and the K in force.

Time: the engine has its own clock (seconds) that each step advances by the profile's step time; the loop
sleeps so that engine time runs `time_scale` times faster than wall time. Latency metrics are taken on
the engine clock (so they reflect the profile exactly even when the host is slow) and reported in wall
seconds (engine seconds / time_scale), as a real engine's would be.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from specpilot_runtime import live
from .engine import Emission, Engine
from .live_arms import LiveArms, LiveFile, started_arm
from .metrics import SimMetrics
from .openai_api import BadRequest, GenerationRequest, ResponseBuilder, filler_text, parse_request
from .profile import Profile

# What /version reports: the vLLM release whose surface the simulator copies, marked as simulated.
VERSION = "0.32.0+specpilot.sim"
# How often the live file is polled (wall seconds): a real engine checks about once a second.
LIVE_POLL_S = 1.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimConfig:
    profile: Profile
    num_speculative_tokens: int
    served_model_name: str
    method: str
    host: str = "127.0.0.1"
    port: int = 8000
    time_scale: float = 1.0
    seed: int | None = None
    max_num_seqs: int = 256
    max_model_len: int = 4096
    kv_cache_tokens: int = 131072
    drafted_per_position_metric: bool = True  # specpilot's plugin counter, as EngineConfig's flag
    # vLLM's --shutdown-timeout (wall seconds): on shutdown, refuse new requests and let those in flight
    # finish for this long; 0 (vLLM's default) aborts them at once.
    shutdown_timeout_s: float = 0.0
    # vLLM's num_speculative_tokens_per_batch_size, as the pod's speculative config gives it: (lo, hi, K)
    # rows; None drafts N at every batch size.
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] | None = None
    # engine.json's live_file: the live.json the engine follows (draft length set live); None: K is fixed.
    live_file: str | None = None
    live_poll_s: float = LIVE_POLL_S


class EngineDead(RuntimeError):
    """The step loop stopped; requests in flight cannot finish."""


class Stream:
    """The emissions of one request, in order; `close()` aborts it if it has not finished."""

    def __init__(self, loop: EngineLoop, request_id: str) -> None:
        self.request_id = request_id
        self._loop = loop
        self._queue: asyncio.Queue[Emission | None] = asyncio.Queue()
        self.finished = False

    def deliver(self, item: Emission | None) -> None:
        """Called by the engine loop; None means the loop stopped."""
        self._queue.put_nowait(item)

    async def next(self) -> Emission:
        item = await self._queue.get()
        if item is None:
            raise EngineDead("the simulated engine stopped")
        self.finished = item.finished
        return item

    def close(self) -> None:
        self._loop.release(self)


class EngineLoop:
    """Runs engine steps while there is work and hands each request its tokens."""

    def __init__(self, engine: Engine, metrics: SimMetrics, time_scale: float) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.engine = engine
        self.metrics = metrics
        self.time_scale = time_scale
        self._t0 = time.monotonic()
        self._wake = asyncio.Event()
        self._streams: dict[str, Stream] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine-loop")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def healthy(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def in_flight(self) -> int:
        return len(self._streams)

    async def idle(self) -> None:
        """Return once no request is in flight (new ones must already be refused)."""
        while self._streams and self.healthy:
            await asyncio.sleep(0.05)

    def engine_now(self) -> float:
        return (time.monotonic() - self._t0) * self.time_scale

    def submit(self, prompt_tokens: int, max_tokens: int) -> Stream:
        if not self.healthy:
            raise EngineDead("the simulated engine is not running")
        stream = Stream(self, f"cmpl-{uuid.uuid4().hex}")
        self._streams[stream.request_id] = stream
        self.engine.catch_up(self.engine_now())
        self.engine.submit(stream.request_id, prompt_tokens, max_tokens)
        self.metrics.set_queue(self.engine.running, self.engine.waiting)
        self._wake.set()
        return stream

    def release(self, stream: Stream) -> None:
        self._streams.pop(stream.request_id, None)
        if not stream.finished:
            self.engine.abort(stream.request_id)
            self.metrics.set_queue(self.engine.running, self.engine.waiting)

    async def _run(self) -> None:
        try:
            while True:
                if not self.engine.busy:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                step = self.engine.step()
                # Sleep to the step's end on the scaled wall clock; a late wake-up shortens the next
                # sleep, so wall pacing does not drift.
                await asyncio.sleep(max(0.0, self._t0 + step.end / self.time_scale - time.monotonic()))
                self.metrics.record(step)
                # From the engine, not the step: requests came and went while the step ran.
                self.metrics.set_queue(self.engine.running, self.engine.waiting)
                for emission in step.emissions:
                    stream = self._streams.get(emission.request_id)
                    if stream is not None:
                        stream.deliver(emission)
        finally:
            for stream in self._streams.values():
                stream.deliver(None)


def _error(status: int, message: str, kind: str) -> web.Response:
    """vLLM's error body."""
    return web.json_response({"object": "error", "message": message, "type": kind, "param": None,
                              "code": status}, status=status)


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class SimServer:
    """One simulated vLLM engine behind aiohttp."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.metrics = SimMetrics(config.served_model_name, config.num_speculative_tokens,
                                  config.drafted_per_position_metric, config.time_scale)
        self.engine = Engine(config.profile, config.num_speculative_tokens, random.Random(config.seed),
                             max_num_seqs=config.max_num_seqs, kv_cache_tokens=config.kv_cache_tokens,
                             schedule=config.num_speculative_tokens_per_batch_size)
        if config.live_file is not None:
            self.engine.live = LiveArms(started_arm(config.num_speculative_tokens_per_batch_size,
                                                    config.num_speculative_tokens), config.time_scale)
        self._live_task: asyncio.Task[None] | None = None
        self._loop: EngineLoop | None = None
        self._runner: web.AppRunner | None = None
        self._draining = False
        self.port = config.port
        self._started = int(time.time())

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    async def start(self) -> None:
        self._loop = EngineLoop(self.engine, self.metrics, self.config.time_scale)
        self._loop.start()
        if self.config.live_file is not None:
            self._live_task = asyncio.get_running_loop().create_task(
                self._follow_live(self._loop, LiveFile(Path(self.config.live_file))), name="sim-live-file")
        app = web.Application()
        app.add_routes([
            web.get("/health", self._health),
            web.get("/version", self._version),
            web.get("/v1/models", self._models),
            web.get("/metrics", self._metrics),
            web.post("/v1/completions", self._completions),
            web.post("/v1/chat/completions", self._chat),
        ])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        try:
            await site.start()
        except OSError:
            await self.stop()
            raise
        self.port = self._runner.addresses[0][1]

    async def shutdown(self) -> None:
        """What vLLM does on SIGTERM: refuse new requests (503), let those in flight finish within
        `shutdown_timeout_s`, then stop, aborting whatever is left."""
        self._draining = True
        if self._loop is not None and self.config.shutdown_timeout_s > 0:
            try:
                await asyncio.wait_for(self._loop.idle(), self.config.shutdown_timeout_s)
            except TimeoutError:
                pass
        await self.stop()

    async def stop(self) -> None:
        if self._live_task is not None:
            self._live_task.cancel()
            await asyncio.gather(self._live_task, return_exceptions=True)
        # Engine first: requests in flight then end with an error at once instead of holding the
        # HTTP shutdown until they finish.
        if self._loop is not None:
            await self._loop.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _health(self, _: web.Request) -> web.Response:
        ok = self._loop is not None and self._loop.healthy and not self._draining
        return web.Response(status=200 if ok else 503)

    async def _version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": VERSION})

    async def _models(self, _: web.Request) -> web.Response:
        name = self.config.served_model_name
        return web.json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": self._started, "owned_by": "vllm", "root": name,
            "parent": None, "max_model_len": self.config.max_model_len}]})

    async def _follow_live(self, loop: EngineLoop, source: LiveFile) -> None:
        while True:
            data = source.poll()
            if data is not None:
                self._apply_live(loop, data, source.path)
            await asyncio.sleep(self.config.live_poll_s)

    def _apply_live(self, loop: EngineLoop, data: bytes, path: Path) -> None:
        arms = self.engine.live
        assert arms is not None
        try:
            # One engine core per simulated server: no data parallelism to refuse a table under.
            config = live.parse_live(data, self.config.num_speculative_tokens, self.config.method, 1)
        except live.LiveConfigError as e:
            arms.rejected += 1
            if arms.first_refusal(data):
                log.warning("%s refused (%s); serving %s as before", path, e,
                            arms.arm_at(max(self.engine.clock, loop.engine_now())).key)
            return
        if arms.follow(config, max(self.engine.clock, loop.engine_now())):
            log.info("%s: serving %s", path, " / ".join(a.key for a in config.arms))

    def _live_exposition(self) -> str:
        arms = self.engine.live
        if arms is None or self._loop is None:
            return ""
        in_force = arms.arm_at(max(self.engine.clock, self._loop.engine_now()))
        return live.exposition(arms.counters, in_force, arms.arms, self.config.num_speculative_tokens,
                               live.bands_up_to(self.config.max_num_seqs), rejected=arms.rejected)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition() + self._live_exposition().encode(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "request body is not valid JSON", "BadRequestError")
        try:
            req = parse_request(body, chat, self.config.max_model_len)
        except BadRequest as e:
            return _error(400, str(e), "BadRequestError")
        if req.model != self.config.served_model_name:
            return _error(404, f"The model `{req.model}` does not exist.", "NotFoundError")
        if self._loop is None or not self._loop.healthy:
            return _error(503, "the engine is not running", "ServiceUnavailableError")
        if self._draining:
            return _error(503, "the server is shutting down", "ServiceUnavailableError")
        stream = self._loop.submit(req.prompt_tokens, req.max_tokens)
        try:
            if req.stream:
                return await self._stream(request, req, stream)
            return await self._whole(req, stream)
        except EngineDead as e:
            return _error(500, str(e), "InternalServerError")
        finally:
            stream.close()

    async def _whole(self, req: GenerationRequest, stream: Stream) -> web.Response:
        builder = ResponseBuilder(stream.request_id, req)
        generated = 0
        while not stream.finished:
            emission = await stream.next()
            generated += emission.tokens
        return web.json_response(builder.whole(filler_text(0, generated), generated))

    async def _stream(self, request: web.Request, req: GenerationRequest, stream: Stream) -> web.StreamResponse:
        builder = ResponseBuilder(stream.request_id, req)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            await self._write_events(response, builder, stream)
        except ConnectionResetError:
            pass  # the client hung up; closing the stream aborts the request
        return response

    async def _write_events(self, response: web.StreamResponse, builder: ResponseBuilder, stream: Stream) -> None:
        if builder.req.chat:
            await response.write(_sse(builder.role_chunk()))
        generated = 0
        try:
            while not stream.finished:
                emission = await stream.next()
                await response.write(_sse(builder.chunk(filler_text(generated, emission.tokens), emission.finished)))
                generated += emission.tokens
        except EngineDead as e:
            # Headers are gone already: vLLM reports a failure mid-stream as an error event.
            await response.write(_sse({"error": {"message": str(e), "type": "InternalServerError", "code": 500}}))
        if builder.req.include_usage:
            await response.write(_sse(builder.usage_chunk(generated)))
        await response.write(_sse("[DONE]"))
        await response.write_eof()
