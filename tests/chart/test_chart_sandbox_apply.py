"""`helm template | kubectl apply -f -`, the plain manifests, and the install notes, against `specpilot sandbox`
with real kubectl and helm (Helm cannot install there: its release record is a protobuf Secret)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from helm_tools import CHART, HELM, KUBECTL, NAMESPACE, RELEASE, ROOT, helm_template

DEPLOY = ROOT / "deploy" / "specpilot.yaml"


class SandboxCluster:
    def __init__(self, workdir: Path) -> None:
        self.kubeconfig = workdir / "kubeconfig"
        self.env = {"KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(workdir / "kcache"),
                    "HOME": str(workdir), "PATH": "/usr/bin:/bin"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specpilot.cli", "sandbox", "--port", "0", "--kubeconfig", str(self.kubeconfig),
             "--no-operator"], stdout=subprocess.PIPE, stderr=(workdir / "sandbox.log").open("wb"), cwd=ROOT)
        assert self.proc.stdout is not None
        # The first line names the API server once it listens.
        first = self.proc.stdout.readline().decode()
        if not re.search(r"https://127\.0\.0\.1:\d+", first):
            self.stop()
            raise AssertionError(f"sandbox did not start: {first!r} {(workdir / 'sandbox.log').read_text()}")

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(KUBECTL), *args], input=stdin, capture_output=True, text=True, env=self.env,
                              timeout=60)

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(HELM), *args], capture_output=True, text=True, env=self.env, timeout=60)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxCluster]:
    if not KUBECTL.exists():
        pytest.fail(f"{KUBECTL} is missing: run `make tools`")
    cluster = SandboxCluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


def _applied_everything(sandbox: SandboxCluster, manifests: str) -> None:
    done = sandbox.kubectl("apply", "-f", "-", stdin=manifests)
    assert done.returncode == 0, done.stderr
    for obj in yaml.safe_load_all(manifests):
        if not obj:
            continue
        ns = obj["metadata"].get("namespace")
        where = ("-n", ns) if ns else ()
        got = sandbox.kubectl("get", obj["kind"], obj["metadata"]["name"], *where, "-o", "json")
        assert got.returncode == 0, f"{obj['kind']} {obj['metadata']['name']}: {got.stderr}"


def test_helm_template_applies_with_plain_kubectl(sandbox: SandboxCluster) -> None:
    assert sandbox.kubectl("create", "namespace", NAMESPACE).returncode == 0
    _applied_everything(sandbox, helm_template("--include-crds"))
    # Applying again changes nothing and fails nothing: what `helm upgrade`-less users will do.
    again = sandbox.kubectl("apply", "-f", "-", stdin=helm_template("--include-crds"))
    assert again.returncode == 0, again.stderr


def test_plain_manifests_apply_with_plain_kubectl(sandbox: SandboxCluster) -> None:
    _applied_everything(sandbox, DEPLOY.read_text())


def test_install_notes_say_how_to_reach_what_was_installed(sandbox: SandboxCluster) -> None:
    def notes(*values: str) -> str:
        # A client-side dry run renders NOTES.txt; it only reads the cluster's version and API groups.
        done = sandbox.helm("install", "--dry-run=client", "--namespace", NAMESPACE, RELEASE, str(CHART), *values)
        assert done.returncode == 0, done.stderr
        return done.stdout.split("NOTES:", 1)[1]

    default = notes()
    assert "Watching: every namespace" in default
    assert f"kubectl -n {NAMESPACE} port-forward svc/{RELEASE}-metrics 8080" in default
    assert "Prometheus scraping is off" in default and "grafana_dashboard=1" in default
    # (The monitoring toggles need the Prometheus Operator's CRDs, which the sandbox does not have.)
    scoped = notes("--set", "watch.namespaces={team-a,team-b}", "--set", "replicaCount=1",
                   "--set", "leaderElection.enabled=false")
    assert "Watching: team-a, team-b" in scoped
    assert "Replicas: 1\n" in scoped
