"""`specpilot bench operator`: many SpeculativeDeployments applied at once to the sandbox, with the
real operator (`specpilot run`) as a subprocess and the sandbox (`specpilot sandbox --no-operator`: the real
control plane, fake nodes) as another, so that each side's CPU is measured apart. Per size: how long until
every object has its children and is Ready, the operator's reconcile durations, API requests per reconcile
(from kube-apiserver's audit log, which records only the operator's requests: it authenticates as a
ServiceAccount of its own, bound to cluster-admin, as it would in a cluster), the CPU seconds of the operator,
of kube-apiserver, of etcd and of the rest of the sandbox (node agent, controllers), and the operator's peak
memory."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp

from specpilot.api.models import API_VERSION, KIND, PLURAL
from specpilot.controller import metric_names
from specpilot_harness.controlplane import audit
from specpilot_harness.ports import free_port
from specpilot_harness.sandbox.kubeconfig import Access, write_kubeconfig

NAMESPACE = "bench"
OPERATOR_SA_NAMESPACE, OPERATOR_SA = "kube-system", "specpilot-bench-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_SA_NAMESPACE}:{OPERATOR_SA}"
TOKEN_SECONDS = 3600
METHODS = (("ngram", None), ("mtp", None), ("eagle3", "org/eagle3-draft"), ("draft_model", "org/small-draft"))
# Targets for a 2-core machine with the whole real control plane on it, printed (never asserted).
TARGET_READY_S, TARGET_RECONCILE_P99_MS, TARGET_RSS_MIB, TARGET_CPU_RATIO = 120.0, 500.0, 300.0, 1.5


def register(sub: argparse._SubParsersAction) -> None:
    """Adds `operator` to the subcommands of `specpilot bench`."""
    p = sub.add_parser("operator", help="apply many SpeculativeDeployments to the sandbox at once",
                       description="For each size: start the sandbox and the operator, apply that many "
                                   "SpeculativeDeployments at once, and report apply-to-children and "
                                   "apply-to-Ready latency, reconcile durations, API requests per reconcile, "
                                   "the operator's and the sandbox's CPU seconds, and the operator's peak RSS.")
    p.add_argument("--deployments", type=_sizes, default=[200],
                   help="how many, comma-separated sizes run one after another (default 200)")
    p.add_argument("--deadline", type=float, default=120.0, help="seconds each size may take (default 120)")
    p.add_argument("--json", type=Path, dest="json_out", help="write the numbers as JSON here")
    p.set_defaults(func=run)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of counts: {text!r}") from exc
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def manifest(i: int) -> dict[str, Any]:
    method, draft = METHODS[i % len(METHODS)]
    speculative: dict[str, Any] = {"method": method, "numSpeculativeTokens": 1 + i % 5}
    if draft:
        speculative["draftModel"] = draft
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": f"sd-{i:04d}", "namespace": NAMESPACE},
            "spec": {"model": f"org/model-{i:04d}", "speculative": speculative}}  # one model each, as a fleet


@dataclass
class Timeline:
    applied: dict[str, float] = field(default_factory=dict)
    children: dict[str, float] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)
    all_ready: asyncio.Event = field(default_factory=asyncio.Event)
    expected: int = 0

    def observe(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata", {})
        if meta.get("namespace") != NAMESPACE or event_type == "DELETED":
            return
        now = time.monotonic()
        if obj.get("kind") == "Deployment":
            owner = (meta.get("labels") or {}).get("specpilot.io/deployment")
            if owner:
                self.children.setdefault(owner, now)
        elif obj.get("kind") == KIND:
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
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if bound == "+Inf" else float(bound), float(line.rsplit(" ", 1)[1])))
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
    status = Path(f"/proc/{pid}/status")
    for line in status.read_text().splitlines() if status.exists() else []:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # it exited (an operator that lost its Lease): see its log
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _metric_total(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


async def _sandbox(workdir: Path) -> tuple[asyncio.subprocess.Process, str, Path]:
    kubeconfig = workdir / "kubeconfig"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specpilot.cli", "sandbox", "--port", "0", "--no-operator", "--kubeconfig",
        str(kubeconfig), "--workdir", str(workdir / "cluster"), "--audit-user", OPERATOR_USER,
        stdout=asyncio.subprocess.PIPE, stderr=(workdir / "sandbox.log").open("wb"))
    assert proc.stdout is not None
    line = (await proc.stdout.readline()).decode()
    match = re.search(r"https://127\.0\.0\.1:\d+", line)
    if not match:
        raise RuntimeError(f"the sandbox did not start: {line!r}")
    return proc, match.group(0), kubeconfig


async def _watch(http: aiohttp.ClientSession, path: str, timeline: Timeline) -> None:
    """Every event at `path`, resumed from the last resourceVersion when the server ends the stream. Lines are
    split here: a real API server's objects (managedFields, status) outgrow aiohttp's 64 KiB line limit."""
    version = ""
    while True:
        params = {"watch": "true", **({"resourceVersion": version} if version else {})}
        async with http.get(path, params=params, timeout=aiohttp.ClientTimeout(total=None)) as resp:
            pending = b""
            async for chunk in resp.content.iter_any():
                *lines, pending = (pending + chunk).split(b"\n")
                for line in filter(None, lines):
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") == "ERROR":
                        version = ""
                    else:
                        timeline.observe(event["type"], obj)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()


async def bench(count: int, deadline_s: float) -> dict[str, Any]:
    """One size: a fresh sandbox and operator, `count` objects applied at once."""
    workdir = Path(tempfile.mkdtemp(prefix="specpilot-bench-"))
    sandbox, url, kubeconfig = await _sandbox(workdir)
    metrics_port = free_port()
    log = (workdir / "operator.log").open("wb")
    operator: asyncio.subprocess.Process | None = None
    timeline = Timeline(expected=count)
    watches: list[asyncio.Task[None]] = []
    try:
        async with api_session(url, kubeconfig) as http:
            operator = proc = await start_operator(http, url, kubeconfig, workdir, ["-m", "specpilot.cli"],
                                                   metrics_port, log)
            path = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/{PLURAL}"
            watches = [asyncio.create_task(_watch(http, p, timeline))
                       for p in (path, f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")]
            requests_before = len(_operator_records(workdir))
            pids = _component_pids(sandbox.pid)
            watched = {"operator": proc.pid, "sandbox": sandbox.pid,
                       "apiserver": pids.get("kube-apiserver", -1), "etcd": pids.get("etcd", -1),
                       # /proc truncates command names to 15 characters
                       "controller_manager": pids.get("kube-controller", -1),
                       "scheduler": pids.get("kube-scheduler", -1)}
            cpu_before = {name: cpu_s(pid) for name, pid in watched.items()}

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
            cpu_after = {name: cpu_s(pid) for name, pid in watched.items()}
            requests = len(_operator_records(workdir)) - requests_before
        metrics = await asyncio.to_thread(_scrape, metrics_port)
        rss = peak_rss_mib(proc.pid)
    finally:
        for task in watches:
            task.cancel()
        if operator is not None:
            await _stop(operator)
        log.close()
        await _stop(sandbox)
    to_children = [timeline.children[n] - t for n, t in timeline.applied.items() if n in timeline.children]
    to_ready = [timeline.ready[n] - t for n, t in timeline.applied.items() if n in timeline.ready]
    duration = metric_names.RECONCILE_DURATION
    reconciles = _metric_total(metrics, metric_names.RECONCILES_TOTAL)
    return {
        "deployments": count, "with_children": len(to_children), "ready": len(to_ready),
        "all_ready": len(to_ready) == count, "last_ready_s": max(to_ready, default=float("nan")),
        "wall_s": elapsed,
        "children_p50_ms": percentile(to_children, 50) * 1000, "children_p99_ms": percentile(to_children, 99) * 1000,
        "ready_p50_ms": percentile(to_ready, 50) * 1000, "ready_p99_ms": percentile(to_ready, 99) * 1000,
        "reconcile_p50_ms": histogram_quantile(metrics, duration, 0.5) * 1000,
        "reconcile_p99_ms": histogram_quantile(metrics, duration, 0.99) * 1000,
        "reconciles": reconciles, "requests_per_reconcile": requests / reconciles if reconciles else float("nan"),
        "operator_cpu_s": cpu_after["operator"] - cpu_before["operator"], "operator_peak_rss_mib": rss,
        "sandbox_cpu_s": cpu_after["sandbox"] - cpu_before["sandbox"],
        "apiserver_cpu_s": cpu_after["apiserver"] - cpu_before["apiserver"],
        "etcd_cpu_s": cpu_after["etcd"] - cpu_before["etcd"],
        "controllers_cpu_s": sum(cpu_after[c] - cpu_before[c] for c in ("controller_manager", "scheduler")),
        "errors": _metric_total(metrics, metric_names.RECONCILE_ERRORS_TOTAL),
        "operator_log": str(workdir / "operator.log"),
    }


@asynccontextmanager
async def api_session(url: str, kubeconfig: Path) -> AsyncIterator[aiohttp.ClientSession]:
    """A client of the sandbox as the kubeconfig's user (the admin), once the benchmark's namespace exists."""
    access = Access.read(kubeconfig)
    async with aiohttp.ClientSession(base_url=url, headers=access.headers,
                                     connector=aiohttp.TCPConnector(ssl=access.ssl_context())) as http:
        await (await http.post("/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}})).read()
        yield http


async def start_operator(http: aiohttp.ClientSession, url: str, kubeconfig: Path, workdir: Path,
                         launcher: list[str], metrics_port: int, log: BinaryIO) -> asyncio.subprocess.Process:
    """`specpilot run` (through `launcher`, the Python arguments before `run`) as its own ServiceAccount,
    returned once it holds its Lease and watches what it watches."""
    operator_kubeconfig = await _operator_kubeconfig(http, url, kubeconfig, workdir)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *launcher, "run", "--kubeconfig", str(operator_kubeconfig), "--metrics-host", "127.0.0.1",
        "--metrics-port", str(metrics_port), "--lease-namespace", "kube-system", stdout=log, stderr=log)
    await _wait_for_leader(http, workdir)
    return proc


async def _operator_kubeconfig(http: aiohttp.ClientSession, url: str, kubeconfig: Path, workdir: Path) -> Path:
    """A kubeconfig for the operator's own ServiceAccount (cluster-admin), from a TokenRequest: the audit log
    then records its requests alone."""
    sa = f"/api/v1/namespaces/{OPERATOR_SA_NAMESPACE}/serviceaccounts"
    binding = {"metadata": {"name": OPERATOR_SA},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
               "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": OPERATOR_SA_NAMESPACE}]}
    for path, body in ((sa, {"metadata": {"name": OPERATOR_SA}}),
                       ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)):
        async with http.post(path, json=body) as resp:
            if resp.status not in (201, 409):
                raise RuntimeError(f"create {path}: {resp.status} {await resp.text()}")
    async with http.post(f"{sa}/{OPERATOR_SA}/token",
                         json={"spec": {"expirationSeconds": TOKEN_SECONDS}}) as resp:
        if resp.status != 201:
            raise RuntimeError(f"TokenRequest for {OPERATOR_USER}: {resp.status} {await resp.text()}")
        token = (await resp.json())["status"]["token"]
    admin = Access.read(kubeconfig)
    return write_kubeconfig(workdir / "operator.kubeconfig", Access(url, admin.ca_pem, token))


def _operator_records(workdir: Path) -> list[audit.AuditRecord]:
    """The requests the operator has made so far, as the API server's audit log holds them."""
    return audit.read(workdir / "cluster" / "logs" / "audit.log", OPERATOR_USER)


def _component_pids(parent: int) -> dict[str, int]:
    """The sandbox's child processes by command name (kube-apiserver, etcd, ...), from /proc."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if int(rest[1]) == parent:
            found[name] = int(stat.parent.name)
    return found


# The operator watches these (handlers.py): objects are applied 'at once' to an operator watching them all,
# not to one still starting (whose first listing would treat them as older than itself).
WATCHED = (PLURAL, "deployments", "configmaps", "services")
STARTUP_S = 60.0


async def _wait_for_leader(http: aiohttp.ClientSession, workdir: Path) -> None:
    """The operator is up once it holds its Lease and has its watches open (the audit log shows them)."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        async with http.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/specpilot-operator") as resp:
            holder = resp.status == 200 and ((await resp.json()).get("spec") or {}).get("holderIdentity")
        if holder:
            watched = {r.resource for r in _operator_records(workdir) if r.verb == "watch"}
            if all(plural in watched for plural in WATCHED):
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the operator did not take its Lease and open its watches within {STARTUP_S:.0f} s: "
                       "see its log")


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return resp.read().decode()
    except OSError:  # the operator exited (it lost its Lease): the size reports what it can, see its log
        return ""


COLUMNS = (("deployments", "objects", "{:.0f}"), ("ready", "Ready", "{:.0f}"), ("last_ready_s", "last Ready s", "{:.1f}"),
           ("children_p50_ms", "->children p50 ms", "{:.0f}"), ("children_p99_ms", "p99", "{:.0f}"),
           ("ready_p50_ms", "->Ready p50 ms", "{:.0f}"), ("ready_p99_ms", "p99", "{:.0f}"),
           ("reconcile_p50_ms", "reconcile p50 ms", "{:.0f}"), ("reconcile_p99_ms", "p99", "{:.0f}"),
           ("requests_per_reconcile", "requests/reconcile", "{:.1f}"), ("operator_cpu_s", "operator CPU s", "{:.1f}"),
           ("operator_peak_rss_mib", "operator RSS MiB", "{:.0f}"), ("sandbox_cpu_s", "sandbox CPU s", "{:.1f}"),
           ("apiserver_cpu_s", "apiserver CPU s", "{:.1f}"), ("etcd_cpu_s", "etcd CPU s", "{:.1f}"),
           ("controllers_cpu_s", "controller-manager + scheduler CPU s", "{:.1f}"),
           ("errors", "errors", "{:.0f}"))


def table(sizes: list[dict[str, Any]]) -> str:
    rows = ["| " + " | ".join(title for _, title, _ in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    rows += ["| " + " | ".join(fmt.format(r[key]) for key, _, fmt in COLUMNS) + " |" for r in sizes]
    return "\n".join(rows)


def verdicts(sizes: list[dict[str, Any]]) -> list[str]:
    """The issue's targets against the largest size (CPU per object against the smallest)."""
    small, large = sizes[0], sizes[-1]
    out = [f"largest size all Ready within {TARGET_READY_S:.0f} s: "
           f"{'yes' if large['all_ready'] and large['last_ready_s'] <= TARGET_READY_S else 'NO'}",
           f"reconcile p99 <= {TARGET_RECONCILE_P99_MS:.0f} ms: "
           f"{'yes' if large['reconcile_p99_ms'] <= TARGET_RECONCILE_P99_MS else 'NO'}",
           f"operator peak RSS <= {TARGET_RSS_MIB:.0f} MiB: "
           f"{'yes' if large['operator_peak_rss_mib'] <= TARGET_RSS_MIB else 'NO'}"]
    if len(sizes) > 1:
        ratio = (large["operator_cpu_s"] / large["deployments"]) / max(small["operator_cpu_s"] / small["deployments"], 1e-9)
        out.append(f"operator CPU per object at {large['deployments']} / at {small['deployments']}: {ratio:.2f} "
                   f"(target <= {TARGET_CPU_RATIO}: {'yes' if ratio <= TARGET_CPU_RATIO else 'NO'})")
    return out


def run(args: argparse.Namespace) -> int:
    sizes = []
    for count in args.deployments:
        result = asyncio.run(bench(count, args.deadline))
        sizes.append(result)
        print(f"specpilot bench operator: {count} applied at once: {result['ready']} Ready, last after "
              f"{result['last_ready_s']:.1f} s; operator log {result['operator_log']}", flush=True)
    print(table(sizes))
    for line in verdicts(sizes):
        print("  " + line)
    if args.json_out:
        args.json_out.write_text(json.dumps({"sizes": sizes}, indent=1) + "\n")
    return 0 if all(r["all_ready"] for r in sizes) else 1
