"""`specpilot sandbox` as a user runs it: cluster, CRD and operator in one command, gone on Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from cluster_kit import REPO, Cluster, example, free_port, wait_for


def test_sandbox_command_runs_the_operator_and_cleans_up(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specpilot.cli", "sandbox", "--port", "0", "--kubeconfig", str(kubeconfig),
         "--metrics-port", str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, text=True)
    try:
        assert proc.stdout is not None
        banner = "".join(proc.stdout.readline() for _ in range(3))
        url = re.search(r"https://127\.0\.0\.1:\d+", banner)
        assert url and f"export KUBECONFIG={kubeconfig}" in banner
        cluster = Cluster(url.group(0), kubeconfig, tmp_path, proc)
        obj = example("ngram")
        assert cluster.apply(obj, "default").returncode == 0
        wait_for("the operator to make it Ready", lambda: (sd := cluster.get("sd", obj["metadata"]["name"]))
                 and (sd.get("status") or {}).get("phase") == "Running")
        assert cluster.get("deployment", obj["metadata"]["name"]) is not None
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
    assert code == 0
    assert not kubeconfig.exists()
