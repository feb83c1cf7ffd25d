"""`python -m specpilot_harness.bench.operator_probe OUT -- <specpilot args>`: runs the specpilot CLI in this
process and appends, every few seconds, a JSON line to OUT with the operator event loop's asyncio task
count and the process's RSS, which a soak must see stay flat. The product exposes neither (a task count is
no operating metric), so the benchmark's own launcher samples them."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

from specpilot import cli

SAMPLE_S = 5.0


class _Recording(asyncio.DefaultEventLoopPolicy):
    """Remembers the loops it makes: `asyncio.run` in `specpilot run` makes exactly one."""

    loops: list[asyncio.AbstractEventLoop] = []

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        self.loops.append(loop)
        return loop


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _sample(out: Path) -> None:
    while True:
        time.sleep(SAMPLE_S)
        loop = next((lp for lp in reversed(_Recording.loops) if lp.is_running()), None)
        if loop is None:
            continue
        counted = threading.Event()
        tasks: list[int] = []

        def count() -> None:
            tasks.append(len(asyncio.all_tasks(loop)))
            counted.set()

        loop.call_soon_threadsafe(count)
        if counted.wait(SAMPLE_S):
            with out.open("a") as f:
                f.write(json.dumps({"t": time.time(), "tasks": tasks[0], "rss_mib": _rss_mib()}) + "\n")


def main() -> int:
    out, rest = Path(sys.argv[1]), sys.argv[3:]  # OUT -- args
    asyncio.set_event_loop_policy(_Recording())
    threading.Thread(target=_sample, args=(out,), daemon=True).start()
    return cli.main(rest)


if __name__ == "__main__":
    sys.exit(main())
