"""The chart's RBAC against what the operator really calls, on a real kube-apiserver that enforces it
(test_chart_rbac_cluster_wide.py, test_chart_rbac_namespaced.py).

The chart is `helm install`ed on the real control plane (harness/specpilot_harness/controlplane, its audit log
on) as a user installs it, its CRD included. Its operator Deployment is then deleted (no container runtime
runs an image here); instead `specpilot run` runs as a local process with that Deployment's own arguments and
a token of the chart's ServiceAccount, so the server authenticates it as that ServiceAccount and authorizes
every request, Kopf's cluster-scoped reads included, against the Roles and ClusterRoles the chart bound to it.
The operator reconciles a SpeculativeDeployment through its life (create until Ready, a deleted child, a spec
change, deletion) and hands its Lease over at shutdown. Then the audit log says what the ServiceAccount asked
and what the server answered: nothing was forbidden (no 403), the operator did its job, and each rule the
chart grants was needed (used by the scenario, or listed in NOT_EXERCISED with why the operator needs it).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx
import yaml
from helm_tools import CHART, HELM, KUBECTL, NAMESPACE, RELEASE, ROOT, by_kind

from specpilot.api.names import DEPLOYMENT_LABEL
from specpilot_harness.controlplane.audit import AuditRecord
from specpilot_harness.ports import free_port
from specpilot_harness.sandbox.real_cluster import RealSandbox

WATCHED = "team-a"
EXAMPLE = ROOT / "deploy" / "examples" / "mtp.yaml"
SD_API = "/apis/specpilot.io/v1alpha1"
WAIT_S = 120.0  # each step takes a second here; a CI machine installing vLLM meanwhile is slower
# Grants the scenario cannot reach, each with why the operator needs it.
NOT_EXERCISED = {
    # A child stops being rendered only when a canary ends (the tuning loop); the reconciler then deletes it.
    ("", "configmaps", "delete"), ("", "services", "delete"), ("apps", "deployments", "delete"),
    # An opted-in Secret's labels, read only when a spec names engine.hfTokenSecretRef
    # (tests/unit/test_author_policy.py).
    ("", "secrets", "get"),
}
Grant = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


class Tools:
    """helm and kubectl as the cluster's admin, with their caches and config in the test's directory."""

    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.env = {"KUBECONFIG": str(kubeconfig), "HOME": str(home), "KUBECACHEDIR": str(home / "kcache"),
                    "HELM_CACHE_HOME": str(home / "helm-cache"), "HELM_CONFIG_HOME": str(home / "helm-config"),
                    "HELM_DATA_HOME": str(home / "helm-data"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    async def run(self, tool: Path, *args: str, stdin: str | None = None) -> str:
        def call() -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(tool), *args], input=stdin, capture_output=True, text=True, env=self.env,
                                  timeout=120)

        done = await asyncio.to_thread(call)  # off the event loop: the node agent runs on it
        if done.returncode != 0:
            raise AssertionError(f"{tool.name} {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout


def _grants(rules: list[dict[str, Any]]) -> set[Grant]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def granted(objects: list[dict[str, Any]], account: str) -> set[Grant]:
    """Every (group, resource, verb) the chart's bindings give its ServiceAccount, in any namespace."""
    subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    roles = {(r["kind"], r["metadata"].get("namespace"), r["metadata"]["name"]): r["rules"]
             for r in by_kind(objects, "ClusterRole") + by_kind(objects, "Role")}
    grants: set[Grant] = set()
    for binding in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding"):
        if subject in binding["subjects"]:
            ref = binding["roleRef"]
            ns = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
            grants |= _grants(roles[(ref["kind"], ns, ref["name"])])
    return grants


def _grant(record: AuditRecord) -> Grant:
    assert record.resource is not None
    resource = f"{record.resource}/{record.subresource}" if record.subresource else record.resource
    return (record.api_group, resource, record.verb)


def exercised(record: AuditRecord) -> set[Grant]:
    """The grants a request needed: its own verb's, and create's too for a patch that created the object
    (server-side apply answers 201 then; kube-apiserver authorizes it as a create as well)."""
    grant = _grant(record)
    if record.verb == "patch" and record.response_code == 201:
        return {grant, (grant[0], grant[1], "create")}
    return {grant}


def forbidden(records: list[AuditRecord]) -> list[tuple[str, str, str, str]]:
    """What the server refused, once each: (verb, group, resource[/subresource] or the URL of a non-resource
    request, namespace or "" when cluster-scoped). The verb is the one the server names as missing, which
    may not be the request's: a server-side apply that creates is refused for want of create."""
    refused = set()
    for r in records:
        if r.forbidden:
            missing = re.search(r"cannot (\w+) ", r.message)
            verb = missing.group(1) if missing else r.verb
            refused.add((verb, r.api_group, _grant(r)[1] if r.resource else r.uri, r.namespace or ""))
    return sorted(refused)


async def _eventually(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    delay = 0.05
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


async def _start_operator(args: list[str], kubeconfig: Path, log: Path) -> asyncio.subprocess.Process:
    """`specpilot run` with the chart's arguments and the ServiceAccount's token instead of in-cluster config."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specpilot.cli", *args, "--kubeconfig", str(kubeconfig),
        "--metrics-port", str(free_port()), "--metrics-host", "127.0.0.1", "--identity", "rbac-test",
        stdout=log.open("wb"), stderr=asyncio.subprocess.STDOUT, cwd=ROOT)


def _model_cache() -> list[dict[str, Any]]:
    """The SpeculativeDeployment's model cache claim (the operator reads its access modes), bound to a volume
    so its pods can be scheduled: the cluster has no StorageClass to provision one."""
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "rbac-test-models"},
          "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                   "hostPath": {"path": "/var/lib/models"},
                   "claimRef": {"namespace": WATCHED, "name": "models"}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "models", "namespace": WATCHED},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": "rbac-test-models",
                    "resources": {"requests": {"storage": "100Gi"}}}}
    return [pv, pvc]


async def _life_of_a_speculative_deployment(api: httpx.AsyncClient, lease_path: str) -> None:
    """What the operator is asked to handle; returns once it handled each step."""
    await _eventually("the operator to take its Lease", lambda: _lease_held(api, lease_path))
    sd = yaml.safe_load(EXAMPLE.read_text())
    sd["spec"]["engine"] = {"modelCache": {"claimName": "models"}}  # tuned: its access modes are read
    name = sd["metadata"]["name"]
    sd_path = f"{SD_API}/namespaces/{WATCHED}/speculativedeployments/{name}"
    (await api.post(f"{SD_API}/namespaces/{WATCHED}/speculativedeployments", json=sd)).raise_for_status()

    async def status() -> dict[str, Any]:
        return (await api.get(sd_path)).json().get("status") or {}

    async def reconciled(generation: int) -> bool:
        return (await status()).get("observedGeneration") == generation

    async def ready() -> bool:
        return any(c["type"] == "Ready" and c["status"] == "True" for c in (await status()).get("conditions") or [])

    async def children(kind: str = "configmaps", group: str = "/api/v1") -> list[dict[str, Any]]:
        got = await api.get(f"{group}/namespaces/{WATCHED}/{kind}",
                            params={"labelSelector": f"{DEPLOYMENT_LABEL}={name}"})
        return list(got.json()["items"])

    async def no_children() -> bool:
        return not any([await children("configmaps"), await children("services"),
                        await children("deployments", "/apis/apps/v1")])

    await _eventually("the first reconcile", lambda: reconciled(1))
    await _eventually("the SpeculativeDeployment to be Ready (its pods scheduled and ready)", ready)
    engine = f"{name}-engine"

    async def engine_config() -> bool:
        return any(c["metadata"]["name"] == engine for c in await children())

    (await api.delete(f"/api/v1/namespaces/{WATCHED}/configmaps/{engine}")).raise_for_status()
    await _eventually("the deleted ConfigMap to be restored", engine_config)
    patch = {"spec": {"speculative": {"numSpeculativeTokens": sd["spec"]["speculative"]["numSpeculativeTokens"] + 1}}}
    (await api.patch(sd_path, json=patch, headers={"Content-Type": "application/merge-patch+json"})).raise_for_status()
    await _eventually("the spec change to be reconciled", lambda: reconciled(2))
    (await api.delete(sd_path)).raise_for_status()
    await _eventually("the SpeculativeDeployment to be gone", lambda: _gone(api, sd_path))
    await _eventually("its ConfigMaps, Services and Deployments to be gone", no_children)


async def _cluster_state(api: httpx.AsyncClient) -> str:
    """What a failed wait needs to be understood: the watched namespace's workloads, claims and Events."""
    lines = []
    for group, kind in (("/apis/apps/v1", "deployments"), ("/apis/apps/v1", "replicasets"), ("/api/v1", "pods"),
                        ("/api/v1", "persistentvolumeclaims"), ("/api/v1", "serviceaccounts")):
        for obj in (await api.get(f"{group}/namespaces/{WATCHED}/{kind}")).json().get("items") or []:
            status = obj.get("status") or {}
            conditions = [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                          for c in status.get("conditions") or []]
            lines.append(f"{kind} {obj['metadata']['name']}: phase={status.get('phase')} "
                         f"node={(obj.get('spec') or {}).get('nodeName')} replicas={status.get('replicas')} "
                         f"ready={status.get('readyReplicas')} conditions={conditions}")
    events = (await api.get(f"/api/v1/namespaces/{WATCHED}/events")).json().get("items") or []
    lines += [f"event {e.get('lastTimestamp') or e.get('eventTime')} {e.get('type')} "
              f"{(e.get('involvedObject') or {}).get('kind')}/{(e.get('involvedObject') or {}).get('name')} "
              f"{e.get('reason')}: {e.get('message')}" for e in events[-30:]]
    return "cluster state:\n" + "\n".join(lines)


def _component_logs(workdir: Path) -> str:
    """The ends of kube-controller-manager's and kube-scheduler's logs (the sandbox keeps them in its workdir)."""
    parts = []
    for component in ("kube-controller-manager", "kube-scheduler"):
        path = workdir / "logs" / f"{component}.log"
        text = path.read_text(errors="replace")[-2500:] if path.exists() else "(no log)"
        parts.append(f"{component} log:\n{text}")
    return "\n".join(parts)


async def _gone(api: httpx.AsyncClient, path: str) -> bool:
    return (await api.get(path)).status_code == 404


async def _lease_held(api: httpx.AsyncClient, lease_path: str) -> bool:
    reply = await api.get(lease_path)
    return reply.status_code == 200 and bool((reply.json().get("spec") or {}).get("holderIdentity"))


async def _install_chart(tools: Tools, chart_args: tuple[str, ...]) -> list[dict[str, Any]]:
    """`helm install` as a user runs it; the objects of the release, as the cluster holds them."""
    await tools.run(KUBECTL, "create", "namespace", WATCHED)
    await tools.run(HELM, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                    *chart_args)
    manifest = await tools.run(HELM, "get", "manifest", RELEASE, "--namespace", NAMESPACE)
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


async def _record(chart_args: tuple[str, ...], tmp_path: Path) -> tuple[list[AuditRecord], list[dict[str, Any]], str]:
    """Runs the scenario; the ServiceAccount's requests, the release's objects and the ServiceAccount's name."""
    sandbox = RealSandbox(audit=True)
    log = tmp_path / "operator.log"
    operator = None
    try:
        await sandbox.start(install_crd=False)  # the chart installs its own
        plane = sandbox.plane
        assert plane is not None
        tools = Tools(plane.admin_kubeconfig, tmp_path)
        objects = await _install_chart(tools, chart_args)
        (deployment,) = by_kind(objects, "Deployment")
        (account,) = by_kind(objects, "ServiceAccount")
        sa = account["metadata"]["name"]
        user = f"system:serviceaccount:{NAMESPACE}:{sa}"
        # Its pods would run an image nothing here can run; the operator runs below as a local process instead.
        await tools.run(KUBECTL, "delete", "deployment", deployment["metadata"]["name"], "--namespace", NAMESPACE)
        await tools.run(KUBECTL, "apply", "-f", "-", stdin=yaml.safe_dump_all(_model_cache()))
        # Set-up the scenario does not test, done before the operator starts: a pod is refused until its
        # namespace's default ServiceAccount exists, and unschedulable until its claim is Bound.
        await asyncio.to_thread(sandbox.wait_for_service_account, WATCHED)
        await tools.run(KUBECTL, "wait", "--for=jsonpath={.status.phase}=Bound", "persistentvolumeclaim/models",
                        "--namespace", WATCHED, "--timeout=60s")
        token = (await tools.run(KUBECTL, "create", "token", sa, "--namespace", NAMESPACE, "--duration=1h")).strip()
        kubeconfig = plane.token_kubeconfig("operator", token, NAMESPACE)
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        lease_name = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--lease-name="))
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{lease_name}"
        access = sandbox.access
        async with httpx.AsyncClient(base_url=sandbox.url, headers=access.headers, verify=access.ssl_context(),
                                     timeout=10) as api:
            operator = await _start_operator(container["args"], kubeconfig, log)
            try:
                await _life_of_a_speculative_deployment(api, lease_path)
            except AssertionError as exc:
                refused = forbidden(plane.audit_records(user))
                raise AssertionError(f"{exc}; refused by the apiserver: {refused}; operator log:\n"
                                     f"{log.read_text()[-3000:]}\n{await _cluster_state(api)}\n"
                                     f"{_component_logs(sandbox.workdir)}") from None
            # A clean stop hands the Lease over: that write is part of what the operator does.
            operator.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(operator.wait(), 30) == 0, log.read_text()[-3000:]
        return plane.audit_records(user), objects, sa
    finally:
        if operator is not None and operator.returncode is None:
            operator.kill()
            await operator.wait()
        await sandbox.stop()


# The chart's two RBAC modes (values), each tested in its own file so that two workers run them at once.
CLUSTER_WIDE: tuple[str, ...] = ()
NAMESPACED: tuple[str, ...] = ("--set", f"watch.namespaces={{{WATCHED}}}")


async def assert_chart_rbac_allows_every_call_and_grants_nothing_unused(chart_args: tuple[str, ...],
                                                                          tmp_path: Path) -> None:
    records, objects, sa = await _record(chart_args, tmp_path)
    assert records, "the audit log holds no request of the chart's ServiceAccount"
    refused = forbidden(records)
    assert refused == [], "the real apiserver forbade these calls of the operator under the chart's RBAC " \
                          "(charts/specpilot/templates/_rbac.tpl)"
    used = set().union(*(exercised(r) for r in records if r.resource is not None))
    unused = granted(objects, sa) - used - NOT_EXERCISED
    assert unused == set(), "granted but never needed: drop them from charts/specpilot/templates/_rbac.tpl"
