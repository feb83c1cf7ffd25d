"""`specpilot bench operator`: many SpeculativeDeployments applied at once to the sandbox, with the
real operator (`specpilot run`) as a subprocess. Measures how long until every object has its children
and is Ready, the operator's reconcile durations, and its peak memory."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from specpilot.api.models import API_VERSION, KIND, PLURAL
from specpilot.controller import metric_names
from specpilot_harness.sandbox.cluster import Sandbox
from specpilot_harness.sandbox.resources import ResourceType
from specpilot_harness.ports import free_port

NAMESPACE = "bench"
METHODS = (("ngram", None), ("mtp", None), ("eagle3", "org/eagle3-draft"), ("draft_model", "org/small-draft"))


def register(sub: argparse._SubParsersAction) -> None:
    """Adds `operator` to the subcommands of `specpilot bench`."""
    p = sub.add_parser("operator", help="apply many SpeculativeDeployments to the sandbox at once",
                       description="Start the sandbox and the operator, apply N SpeculativeDeployments at once, "
                                   "and report apply-to-children and apply-to-Ready latency, reconcile "
                                   "durations and the operator's peak RSS.")
    p.add_argument("--deployments", type=int, default=200, help="how many (default 200)")
    p.add_argument("--deadline", type=float, default=60.0, help="seconds all must be Ready within (default 60)")
    p.add_argument("--json", type=Path, dest="json_out", help="write the numbers as JSON here")
    p.set_defaults(func=run)


def manifest(i: int) -> dict[str, Any]:
    method, draft = METHODS[i % len(METHODS)]
    speculative: dict[str, Any] = {"method": method, "numSpeculativeTokens": 1 + i % 5}
    if draft:
        speculative["draftModel"] = draft
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": f"sd-{i:04d}", "namespace": NAMESPACE},
            "spec": {"model": "Qwen/Qwen3-8B", "speculative": speculative}}


@dataclass
class Timeline:
    applied: dict[str, float] = field(default_factory=dict)
    children: dict[str, float] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)
    all_ready: asyncio.Event = field(default_factory=asyncio.Event)
    expected: int = 0

    def observe(self, event_type: str, rtype: ResourceType, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata", {})
        if meta.get("namespace") != NAMESPACE or event_type == "DELETED":
            return
        now = time.monotonic()
        if rtype.kind == "Deployment":
            owner = (meta.get("labels") or {}).get("specpilot.io/deployment")
            if owner:
                self.children.setdefault(owner, now)
        elif rtype.kind == KIND:
            status = obj.get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            if ready and status.get("observedGeneration") == meta.get("generation"):
                self.ready.setdefault(meta["name"], now)
                if len(self.ready) >= self.expected:
                    self.all_ready.set()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def histogram_quantile(text: str, name: str, q: float) -> float:
    """Prometheus' histogram_quantile over one unlabelled histogram in an exposition text."""
    buckets = []
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    rank, prev_le, prev_count = q * buckets[-1][1], 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_count) / max(count - prev_count, 1e-9))
        prev_le, prev_count = le, count
    return prev_le


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _metric_total(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


async def bench(count: int, deadline_s: float) -> dict[str, Any]:
    sandbox = Sandbox()
    url = await sandbox.start(0)
    workdir = Path(tempfile.mkdtemp(prefix="specpilot-bench-"))
    kubeconfig = sandbox.write_kubeconfig(workdir / "kubeconfig")
    metrics_port = free_port()
    log = (workdir / "operator.log").open("wb")
    operator = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specpilot.cli", "run", "--kubeconfig", str(kubeconfig), "--metrics-host",
        "127.0.0.1", "--metrics-port", str(metrics_port), "--lease-namespace", "kube-system",
        stdout=log, stderr=log)
    timeline = Timeline(expected=count)
    sandbox.api.store.listeners.append(timeline.observe)
    try:
        async with aiohttp.ClientSession(base_url=url) as http:
            await (await http.post("/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}})).read()
            await _wait_for_leader(http)
            path = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/{PLURAL}"

            async def create(i: int) -> None:
                resp = await http.post(path, json=manifest(i))
                body = await resp.json()
                if resp.status != 201:
                    raise RuntimeError(f"create sd-{i:04d}: {resp.status} {body.get('message')}")
                timeline.applied[body["metadata"]["name"]] = time.monotonic()

            started = time.monotonic()
            await asyncio.gather(*(create(i) for i in range(count)))
            try:
                await asyncio.wait_for(timeline.all_ready.wait(), deadline_s)
            except TimeoutError:
                pass
            elapsed = time.monotonic() - started
        metrics = await asyncio.to_thread(_scrape, metrics_port)
        rss = peak_rss_mib(operator.pid)
    finally:
        operator.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(operator.wait(), 20)
        except TimeoutError:
            operator.kill()
        log.close()
        await sandbox.stop()
    to_children = [timeline.children[n] - t for n, t in timeline.applied.items() if n in timeline.children]
    to_ready = [timeline.ready[n] - t for n, t in timeline.applied.items() if n in timeline.ready]
    duration = metric_names.RECONCILE_DURATION
    return {
        "deployments": count, "with_children": len(to_children), "ready": len(to_ready),
        "all_ready_within_deadline": len(to_ready) == count, "deadline_s": deadline_s,
        "seconds_until_last_ready": max(to_ready, default=float("nan")), "wall_s": elapsed,
        "apply_to_children_s": {"p50": percentile(to_children, 50), "p99": percentile(to_children, 99)},
        "apply_to_ready_s": {"p50": percentile(to_ready, 50), "p99": percentile(to_ready, 99),
                             "mean": statistics.fmean(to_ready) if to_ready else float("nan")},
        "reconcile_duration_s": {"p50": histogram_quantile(metrics, duration, 0.5),
                                 "p99": histogram_quantile(metrics, duration, 0.99)},
        "reconciles": _metric_total(metrics, metric_names.RECONCILES_TOTAL),
        "reconcile_errors": _metric_total(metrics, metric_names.RECONCILE_ERRORS_TOTAL),
        "operator_peak_rss_mib": rss, "operator_log": str(workdir / "operator.log"),
    }


async def _wait_for_leader(http: aiohttp.ClientSession) -> None:
    """The operator is up once it holds its Lease: only then are objects applied 'at once' to it."""
    while True:
        resp = await http.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/specpilot-operator")
        if resp.status == 200 and ((await resp.json()).get("spec") or {}).get("holderIdentity"):
            return
        await resp.read()
        await asyncio.sleep(0.2)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(bench(args.deployments, args.deadline))
    print(f"specpilot bench operator: {result['deployments']} SpeculativeDeployments applied at once\n"
          f"  with children: {result['with_children']}, Ready: {result['ready']} "
          f"(all within {result['deadline_s']:.0f} s: {'yes' if result['all_ready_within_deadline'] else 'NO'}; "
          f"last Ready after {result['seconds_until_last_ready']:.1f} s)\n"
          f"  apply -> children: p50 {ms(result['apply_to_children_s']['p50'])}, "
          f"p99 {ms(result['apply_to_children_s']['p99'])}\n"
          f"  apply -> Ready:    p50 {ms(result['apply_to_ready_s']['p50'])}, "
          f"p99 {ms(result['apply_to_ready_s']['p99'])}\n"
          f"  reconcile duration (operator histogram): p50 {ms(result['reconcile_duration_s']['p50'])}, "
          f"p99 {ms(result['reconcile_duration_s']['p99'])} over {result['reconciles']:.0f} reconciles, "
          f"{result['reconcile_errors']:.0f} errors\n"
          f"  operator peak RSS: {result['operator_peak_rss_mib']:.0f} MiB")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["all_ready_within_deadline"] else 1
