"""The real control plane starts, serves kubectl, runs its controllers and scheduler, enforces RBAC
and the CRD's CEL rules, survives apiserver and etcd restarts, compacts etcd on demand and leaves nothing
running when stopped."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot_harness.bench.controlplane_start import rss_mib
from specpilot_harness.controlplane import ControlPlane, binaries
from specpilot_harness.controlplane.controlplane import APISERVER, CONTROLLER_MANAGER, ETCD, SCHEDULER

REPO = Path(__file__).resolve().parents[2]
KUBECTL = REPO / ".tools" / "bin" / "kubectl"
CRD = REPO / "crds" / "specpilot.io_speculativedeployments.yaml"
EXAMPLE = REPO / "deploy" / "examples" / "off.yaml"
# The first test may build the control plane from source (once per machine, ~15 min on 2 cores).
BUILD_TIMEOUT_S = 1800
WAIT_S = 60.0


def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    if not KUBECTL.exists():
        pytest.fail("kubectl is needed by the control-plane tier: `make tools` puts it in .tools/bin")
    argv = [str(KUBECTL), "--kubeconfig", str(kubeconfig), *args]
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
    return done


def succeeds(kubeconfig: Path, *args: str) -> bool:
    return kubectl(kubeconfig, *args, check=False).returncode == 0


def get_json(kubeconfig: Path, *args: str) -> Any:
    return json.loads(kubectl(kubeconfig, "get", *args, "-o", "json").stdout)


def wait_for(what: str, probe: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    """Poll until `probe` returns something truthy; fail naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what}; last seen: {last!r}")


@dataclass(frozen=True)
class Started:
    plane: ControlPlane
    seconds: float


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    bin_dir = binaries()  # outside the clock: a build is not a start
    begun = time.monotonic()
    plane = ControlPlane.start(tmp_path_factory.mktemp("controlplane"), bin_dir)
    try:
        yield Started(plane, time.monotonic() - begun)
    finally:
        plane.stop()


@pytest.fixture
def plane(started: Started) -> ControlPlane:
    return started.plane


@pytest.fixture
def admin(plane: ControlPlane) -> Path:
    return plane.admin_kubeconfig


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_every_component_runs_once_started(started: Started) -> None:
    """How long the start takes is `specpilot bench controlplane`'s (make bench), against its 30 s."""
    pids = started.plane.pids()
    assert set(pids) == {ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER}
    rss = {name: rss_mib(pid) for name, pid in pids.items()}
    print(f"\ncontrol plane ready in {started.seconds:.1f} s; RSS MiB {rss}, total {sum(rss.values())}")


def test_kubectl_lists_and_creates_namespaces(admin: Path) -> None:
    names = set(kubectl(admin, "get", "ns", "-o", "name").stdout.split())
    assert {"namespace/default", "namespace/kube-system", "namespace/kube-public"} <= names
    kubectl(admin, "create", "namespace", "made-here")
    assert kubectl(admin, "get", "ns", "made-here", "-o", "jsonpath={.status.phase}").stdout == "Active"
    # The controller-manager's serviceaccount and root-ca-cert-publisher controllers fill a new namespace.
    wait_for("ServiceAccount default", lambda: succeeds(admin, "get", "serviceaccount/default", "-n", "made-here"))
    wait_for("kube-root-ca.crt", lambda: succeeds(admin, "get", "configmap/kube-root-ca.crt", "-n", "made-here"))


def test_a_deployment_gets_a_replicaset_and_pending_pods_without_nodes(admin: Path) -> None:
    kubectl(admin, "create", "namespace", "apps")
    kubectl(admin, "create", "deployment", "web", "-n", "apps", "--image=registry.k8s.io/pause:3.10", "--replicas=2")

    def replicasets() -> list[Any]:
        found = get_json(admin, "rs", "-n", "apps", "-l", "app=web")["items"]
        return [rs for rs in found if rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"]

    wait_for("the Deployment's ReplicaSet", replicasets)

    def pods() -> list[Any]:
        found = get_json(admin, "pods", "-n", "apps", "-l", "app=web")["items"]
        return found if len(found) == 2 else []

    for pod in wait_for("the ReplicaSet's two pods", pods):
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert pod["status"]["phase"] == "Pending"

    def unschedulable() -> bool:
        conditions = [c for p in pods() for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        return len(conditions) == 2 and all(c["reason"] == "Unschedulable" for c in conditions)

    wait_for("the scheduler to find no node for them", unschedulable)


def test_rbac_refuses_an_identity_until_a_role_is_bound(plane: ControlPlane, admin: Path) -> None:
    jane = plane.client_kubeconfig("jane", "jane", ("developers",))
    refused = kubectl(jane, "get", "pods", "-n", "default", check=False)
    assert refused.returncode != 0
    assert 'Error from server (Forbidden): pods is forbidden: User "jane" cannot list' in refused.stderr
    kubectl(admin, "create", "rolebinding", "jane-views", "-n", "default", "--clusterrole=view", "--group=developers")
    wait_for("jane's group to be allowed to list pods", lambda: succeeds(jane, "get", "pods", "-n", "default"))


def test_a_service_account_token_kubeconfig_authenticates(plane: ControlPlane, admin: Path) -> None:
    kubectl(admin, "create", "serviceaccount", "operator", "-n", "default")
    token = kubectl(admin, "create", "token", "operator", "-n", "default").stdout.strip()
    operator = plane.token_kubeconfig("operator", token)
    user = kubectl(operator, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    assert user == "system:serviceaccount:default:operator"


NAME_RULE = {
    "rule": "!self.metadata.name.endsWith('-canary') && !self.metadata.name.endsWith('-stable')",
    "message": "must not end in -canary or -stable",
}
WIDGET_SCHEMA = {
    "type": "object",
    "x-kubernetes-validations": [NAME_RULE],
    "properties": {"spec": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 32}}}},
}
WIDGETS = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.harness.specpilot.io"},
    "spec": {
        "group": "harness.specpilot.io",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": WIDGET_SCHEMA}}
        ],
    },
}


def test_the_server_enforces_a_crds_cel_rules(admin: Path) -> None:
    """The control plane's own CEL (the rule the SpeculativeDeployment CRD puts on names), on a small CRD."""
    kubectl(admin, "apply", "-f", "-", stdin=json.dumps(WIDGETS))
    kubectl(admin, "wait", "--for=condition=Established", "crd/widgets.harness.specpilot.io", "--timeout=30s")
    widget = {"apiVersion": "harness.specpilot.io/v1", "kind": "Widget", "spec": {"n": 3}}
    kubectl(admin, "apply", "-n", "default", "-f", "-", stdin=json.dumps({**widget, "metadata": {"name": "w"}}))
    canary = {**widget, "metadata": {"name": "w-canary"}}
    refused = kubectl(admin, "apply", "-n", "default", "-f", "-", stdin=json.dumps(canary), check=False)
    assert refused.returncode != 0 and "must not end in -canary or -stable" in refused.stderr
    too_many = {**widget, "metadata": {"name": "w2"}, "spec": {"n": 33}}
    refused = kubectl(admin, "apply", "-n", "default", "-f", "-", stdin=json.dumps(too_many), check=False)
    assert refused.returncode != 0 and "spec.n: Invalid value: 33" in refused.stderr


# crds/ as generated: tests/controlplane/test_crd_on_apiserver.py checks how the server judges objects.
def test_the_speculativedeployment_crd_applies_and_its_cel_refuses_a_canary_name(admin: Path) -> None:
    kubectl(admin, "apply", "-f", str(CRD))
    kubectl(admin, "wait", "--for=condition=Established", "crd/speculativedeployments.specpilot.io", "--timeout=30s")
    kubectl(admin, "create", "namespace", "tuned")
    valid = yaml.safe_load(EXAMPLE.read_text())
    kubectl(admin, "apply", "-n", "tuned", "-f", "-", stdin=yaml.safe_dump(valid))
    invalid = {**valid, "metadata": {"name": "qwen3-8b-canary"}}
    refused = kubectl(admin, "apply", "-n", "tuned", "-f", "-", stdin=yaml.safe_dump(invalid), check=False)
    assert refused.returncode != 0 and "must not end in -canary or -stable" in refused.stderr


def test_restart_apiserver_keeps_the_data(plane: ControlPlane, admin: Path) -> None:
    kubectl(admin, "create", "configmap", "survivor", "-n", "default", "--from-literal=a=b")
    before = plane.pids()[APISERVER]
    plane.restart_apiserver()
    assert plane.pids()[APISERVER] != before
    assert kubectl(admin, "get", "cm", "survivor", "-n", "default", "-o", "jsonpath={.data.a}").stdout == "b"


def test_restart_etcd_keeps_the_data(plane: ControlPlane, admin: Path) -> None:
    kubectl(admin, "create", "configmap", "durable", "-n", "default", "--from-literal=a=c")
    before = plane.pids()[ETCD]
    plane.restart_etcd()
    assert plane.pids()[ETCD] != before
    assert kubectl(admin, "get", "cm", "durable", "-n", "default", "-o", "jsonpath={.data.a}").stdout == "c"
    kubectl(admin, "create", "configmap", "after-etcd", "-n", "default")


def test_compact_etcd_expires_older_resource_versions(plane: ControlPlane, admin: Path) -> None:
    kubectl(admin, "create", "namespace", "compacted")
    path = "/api/v1/namespaces/compacted/configmaps"
    before = json.loads(kubectl(admin, "get", "--raw", path).stdout)["metadata"]["resourceVersion"]
    for i in range(3):
        kubectl(admin, "create", "configmap", f"c{i}", "-n", "compacted")
    exact = f"{path}?resourceVersion={before}&resourceVersionMatch=Exact"
    assert kubectl(admin, "get", "--raw", exact).returncode == 0

    assert plane.compact_etcd() > int(before)
    old_read = urllib.request.Request(
        plane.etcd_url + "/v3/kv/range", data=json.dumps({"key": "AA==", "revision": before}).encode()
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(old_read, timeout=10)
    assert "required revision has been compacted" in refused.value.read().decode()
    # The apiserver's watch cache drops its list snapshots from before the compaction at its next poll (15 s).
    wait_for(
        "a list at the old resourceVersion to get 410 Expired",
        lambda: "Error from server (Expired)" in kubectl(admin, "get", "--raw", exact, check=False).stderr,
        timeout=40,
    )


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    with ControlPlane.start(tmp_path / "cp", binaries()) as plane:
        pids = plane.pids()
        assert len(pids) == 4
    assert plane.pids() == {}
    assert [pid for pid in pids.values() if Path(f"/proc/{pid}").exists()] == []


def test_an_audit_log_for_one_user_records_that_user_alone(tmp_path: Path) -> None:
    """What `bench operator` counts the operator's requests by: the audit log names only the users asked for,
    and every other client's requests cost no audit write."""
    with ControlPlane.start(tmp_path / "cp", binaries(), audit_log=True, audit_users=("jane",)) as plane:
        jane = plane.client_kubeconfig("jane", "jane")
        kubectl(jane, "get", "pods", "-n", "default", check=False)  # refused (403), and audited all the same
        kubectl(plane.admin_kubeconfig, "get", "namespaces")
        records = wait_for("jane's request in the audit log",
                           lambda: (r := plane.audit_records()) and any(x.user == "jane" for x in r) and r)
        assert {r.user for r in records} == {"jane"}
        assert any(r.verb == "list" and r.resource == "pods" and r.forbidden for r in records)
