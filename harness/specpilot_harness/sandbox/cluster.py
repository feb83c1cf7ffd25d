"""The sandbox as one object: API server, pod runner and the specpilot CRD, in the caller's event loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specpilot.api.crd import crd as specpilot_crd
from specpilot_harness.sandbox.admission import admit_custom_resource
from specpilot_harness.sandbox import tls
from specpilot_harness.sandbox.kubeconfig import Access, write_kubeconfig
from specpilot_harness.sandbox.pods import PodRunner, PodRuntime
from specpilot_harness.sandbox.scheduling import DEFAULT_GPU_RESOURCES, gpu_nodes
from specpilot_harness.sandbox.server import ApiServer


class Sandbox:
    def __init__(self, runtime: PodRuntime | None = None, probe_period_s: float = 1.0, nodes: int = 0,
                 gpus_per_node: int = 8, gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES) -> None:
        """`nodes` > 0: that many nodes with `gpus_per_node` of each of `gpu_resources` allocatable, enforced
        when pods are scheduled; 0: one node that fits every pod."""
        self.credentials = tls.generate()
        self.api = ApiServer(admission=admit_custom_resource, ssl_context=self.credentials.server_context(),
                             token=self.credentials.token)
        self.pods = PodRunner(self.api.store, runtime, probe_period_s,
                              gpu_nodes(nodes, gpus_per_node, gpu_resources) if nodes else None)
        self.url = ""

    async def start(self, port: int = 0, install_crd: bool = True) -> str:
        bound = await self.api.start("127.0.0.1", port)
        self.url = f"https://127.0.0.1:{bound}"
        self.pods.start()
        if install_crd:
            self.install(specpilot_crd())
        return self.url

    def install(self, crd: dict[str, Any]) -> None:
        rtype = self.api.registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert rtype is not None
        self.api.store.create(rtype, None, crd)

    @property
    def access(self) -> Access:
        """What a raw HTTP client needs (url, CA, token); kubectl and the kubernetes client read the kubeconfig."""
        return Access(self.url, self.credentials.ca_pem, self.credentials.token)

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        return write_kubeconfig(path, self.access, namespace)

    async def stop(self) -> None:
        await self.pods.stop()
        await self.api.stop()
