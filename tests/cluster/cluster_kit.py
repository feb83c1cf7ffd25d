"""Helpers of the cluster tier: a `specpilot sandbox` subprocess, real kubectl against it, and operator
replicas (`specpilot run`) as subprocesses, exactly as a user runs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from specpilot_harness.ports import free_port
from specpilot_harness.sandbox.kubeconfig import Access

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deploy" / "examples"
WAIT_S = 60.0
FAST_POLL_S, FAST_FOR_S, SLOW_POLL_S = 0.2, 5.0, 1.0


def kubectl_binary() -> str:
    local = REPO / ".tools" / "bin" / "kubectl"
    found = str(local) if local.exists() else shutil.which("kubectl")
    if not found:
        pytest.fail("kubectl is needed by the cluster tier: `make tools` puts it in .tools/bin")
    return found


def settled(read: Callable[[], Any], quiet_s: float = 2.0, timeout: float = 30.0) -> Any:
    """What `read` returns once it has not changed for `quiet_s`. After a process is killed, a request it had
    sent may still be committed by the API server: the last state it wrote is the one that then stays."""
    deadline = time.monotonic() + timeout
    last, since = read(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            raise AssertionError(f"still changing after {timeout:.0f} s; last seen: {last!r}")
        time.sleep(SLOW_POLL_S / 2)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
    return last


def wait_for(what: str, probe: Callable[[], Any], timeout: float = WAIT_S, fast: bool = False) -> Any:
    """Poll until `probe` returns something truthy; fail naming `what` otherwise. Quickly at first, for what
    happens at once, then once a second: a probe runs kubectl (about 60 ms of CPU here, and the API server's
    share), and at five a second the tests waiting minutes for a tuner kept a core of two busy polling.
    `fast`: quickly throughout, for the first of writes that come a window (2 s) apart."""
    started = time.monotonic()
    deadline = started + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(FAST_POLL_S if fast or time.monotonic() - started < FAST_FOR_S else SLOW_POLL_S)
    raise AssertionError(f"gave up waiting for {what}; last seen: {last!r}")


@dataclass
class Operator:
    identity: str
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_port: int

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release, as when a node dies."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Cluster:
    url: str
    kubeconfig: Path
    workdir: Path
    proc: subprocess.Popen[bytes]
    operators: list[Operator] = field(default_factory=list)

    def access(self) -> Access:
        """URL, CA and token for a test's own raw HTTP requests (kubectl reads them from the kubeconfig)."""
        return Access.read(self.kubeconfig)

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self.workdir / "kcache")}

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([kubectl_binary(), *args], input=stdin, capture_output=True, text=True,
                              env=self.env(), timeout=60)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def get(self, *args: str) -> dict[str, Any] | None:
        """`kubectl get ... -o json`, None when it is not there."""
        done = self.kubectl("get", *args, "-o", "json", check=False)
        if done.returncode != 0:
            if "NotFound" in done.stderr or "not found" in done.stderr:
                return None
            raise AssertionError(done.stderr)
        return json.loads(done.stdout)

    def items(self, *args: str) -> list[dict[str, Any]]:
        got = self.get(*args)
        return got["items"] if got else []

    def ready_addresses(self, namespace: str, service: str) -> list[str]:
        """The addresses a Service routes to: its EndpointSlices' ready endpoints (kube-controller-manager's
        EndpointSlice controller; the sandbox runs no v1 Endpoints controller)."""
        slices = self.items("endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={service}")
        return sorted(a for s in slices for e in s.get("endpoints") or []
                      if (e.get("conditions") or {}).get("ready", True) for a in e.get("addresses") or [])

    def apply(self, obj: dict[str, Any] | str, namespace: str) -> subprocess.CompletedProcess[str]:
        text = obj if isinstance(obj, str) else yaml.safe_dump(obj)
        return self.kubectl("apply", "-n", namespace, "-f", "-", stdin=text, check=False)

    def namespace(self, name: str) -> str:
        """A new namespace, once kube-controller-manager gave it its `default` ServiceAccount (pods are
        refused before)."""
        self.kubectl("create", "namespace", name)
        wait_for(f"the default ServiceAccount of {name}",
                 lambda: self.kubectl("get", "serviceaccount", "-n", name, "default", check=False).returncode == 0)
        return name

    def start_operator(self, identity: str, *extra: str, lease_duration: int = 4) -> Operator:
        port = free_port()
        log = self.workdir / f"operator-{identity}-{len(self.operators)}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "specpilot.cli", "run", "--kubeconfig", str(self.kubeconfig),
             "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--identity", identity,
             "--lease-namespace", "kube-system", "--lease-duration", str(lease_duration), *extra],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO)
        op = Operator(identity, proc, log, port)
        self.operators.append(op)
        return op

    def lease_holder(self) -> str | None:
        lease = self.get("lease", "-n", "kube-system", "specpilot-operator")
        return ((lease or {}).get("spec") or {}).get("holderIdentity")

    def wait_to_lead(self, op: Operator, timeout: float = WAIT_S) -> None:
        """Until `op` holds the Lease; an operator that exits first, or never leads, fails the wait with the
        end of its log (what it was doing, or why it exited)."""
        def leads() -> bool:
            if op.proc.poll() is not None:
                raise AssertionError(f"operator {op.identity} exited ({op.proc.returncode}) before leading; its "
                                     f"log ends:\n{op.logs()[-3000:]}")
            return self.lease_holder() == op.identity
        try:
            wait_for(f"operator {op.identity} to lead", leads, timeout)
        except AssertionError as exc:
            if op.proc.poll() is not None:
                raise
            raise AssertionError(f"{exc}; holder {self.lease_holder()!r}; its log ends:\n{op.logs()[-3000:]}") \
                from None


def keep_running(cluster: Cluster, identity: str, lease_duration: int, *extra: str) -> Callable[[], None]:
    """Start an operator and start it again whenever it exits, as the kubelet restarts a container
    (restartPolicy: Always): an operator that lost its Lease exits on purpose and comes back as a standby.
    `extra`: more `specpilot run` arguments (its own --kubeconfig, say). Returns what stops the supervision
    (before stop_cluster)."""
    stop = threading.Event()
    first = cluster.start_operator(identity, *extra, lease_duration=lease_duration)

    def watch() -> None:
        current = first
        while not stop.wait(0.5):
            if current.proc.poll() is not None:
                current = cluster.start_operator(identity, *extra, lease_duration=lease_duration)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()

    def done() -> None:
        stop.set()
        thread.join(5)
    return done


class NeverReady:
    """A PodRuntime (for `--pod-runtime cluster_kit:NeverReady`) whose pods run but never become Ready."""

    async def start(self, ctx: Any) -> None:
        return None

    async def ready(self, ctx: Any) -> bool:
        return False

    async def stop(self, ctx: Any) -> None:
        return None


UNREADY_FLAG_ENV = "SPECPILOT_TEST_UNREADY_FLAG"


class FlagReady:
    """A PodRuntime whose pods are Ready unless the file named by $SPECPILOT_TEST_UNREADY_FLAG exists:
    a switch for the tests to take every pod's readiness away and give it back."""

    async def start(self, ctx: Any) -> None:
        return None

    async def ready(self, ctx: Any) -> bool:
        return not Path(os.environ[UNREADY_FLAG_ENV]).exists()

    async def stop(self, ctx: Any) -> None:
        return None


def start_cluster(workdir: Path, *extra: str) -> Cluster:
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = workdir / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specpilot.cli", "sandbox", "--port", "0", "--kubeconfig", str(kubeconfig),
         "--no-operator", *extra], stdout=subprocess.PIPE, stderr=(workdir / "sandbox.log").open("wb"), cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                                        os.environ.get("PYTHONPATH")]))})
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    match = re.search(r"https://127\.0\.0\.1:\d+", line)
    if not match:
        proc.kill()
        raise AssertionError(f"sandbox did not start: {line!r} {(workdir / 'sandbox.log').read_text()}")
    return Cluster(match.group(0), kubeconfig, workdir, proc)


def stop_cluster(cluster: Cluster) -> None:
    for op in cluster.operators:
        op.stop()
    cluster.proc.send_signal(signal.SIGINT)
    try:
        cluster.proc.wait(20)
    except subprocess.TimeoutExpired:
        cluster.proc.kill()


def example(name: str, **spec_changes: Any) -> dict[str, Any]:
    obj = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    obj["spec"].update(spec_changes)
    return obj
