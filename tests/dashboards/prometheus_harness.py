"""A real Prometheus on 127.0.0.1 scraping recorded expositions served by a tiny local HTTP server, and
simulated engines.

vLLM pods: the real vLLM scrape fixture, its counters and histograms scaled by the number of scrapes so
far, so rates are non-zero and every series keeps vLLM's exact names, labels and types; and simulated
engines (`specpilot-runtime simulate`, what the sandbox and the demo run) under a little load. The
operator: its real OperatorMetrics and TunerMetrics, advanced on every scrape.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpx
import yaml
from prometheus_client import generate_latest

from specpilot.controller import metric_names as op
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.tuning.metrics import TunerMetrics
from specpilot_harness.ports import free_port

SCALED_SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def advance_exposition(text: str, scrapes: int) -> str:
    """The exposition as if the pod had done `scrapes` times the recorded work: cumulative samples
    (counters, histogram buckets/sums/counts) multiplied, gauges and `_created` left alone."""
    out = []
    kind = ""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            kind = line.split()[3]
        elif line and not line.startswith("#") and kind in ("counter", "histogram"):
            name_labels, value = line.rsplit(" ", 1)
            name = name_labels.split("{", 1)[0]
            if name.endswith(SCALED_SUFFIXES):
                line = f"{name_labels} {float(value) * scrapes!r}"
        out.append(line)
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Deployment:
    namespace: str
    name: str
    n_stable: int
    n_canary: int


class OperatorExposition:
    """The operator's own registries (OperatorMetrics, TunerMetrics), driven as a busy operator would for
    `deployments` (stable and canary each), moving on every scrape."""

    def __init__(self, deployments: list[Deployment]) -> None:
        self.metrics = OperatorMetrics()
        self.tuner = TunerMetrics(self.metrics.registry)
        self.deployments = deployments
        self.metrics.leader.set(1)
        self.metrics.managed.labels("SpeculativeDeployment").set(len(deployments))

    def scrape(self) -> bytes:
        m = self.metrics
        for i, d in enumerate(self.deployments):
            key = (d.namespace, d.name)
            m.reconciles.labels(*key, op.RESULT_UNCHANGED).inc(3)
            m.reconciles.labels(*key, op.RESULT_APPLIED).inc()
            m.errors.labels(*key, "KubeError").inc()
            m.duration.observe(0.02 * (i + 1))
            m.n.labels(*key, "stable").set(d.n_stable)
            m.n.labels(*key, "canary").set(d.n_canary)
            # The first deployment's spec is refused, so the "invalid specs" panel has something to show.
            m.invalid.labels(*key).set(1 if i == 0 else 0)
            m.ready.labels(*key).set(2)
            for decision in (op.DECISION_CONTINUE, op.DECISION_ROLLBACK):
                self.tuner.decisions.labels(*key, decision).inc()
            self.tuner.last.labels(*key).set(time.time())
            for n in range(0, max(d.n_stable, d.n_canary) + 1):
                self.tuner.predicted.labels(*key, str(n)).set(100.0 + 10 * n)
            self.tuner.observed.labels(*key, "stable").set(140.0)
            self.tuner.observed.labels(*key, "canary").set(150.0)
            # As during a schedule canary: both tracks serve a schedule.
            self.tuner.schedules(*key, {"stable": [[1, 8, d.n_stable], [9, 4096, 1]],
                                        "canary": [[1, 32, d.n_canary], [33, 4096, 0]]})
            # As during a method tournament: the stable method, one measured and one being canaried.
            self.tuner.methods(*key, [{"contender": 0, "method": "mtp", "role": "stable"},
                                      {"contender": 1, "method": "dflash", "role": "measured", "expectedGain": 0.2},
                                      {"contender": 2, "method": "eagle3", "role": "canary", "expectedGain": -0.1}])
            # As after a switchback arm judged band by band (schedule mode).
            self.tuner.bands(*key, [{"numbers": {"bands": [
                {"band": "16-31", "stableK": d.n_stable, "canaryK": d.n_canary, "decision": "promote",
                 "gain_pct": 12.0, "lower_pct": 4.0, "upper_pct": 20.0, "windows": 6, "carried": 0,
                 "reason": "proven"}]}}])
        return generate_latest(m.registry)


@dataclass
class ExpositionServer:
    """Serves /vllm/<pod> (the advanced vLLM fixture) and /operator on 127.0.0.1."""

    vllm_fixture: str
    operator: OperatorExposition
    scrapes: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def body(self, path: str) -> bytes | None:
        with self.lock:
            self.scrapes[path] += 1
            count = self.scrapes[path]
            if path == "/operator":
                return self.operator.scrape()
        if path.startswith("/vllm/"):
            return advance_exposition(self.vllm_fixture, count).encode()
        return None

    @contextlib.contextmanager
    def serve(self) -> Iterator[int]:
        exposition = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = exposition.body(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


class SimulatedEngines:
    """`specpilot-runtime simulate` processes on 127.0.0.1 under a bounded load, so their /metrics move
    the way a serving pod's do."""

    def __init__(self, workdir: Path, engines: dict[str, int], profile: str, time_scale: float = 20,
                 schedules: dict[str, list[list[int]]] | None = None, live_files: dict[str, Path] | None = None
                 ) -> None:
        self.ports = {pod: free_port() for pod in engines}
        self.model = profile
        self.log = (workdir / "simulate.log").open("w")
        schedules, live_files = schedules or {}, live_files or {}
        self.processes = [subprocess.Popen(
            [sys.executable, "-m", "specpilot_runtime.cli", "simulate", "--name", profile,
             "--num-speculative-tokens", str(n), "--host", "127.0.0.1", "--port", str(self.ports[pod]),
             "--time-scale", str(time_scale), "--seed", str(i),
             *(["--num-speculative-tokens-per-batch-size", json.dumps(schedules[pod])] if pod in schedules else []),
             *(["--live-file", str(live_files[pod])] if pod in live_files else [])],
            stdout=self.log, stderr=subprocess.STDOUT)
            for i, (pod, n) in enumerate(engines.items())]
        self.stopping = threading.Event()
        self.loaders: list[threading.Thread] = []

    def wait_ready(self, timeout: float = 30) -> None:
        def ready() -> bool:
            for proc in self.processes:
                if proc.poll() is not None:
                    raise RuntimeError(f"simulate exited with {proc.returncode}; see {self.log.name}")
            try:
                return all(httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
                           for port in self.ports.values())
            except httpx.TransportError:
                return False
        poll(ready, timeout, "simulated engines healthy")

    def start_load(self, concurrency: int = 2, max_s: float = 120) -> None:
        """Short completions from `concurrency` clients per engine until stop(), at most `max_s` seconds."""
        deadline = time.monotonic() + max_s

        def client(port: int) -> None:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
                while not self.stopping.is_set() and time.monotonic() < deadline:
                    http.post("/v1/completions", json={"model": self.model, "prompt": "Solve 12 * 7.",
                                                       "max_tokens": 24})

        self.loaders = [threading.Thread(target=client, args=(port,), daemon=True)
                        for port in self.ports.values() for _ in range(concurrency)]
        for thread in self.loaders:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.loaders:
            thread.join(timeout=15)
        for proc in self.processes:
            proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.log.close()


def prometheus_config(exporter_port: int, pods: list[dict[str, str]], simulated: dict[int, dict[str, str]],
                      rule_file: Path) -> dict[str, Any]:
    """Scrape every second; vLLM targets (recorded and simulated) carry the labels the chart's
    PodMonitor copies from the pods, and the operator's own `namespace` labels are honoured as the
    chart's ServiceMonitor does."""
    target = f"127.0.0.1:{exporter_port}"
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)],
        "scrape_configs": [
            {"job_name": "vllm", "static_configs": [
                {"targets": [target], "labels": {**labels, "__metrics_path__": f"/vllm/{labels['pod']}"}}
                for labels in pods]},
            {"job_name": "vllm-simulated", "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": labels} for port, labels in simulated.items()]},
            {"job_name": "specpilot-operator", "honor_labels": True, "metrics_path": "/operator",
             "static_configs": [{"targets": [target], "labels": {"instance": "operator-0"}}]},
        ],
    }


class Prometheus:
    def __init__(self, binary: str, workdir: Path, config: dict[str, Any]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config_file = workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self.log = (workdir / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [binary, f"--config.file={config_file}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=self.url, timeout=5)

    def wait_ready(self, timeout: float = 30) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}; see {self.log.name}")
            try:
                return self.client.get("/-/ready").status_code == 200
            except httpx.TransportError:
                return False
        poll(ready, timeout, "Prometheus ready")

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = self.client.get("/api/v1/query", params={"query": expr}).json()
        if reply["status"] != "success":
            raise AssertionError(f"{expr}: {reply.get('error')}")
        return reply["data"]["result"]

    def label_values(self, label: str, match: str) -> list[str]:
        return self.client.get(f"/api/v1/label/{label}/values", params={"match[]": match}).json()["data"]

    def rules(self) -> list[dict[str, Any]]:
        groups = self.client.get("/api/v1/rules").json()["data"]["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def stop(self) -> None:
        self.client.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def poll(check: Any, timeout: float, what: str) -> None:
    """Call `check` until it returns true, backing off from 50 ms; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:g}s")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
