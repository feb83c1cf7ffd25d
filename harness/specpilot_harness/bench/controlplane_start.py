"""`specpilot bench controlplane`: how long the real control plane takes from a warm (cached) build to a
Ready API, and what its components hold in memory.

Each run starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on fresh data in a temporary
directory (`ControlPlane.start`: it returns once the apiserver's /readyz and the others' /healthz answer),
then stops them. A number to watch against the 30 s the sandbox promises, not a pass/fail: a test timing
it would fail on a loaded machine rather than on a slower start.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from specpilot_harness.controlplane import ControlPlane, binaries


def register(sub: argparse._SubParsersAction) -> None:
    """Adds `controlplane` to the subcommands of `specpilot bench`."""
    p = sub.add_parser("controlplane", help="time the real control plane's warm start to a Ready API",
                       description="Start and stop the sandbox's control plane (built and cached first if "
                                   "needed, outside the clock): seconds to a Ready API and each component's "
                                   "resident memory.")
    p.add_argument("--repeats", type=int, default=3, help="starts, the best and median reported (default %(default)s)")
    p.set_defaults(func=run)


def rss_mib(pid: int) -> int:
    """A process's resident memory, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))
    return round(int(kib) / 1024)


def run(args: argparse.Namespace) -> int:
    if args.repeats < 1:
        print("error: --repeats must be at least 1")
        return 2
    bin_dir = binaries()  # a build is not a start
    seconds: list[float] = []
    rss: dict[str, int] = {}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="specpilot-bench-controlplane-") as tmp:
            begun = time.monotonic()
            plane = ControlPlane.start(Path(tmp), bin_dir)
            try:
                seconds.append(time.monotonic() - begun)
                rss = {name: rss_mib(pid) for name, pid in plane.pids().items()}
            finally:
                plane.stop()
    print(f"control plane ready in best {min(seconds):.1f} s, median {statistics.median(seconds):.1f} s of "
          f"{len(seconds)} warm starts (target 30 s); RSS MiB {rss}, total {sum(rss.values())}")
    return 0
