"""The sandbox on a real control plane: kube-apiserver, etcd, kube-controller-manager and kube-scheduler built
from source (harness/specpilot_harness/controlplane), the specpilot CRD applied to it, and the node agent
(harness/specpilot_harness/nodes) playing the kubelet of fake GPU nodes: `start`, `access`,
`write_kubeconfig`, `stop`.

What is real: every API request, admission (the CRD's schema and CEL, RBAC, Pod Security), Deployments ->
ReplicaSets -> Pods, EndpointSlices, garbage collection and scheduling. What is emulated, because it cannot run
here: the nodes (no kubelet, no container runtime: the node agent starts each pod's engine with a PodRuntime).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from specpilot.api.crd import crd as specpilot_crd
from specpilot.api.models import GPU_RESOURCES
from specpilot_harness.controlplane.controlplane import ControlPlane, binaries
from specpilot_harness.nodes.agent import NodeAgent, NodeSpec
from specpilot_harness.nodes.api import Credentials
from specpilot_harness.sandbox.kubeconfig import Access, write_kubeconfig
from specpilot_harness.sandbox.pod_runtime import PodRuntime

# What the nodes advertise by default: every vendor's GPU resource.
DEFAULT_GPU_RESOURCES = tuple(sorted(GPU_RESOURCES.values()))
# The default single node fits every pod: GPUs enough for any test or demo.
ROOMY_GPUS = 10_000
# ... and CPU and memory for that many serving pods' default requests (render/resources.py: up to 10 CPUs and
# 264Gi for eight AMD GPUs).
ROOMY_CPU, ROOMY_MEMORY = "100000", "4Pi"
ESTABLISHED_TIMEOUT_S = 30.0


def upstream_crds() -> list[dict[str, Any]]:
    """The CRDs scripts/build-control-plane.sh fetched from their projects' modules (Gateway API's HTTPRoute,
    the Prometheus Operator's PodMonitor, ServiceMonitor, PrometheusRule): what the operator and the chart
    write is validated by the server as on a user's cluster."""
    return [yaml.safe_load(path.read_text()) for path in sorted((binaries().parent / "crds").glob("*.yaml"))]


class RealSandbox:
    def __init__(self, runtime: PodRuntime | None = None, probe_period_s: float = 1.0, nodes: int = 0,
                 gpus_per_node: int = 8, gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES,
                 workdir: Path | None = None, audit: bool = False, audit_users: tuple[str, ...] = ()) -> None:
        """`nodes` > 0: that many nodes (sandbox-1..) with `gpus_per_node` of each of `gpu_resources`; 0: one
        node, `sandbox`, that fits every pod. `workdir` (default: a temporary directory, removed at stop) keeps the
        PKI, etcd's data and the components' logs; `audit` logs every API request there (logs/audit.log), or only `audit_users`' requests."""
        self.audit, self.audit_users = audit, audit_users
        self.runtime, self.probe_period_s = runtime, probe_period_s
        self.node_specs = [NodeSpec(f"sandbox-{i + 1}", {r: gpus_per_node for r in gpu_resources})
                           for i in range(nodes)] or [NodeSpec("sandbox", {r: ROOMY_GPUS for r in gpu_resources},
                                                               cpu=ROOMY_CPU, memory=ROOMY_MEMORY, pods=10_000)]
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="specpilot-sandbox-"))
        self.plane: ControlPlane | None = None
        self.agent: NodeAgent | None = None
        self.url = ""

    async def start(self, port: int = 0, install_crd: bool = True) -> str:
        self.plane = await asyncio.to_thread(ControlPlane.start, self.workdir, None, 60.0, port, self.audit,
                                              self.audit_users)
        self.url = self.plane.url
        if install_crd:
            for crd in [specpilot_crd(), *upstream_crds()]:
                await asyncio.to_thread(self.install, crd)
        admin = self.plane.pki.admin
        self.agent = NodeAgent(Credentials(self.url, self.plane.ca_path, admin.cert, admin.key), self.node_specs,
                               self.runtime, self.probe_period_s)
        await self.agent.start()
        await asyncio.to_thread(self.wait_for_service_account, "default")
        return self.url

    def wait_for_service_account(self, namespace: str) -> None:
        """Until kube-controller-manager has made the namespace's `default` ServiceAccount: before it, pods are
        refused ("error looking up service account"). Its controllers start a few seconds after its /healthz."""
        deadline = time.monotonic() + ESTABLISHED_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                self._request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
                return
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
            time.sleep(0.2)
        raise TimeoutError(f"no default ServiceAccount in {namespace} within {ESTABLISHED_TIMEOUT_S:g} s")

    @property
    def access(self) -> Access:
        """What a raw HTTP client needs (url, CA, the admin's token); kubectl reads the kubeconfig."""
        assert self.plane is not None
        return Access(self.url, self.plane.ca_path.read_bytes(), self.plane.admin_token)

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        access = self.access
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={**access.headers, "Content-Type": "application/json"})
        context: ssl.SSLContext = access.ssl_context()
        with urllib.request.urlopen(req, context=context, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def install(self, crd: dict[str, Any]) -> None:
        """Create a CRD and wait until the API server serves it (Established)."""
        self._request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        deadline = time.monotonic() + ESTABLISHED_TIMEOUT_S
        while time.monotonic() < deadline:
            conditions = (self._request("GET", path).get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                return
            time.sleep(0.2)
        raise TimeoutError(f"CRD {crd['metadata']['name']} not Established within {ESTABLISHED_TIMEOUT_S:g} s")

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        return write_kubeconfig(path, self.access, namespace)

    async def stop(self) -> None:
        if self.agent is not None:
            await self.agent.stop()
        if self.plane is not None:
            await asyncio.to_thread(self.plane.stop)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
