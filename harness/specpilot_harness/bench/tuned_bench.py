"""`specpilot bench tuned`: many SpeculativeDeployments with tuning on at once, served by simulated engines in
the sandbox (`specpilot sandbox --no-operator`, its own process), the operator as another. Once all are
Ready and a warm-up has passed, it measures for a while: how late each analysis window starts against the
one before (from the watch: `status.tuning.seq` moves once per window), windows per object (starvation),
the operator's CPU per tuned object, and, sampled by the operator's launcher (operator_probe.py), its RSS
and asyncio task count, which a soak must see stay flat. No client traffic is sent: what is measured is
the operator keeping many windows on time (scrapes, decisions, status writes), not the engines."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from specpilot.api.models import API_VERSION, KIND, PLURAL, duration_seconds
from specpilot_harness.bench.operator_bench import (NAMESPACE, _sandbox, _stop, api_session, cpu_s,
                                                    start_operator,
                                                    peak_rss_mib, percentile)
from specpilot_harness.ports import free_port
from specpilot_harness.sim.launch import SIM_PROFILE_ANNOTATION, SIM_TIME_SCALE_ANNOTATION

PROFILE = ("qwen35-122b-mtp-math500", "mtp", 3)  # (article profile, its method, a default N it serves)
# Targets for many tuned objects and the soak, printed (never asserted).
TARGET_LATENESS_PCT, TARGET_GROWTH_PCT, STARVED_BELOW = 5.0, 5.0, 0.5


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tuned", help="many tuned SpeculativeDeployments at once: window lateness, starvation, "
                                     "operator CPU, RSS and task count over time",
                       description="Start the sandbox (simulated engines) and the operator, apply that many "
                                   "SpeculativeDeployments with tuning on, wait until all are Ready and a warm-up "
                                   "has passed, then measure window lateness, windows per object, the operator's "
                                   "CPU per tuned object and its RSS and asyncio task count (growth after warm-up).")
    p.add_argument("--deployments", type=int, default=100, help="how many (default 100)")
    p.add_argument("--window", default="5s", help="analysisWindow of each (default 5s)")
    p.add_argument("--warmup", type=float, default=30.0, help="seconds after all are Ready before measuring")
    p.add_argument("--duration", type=float, default=120.0, help="seconds measured (default 120; a soak: 600)")
    p.add_argument("--deadline", type=float, default=300.0, help="seconds for all to be Ready (default 300)")
    p.add_argument("--json", type=Path, dest="json_out", help="write the numbers as JSON here")
    p.set_defaults(func=run)


def manifest(i: int, window: str) -> dict[str, Any]:
    profile, method, n = PROFILE
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": f"sd-{i:04d}", "namespace": NAMESPACE,
                         "annotations": {SIM_PROFILE_ANNOTATION: profile, SIM_TIME_SCALE_ANNOTATION: "1"}},
            "spec": {"model": f"org/model-{i:04d}", "speculative": {"method": method, "numSpeculativeTokens": n},
                     "tuning": {"enabled": True, "cooldown": "1h",
                                "canary": {"analysisWindow": window, "progressDeadline": "5m"}}}}


class Windows:
    """Per object: the wall time of each move of status.tuning.seq (one per window), and when it was Ready."""

    def __init__(self) -> None:
        self.seq: dict[str, int] = {}
        self.times: dict[str, list[float]] = {}
        self.ready: set[str] = set()

    def observe(self, obj: dict[str, Any]) -> None:
        name, status = obj["metadata"]["name"], obj.get("status") or {}
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
            self.ready.add(name)
        seq = (status.get("tuning") or {}).get("seq")
        if isinstance(seq, int) and seq != self.seq.get(name):
            self.seq[name] = seq
            self.times.setdefault(name, []).append(time.monotonic())


async def _watch(http: aiohttp.ClientSession, path: str, windows: Windows) -> None:
    async with http.get(path, params={"watch": "true"}, timeout=aiohttp.ClientTimeout(total=None)) as resp:
        async for line in resp.content:
            event = json.loads(line)
            if event["type"] in ("ADDED", "MODIFIED"):
                windows.observe(event["object"])


def lateness(windows: Windows, start: float, end: float, window_s: float) -> tuple[list[float], dict[str, int]]:
    """Seconds each window started after the one before it ended, and windows per object, in [start, end]."""
    late, counts = [], {}
    for name, times in windows.times.items():
        inside = [t for t in times if start <= t <= end]
        counts[name] = len(inside)
        late += [max(0.0, b - a - window_s) for a, b in zip(inside, inside[1:])]
    return late, counts


def growth_pct(samples: list[dict[str, Any]], key: str) -> float:
    """Last third's mean over the first third's, in percent: flat is 0."""
    values = [s[key] for s in samples]
    third = max(1, len(values) // 3)
    first, last = sum(values[:third]) / third, sum(values[-third:]) / third
    return (last / first - 1) * 100 if first else float("nan")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    window_s = duration_seconds(args.window)
    workdir = Path(tempfile.mkdtemp(prefix="specpilot-bench-tuned-"))
    sandbox, url, kubeconfig = await _sandbox(workdir)
    probe = workdir / "operator-probe.jsonl"
    log = (workdir / "operator.log").open("wb")
    operator: asyncio.subprocess.Process | None = None
    windows, watch = Windows(), None
    try:
        async with api_session(url, kubeconfig) as http:
            operator = proc = await start_operator(
                http, url, kubeconfig, workdir, ["-m", "specpilot_harness.bench.operator_probe", str(probe), "--"],
                free_port(), log)
            path = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/{PLURAL}"
            watch = asyncio.create_task(_watch(http, path, windows))
            applied = time.monotonic()
            for i in range(args.deployments):
                resp = await http.post(path, json=manifest(i, args.window))
                if resp.status != 201:
                    raise RuntimeError(f"create sd-{i:04d}: {resp.status} {(await resp.json()).get('message')}")
                await resp.read()
            while len(windows.ready) < args.deployments and time.monotonic() - applied < args.deadline:
                await asyncio.sleep(1)
            all_ready_s = time.monotonic() - applied
            await asyncio.sleep(args.warmup)
            start, cpu_before = time.monotonic(), cpu_s(proc.pid)
            skip = len(probe.read_text().splitlines()) if probe.exists() else 0
            await asyncio.sleep(args.duration)
            end, cpu_after = time.monotonic(), cpu_s(proc.pid)
        samples = [json.loads(line) for line in probe.read_text().splitlines()[skip:]] if probe.exists() else []
        rss = peak_rss_mib(proc.pid)
    finally:
        if watch is not None:
            watch.cancel()
        if operator is not None:
            await _stop(operator)
        log.close()
        await _stop(sandbox)
    late, counts = lateness(windows, start, end, window_s)
    expected = args.duration / window_s
    errors = [line for line in (workdir / "operator.log").read_text(errors="replace").splitlines()
              if " ERROR " in line]
    return {
        "deployments": args.deployments, "window_s": window_s, "ready": len(windows.ready),
        "all_ready_s": all_ready_s, "measured_s": end - start,
        "lateness_p50_ms": percentile(late, 50) * 1000, "lateness_p99_ms": percentile(late, 99) * 1000,
        "lateness_p99_pct_of_window": percentile(late, 99) / window_s * 100,
        "windows_expected_per_object": expected,
        "windows_min": min((counts.get(f"sd-{i:04d}", 0) for i in range(args.deployments)), default=0),
        "windows_median": percentile([float(counts.get(f"sd-{i:04d}", 0)) for i in range(args.deployments)], 50),
        "starved": sum(1 for i in range(args.deployments) if counts.get(f"sd-{i:04d}", 0) < STARVED_BELOW * expected),
        "operator_cpu_s": cpu_after - cpu_before,
        "operator_cpu_ms_per_object_window": (cpu_after - cpu_before) * 1000 / max(1, sum(counts.values())),
        "operator_cpu_pct_per_object": (cpu_after - cpu_before) / (end - start) * 100 / args.deployments,
        "operator_peak_rss_mib": rss,
        "rss_first_mib": samples[0]["rss_mib"] if samples else float("nan"),
        "rss_last_mib": samples[-1]["rss_mib"] if samples else float("nan"),
        "rss_growth_pct": growth_pct(samples, "rss_mib") if samples else float("nan"),
        "tasks_first": samples[0]["tasks"] if samples else float("nan"),
        "tasks_last": samples[-1]["tasks"] if samples else float("nan"),
        "tasks_growth_pct": growth_pct(samples, "tasks") if samples else float("nan"),
        "error_lines": len(errors), "first_error_lines": errors[:3],
        "operator_log": str(workdir / "operator.log"),
    }


def run(args: argparse.Namespace) -> int:
    r = asyncio.run(bench(args))
    print(f"specpilot bench tuned: {r['deployments']} tuned objects, window {r['window_s']:g} s: {r['ready']} Ready "
          f"after {r['all_ready_s']:.1f} s; measured {r['measured_s']:.0f} s after a {args.warmup:g} s warm-up")
    print(f"  window lateness p50 {r['lateness_p50_ms']:.0f} ms, p99 {r['lateness_p99_ms']:.0f} ms = "
          f"{r['lateness_p99_pct_of_window']:.1f}% of the window (target <= {TARGET_LATENESS_PCT:g}%: "
          f"{'yes' if r['lateness_p99_pct_of_window'] <= TARGET_LATENESS_PCT else 'NO'})")
    print(f"  windows per object: min {r['windows_min']}, median {r['windows_median']:.0f} of "
          f"{r['windows_expected_per_object']:.0f} expected; starved (< {STARVED_BELOW:.0%}): {r['starved']}")
    print(f"  operator CPU {r['operator_cpu_s']:.1f} s: {r['operator_cpu_pct_per_object']:.2f}% of a core per tuned "
          f"object, {r['operator_cpu_ms_per_object_window']:.1f} ms per window; peak RSS "
          f"{r['operator_peak_rss_mib']:.0f} MiB")
    print(f"  after warm-up: RSS {r['rss_first_mib']:.0f} -> {r['rss_last_mib']:.0f} MiB "
          f"(growth {r['rss_growth_pct']:+.1f}%), asyncio tasks {r['tasks_first']} -> {r['tasks_last']} "
          f"(growth {r['tasks_growth_pct']:+.1f}%; target <= {TARGET_GROWTH_PCT:g}% each)")
    print(f"  ERROR lines in the operator log: {r['error_lines']}; log {r['operator_log']}")
    for line in r["first_error_lines"]:
        print(f"    {line[:200]}")
    if args.json_out:
        args.json_out.write_text(json.dumps(r, indent=1) + "\n")
    return 0 if r["ready"] == r["deployments"] else 1
