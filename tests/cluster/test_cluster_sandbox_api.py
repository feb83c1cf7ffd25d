"""The sandbox's cluster (the real control plane with the node agent's fake nodes) behaves as kubectl and the
Kubernetes client expect (no operator needed)."""

from __future__ import annotations

import ipaddress
import json
import threading
from pathlib import Path
from typing import Iterator

import pytest
from cluster_kit import Cluster, start_cluster, stop_cluster, wait_for
from kubernetes import client, config, watch


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("bare"))
    try:
        yield c
    finally:
        stop_cluster(c)


def _api(c: Cluster) -> client.ApiClient:
    return config.new_client_from_config(str(c.kubeconfig))


def test_kubectl_discovers_explains_and_describes_the_crd(bare: Cluster) -> None:
    resources = bare.kubectl("api-resources").stdout
    assert "speculativedeployments" in resources and "specpilot.io/v1alpha1" in resources
    explained = bare.kubectl("explain", "speculativedeployment.spec.speculative.numSpeculativeTokens").stdout
    assert "num_speculative_tokens" in explained and "<integer>" in explained
    bare.kubectl("create", "namespace", "explain")
    bare.kubectl("create", "configmap", "plain", "-n", "explain", "--from-literal=a=b")
    described = bare.kubectl("describe", "configmap", "plain", "-n", "explain").stdout
    assert "Name:" in described and "plain" in described
    assert bare.kubectl("delete", "configmap", "plain", "-n", "explain").returncode == 0
    assert bare.get("configmap", "-n", "explain", "plain") is None


def test_unknown_fields_are_refused_under_kubectl_strict_validation(bare: Cluster) -> None:
    bare.kubectl("create", "namespace", "strict")
    manifest = """
apiVersion: specpilot.io/v1alpha1
kind: SpeculativeDeployment
metadata: {name: typo}
spec:
  model: m
  speculative: {method: ngram, numSpeculativeToken: 3}
"""
    done = bare.apply(manifest, "strict")
    assert done.returncode != 0 and 'unknown field "spec.speculative.numSpeculativeToken"' in done.stderr


def test_watch_resumes_from_a_resource_version_without_losing_events(bare: Cluster) -> None:
    core = client.CoreV1Api(_api(bare))
    core.create_namespace({"metadata": {"name": "watching"}})
    listed = core.list_namespaced_config_map("watching")
    names = [f"cm-{i}" for i in range(30)]

    def writer() -> None:
        for name in names:
            core.create_namespaced_config_map("watching", {"metadata": {"name": name, "labels": {"w": "1"}}})

    thread = threading.Thread(target=writer)
    thread.start()
    seen: list[str] = []
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_config_map, "watching", label_selector="w=1",
                               resource_version=listed.metadata.resource_version, timeout_seconds=30):
        seen.append(event["object"].metadata.name)
        if len(seen) == len(names):
            stream.stop()
    thread.join()
    assert seen == names
    # Resuming from the middle replays exactly the rest.
    middle = core.read_namespaced_config_map(names[14], "watching").metadata.resource_version
    rest = [e["object"].metadata.name for e in watch.Watch().stream(
        core.list_namespaced_config_map, "watching", resource_version=middle, timeout_seconds=1)]
    assert rest == names[15:]


def test_owner_references_finalizers_and_generate_name(bare: Cluster) -> None:
    core = client.CoreV1Api(_api(bare))
    core.create_namespace({"metadata": {"name": "gc"}})
    owner = core.create_namespaced_config_map("gc", {"metadata": {"generateName": "owner-"}})
    assert owner.metadata.name.startswith("owner-") and len(owner.metadata.name) > len("owner-")
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid}
    core.create_namespaced_config_map("gc", {"metadata": {"name": "child", "ownerReferences": [ref],
                                                          "finalizers": ["example.com/hold"]}})
    core.delete_namespaced_config_map(owner.metadata.name, "gc")
    # The dependent is being deleted, but its finalizer holds it until removed.
    held = wait_for("deletionTimestamp on the child",
                    lambda: (c := core.read_namespaced_config_map("child", "gc")).metadata.deletion_timestamp and c)
    assert held.metadata.finalizers == ["example.com/hold"]
    core.patch_namespaced_config_map("child", "gc", {"metadata": {"finalizers": None}})
    assert bare.get("configmap", "-n", "gc", "child") is None


def test_deployment_rolls_pods_by_template_hash_and_fills_endpoints(bare: Cluster) -> None:
    bare.kubectl("create", "namespace", "roll")
    manifest = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: "web:1", ports: [{name: http, containerPort: 8000}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
"""
    assert bare.apply(manifest, "roll").returncode == 0
    assert bare.kubectl("rollout", "status", "deployment/web", "-n", "roll", "--timeout=60s").returncode == 0
    assert bare.apply(manifest.replace("web:1", "web:2"), "roll").returncode == 0
    assert bare.kubectl("rollout", "status", "deployment/web", "-n", "roll", "--timeout=60s").returncode == 0
    pods = wait_for("only new pods", lambda: (ps := bare.items("pods", "-n", "roll")) and len(ps) == 2
                    and {p["spec"]["containers"][0]["image"] for p in ps} == {"web:2"} and ps)
    ips = sorted(p["status"]["podIP"] for p in pods)
    # Addresses an EndpointSlice admits: private, not loopback (the node agent's /24 on lo).
    assert all(ipaddress.ip_address(ip).is_private and not ipaddress.ip_address(ip).is_loopback for ip in ips)
    wait_for("endpoints of the new pods", lambda: bare.ready_addresses("roll", "web") == ips)
    slices = bare.items("endpointslices", "-n", "roll", "-l", "kubernetes.io/service-name=web")
    assert {p["port"] for s in slices for p in s.get("ports") or []} == {8000}
    assert len(bare.items("rs", "-n", "roll")) == 2


def test_a_rollout_that_cannot_progress_reports_the_deadline(tmp_path: Path) -> None:
    """Pods whose runtime never gets ready: the Deployment says ProgressDeadlineExceeded, as the real one."""
    c = start_cluster(tmp_path / "stuck", "--pod-runtime", "cluster_kit:NeverReady")
    try:
        c.kubectl("create", "namespace", "stuck")
        manifest = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: stuck}
spec:
  progressDeadlineSeconds: 2
  selector: {matchLabels: {app: stuck}}
  template:
    metadata: {labels: {app: stuck}}
    spec: {containers: [{name: c, image: "stuck:1"}]}
"""
        assert c.apply(manifest, "stuck").returncode == 0
        done = c.kubectl("rollout", "status", "deployment/stuck", "-n", "stuck", "--timeout=60s", check=False)
        assert done.returncode != 0 and "exceeded its progress deadline" in done.stderr
        pod = c.items("pods", "-n", "stuck")[0]
        assert pod["status"]["phase"] == "Running" and not pod["status"]["containerStatuses"][0]["ready"]
    finally:
        stop_cluster(c)


def test_replace_and_namespace_deletion(bare: Cluster) -> None:
    bare.kubectl("create", "namespace", "doomed")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "doomed"},
          "data": {"a": "1"}}
    assert bare.apply(cm, "doomed").returncode == 0
    before = bare.get("configmap", "-n", "doomed", "cfg")
    cm["data"] = {"b": "2"}
    done = bare.kubectl("replace", "-f", "-", stdin=json.dumps(cm))
    assert done.returncode == 0
    after = bare.get("configmap", "-n", "doomed", "cfg")
    assert after["data"] == {"b": "2"} and after["metadata"]["uid"] == before["metadata"]["uid"]
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])

    assert bare.kubectl("delete", "namespace", "doomed", "--timeout=60s").returncode == 0
    assert bare.get("namespace", "doomed") is None
    assert bare.items("configmaps", "-n", "doomed") == []
    refused = bare.apply(cm, "doomed")
    assert refused.returncode != 0 and 'namespaces "doomed" not found' in refused.stderr


def test_lists_come_in_pages(bare: Cluster) -> None:
    core = client.CoreV1Api(_api(bare))
    core.create_namespace({"metadata": {"name": "paged"}})
    for i in range(7):
        core.create_namespaced_config_map("paged", {"metadata": {"name": f"p-{i}"}})
    names, token = [], None
    while True:
        page = core.list_namespaced_config_map("paged", limit=3, _continue=token)
        names += [cm.metadata.name for cm in page.items if cm.metadata.name != "kube-root-ca.crt"]
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"p-{i}" for i in range(7)]
    assert len(bare.kubectl("get", "cm", "-n", "paged", "--chunk-size=2", "-o", "name").stdout.split()) == 8


def test_a_pod_waits_for_the_configmap_it_mounts_as_a_kubelet_does(bare: Cluster) -> None:
    """A pod created before its ConfigMap (an operator's applies racing, a user's order) stays ContainerCreating
    and says which volume; once the ConfigMap exists it starts, with the ConfigMap's files. An optional volume
    does not hold it."""
    bare.kubectl("create", "namespace", "mounts")
    pod = """
apiVersion: v1
kind: Pod
metadata: {name: early}
spec:
  containers: [{name: c, image: "web:1", volumeMounts: [{name: conf, mountPath: /etc/conf},
                                                       {name: extra, mountPath: /etc/extra}]}]
  volumes: [{name: conf, configMap: {name: late}}, {name: extra, configMap: {name: never, optional: true}}]
"""
    assert bare.apply(pod, "mounts").returncode == 0

    def waiting() -> dict | None:
        statuses = ((bare.get("pod", "early", "-n", "mounts") or {}).get("status") or {}).get("containerStatuses")
        return ((statuses or [{}])[0].get("state") or {}).get("waiting")
    said = wait_for("the pod to say what it waits for", lambda: (w := waiting()) and "late" in w.get("message", "")
                    and w)
    assert said["reason"] == "ContainerCreating" and 'volume "conf"' in said["message"], said
    assert "never" not in said["message"]
    assert bare.apply("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late}\ndata: {k: v}\n", "mounts").returncode == 0
    wait_for("the pod to run", lambda: ((bare.get("pod", "early", "-n", "mounts") or {}).get("status") or {})
             .get("phase") == "Running" and not waiting())
