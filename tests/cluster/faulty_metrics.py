"""A PodRuntime (`--pod-runtime faulty_metrics:FaultyMetrics`) whose pods are healthy but whose /metrics
is useless: pods of Deployments named `garbage...` answer 200 with an HTML page, those named `hang...`
never answer, those named `huge...` export a NaN sample under a label value of 3.5 MB (within the
operator's 4 MiB cap on an exposition; quoted whole, the reason would outgrow a status write), those named
`forged...` a well-formed exposition whose token counter grows by 1e300 per scrape (finite, and no
engine's)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

HUGE_LABEL = "x" * (3500 * 1024)


class FaultyMetrics:
    def __init__(self) -> None:
        self._runners: dict[str, web.AppRunner] = {}

    async def start(self, ctx: Any) -> None:
        hang, huge, forged = (ctx.name.startswith(kind) for kind in ("hang", "huge", "forged"))
        scrapes = 0

        async def metrics(_: web.Request) -> web.Response:
            nonlocal scrapes
            if hang:
                await asyncio.sleep(3600)
            if huge:
                return web.Response(text=f'vllm:num_requests_running{{model_name="{HUGE_LABEL}"}} NaN\n')
            if forged:
                scrapes += 1
                return web.Response(text="# TYPE vllm:generation_tokens counter\n"
                                         f'vllm:generation_tokens_total{{model_name="m"}} {scrapes * 1e300:g}\n'
                                         'vllm:num_requests_running{model_name="m"} 4\n')
            return web.Response(text="<html><body>502 Bad Gateway</body></html>", content_type="text/html")

        async def health(_: web.Request) -> web.Response:
            return web.Response()

        app = web.Application()
        app.add_routes([web.get("/metrics", metrics), web.get("/health", health)])
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, ctx.ip, ctx.ports()["http"]).start()
        self._runners[ctx.name] = runner

    async def ready(self, ctx: Any) -> bool:
        return True

    async def stop(self, ctx: Any) -> None:
        runner = self._runners.pop(ctx.name, None)
        if runner is not None:
            await runner.cleanup()
