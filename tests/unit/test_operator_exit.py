"""An operator that lost its Lease exits at once, even with threads blocked in API calls; a clean stop
still lets them finish."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A thread blocked far longer than the test waits: only an immediate exit ends the child in time.
CHILD = textwrap.dedent("""
    import asyncio, sys, time
    from specpilot.controller.commands import run_to_exit

    async def main() -> int:
        asyncio.get_running_loop().run_in_executor(None, time.sleep, {block})
        await asyncio.sleep(0.2)
        print("stopping", flush=True)
        return {code}

    sys.exit(run_to_exit(main()))
""")


def _child(code: int, block: float, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD.format(code=code, block=block)], capture_output=True,
                          text=True, timeout=timeout)


def test_a_lost_lease_ends_the_process_without_waiting_for_blocked_threads() -> None:
    out = _child(code=1, block=600, timeout=60)
    assert out.returncode == 1 and "stopping" in out.stdout, out.stderr


def test_a_clean_stop_waits_for_work_in_flight() -> None:
    out = _child(code=0, block=1, timeout=60)
    assert out.returncode == 0 and "stopping" in out.stdout, out.stderr
