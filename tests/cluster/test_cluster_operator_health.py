"""The operator's probes as the chart wires them: /healthz fails while the event loop is stuck (and
/metrics, served by a thread, does not notice); /readyz is 200 on the leader and on the standby, and
leadership shows in specpilot_operator_leader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from cluster_kit import REPO, Cluster, Operator, wait_for
from specpilot_harness.ports import free_port
from stallable_operator import STALL_ENV

STALL_S = 8.0
LIMIT_S = 3.0


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError as exc:  # not listening yet
        return 0, str(exc.reason)


def _stallable(cluster: Cluster, identity: str) -> Operator:
    port = free_port()
    log = cluster.workdir / f"operator-{identity}.log"
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("stallable_operator.py")), "run",
         "--kubeconfig", str(cluster.kubeconfig), "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
         "--identity", identity, "--lease-namespace", "kube-system", "--lease-duration", "4",
         "--liveness-stall-seconds", str(LIMIT_S)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, STALL_ENV: str(STALL_S)})
    op = Operator(identity, proc, log, port)
    cluster.operators.append(op)
    return op


def _leader_metric(op: Operator) -> str:
    return next(line for line in op.metrics().splitlines() if line.startswith("specpilot_operator_leader "))


def test_readiness_names_the_role_and_liveness_fails_while_the_loop_is_stuck(fresh_cluster: Cluster) -> None:
    leader = _stallable(fresh_cluster, "leader")
    fresh_cluster.wait_to_lead(leader)
    wait_for("the leader to be ready", lambda: _get(leader.metrics_port, "/readyz") == (200, "ready: leader\n"))
    standby = fresh_cluster.start_operator("standby")
    wait_for("the standby to be ready", lambda: _get(standby.metrics_port, "/readyz")[0] == 200)
    assert "standby" in _get(standby.metrics_port, "/readyz")[1]
    assert _leader_metric(leader) == "specpilot_operator_leader 1.0"
    assert _leader_metric(standby) == "specpilot_operator_leader 0.0"
    assert _get(standby.metrics_port, "/healthz")[0] == 200
    assert _get(leader.metrics_port, "/healthz")[0] == 200

    leader.proc.send_signal(signal.SIGUSR1)
    stalled_at = time.monotonic()
    status, text = wait_for("/healthz to fail", lambda: (got := _get(leader.metrics_port, "/healthz"))[0] == 503
                            and got, timeout=STALL_S)
    assert "event loop stalled" in text, text
    assert time.monotonic() - stalled_at < STALL_S
    assert _get(leader.metrics_port, "/metrics")[0] == 200  # why /metrics made a useless liveness probe
    assert fresh_cluster.lease_holder() == "leader"  # renewals run on their own thread
    wait_for("/healthz to recover after the stall", lambda: _get(leader.metrics_port, "/healthz")[0] == 200,
             timeout=STALL_S + 10)
    assert leader.proc.poll() is None and fresh_cluster.lease_holder() == "leader"
