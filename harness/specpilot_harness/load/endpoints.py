"""Where traffic goes: one URL, or the ready pods behind a SpeculativeDeployment's Service.

For a Service the endpoints are computed as Kubernetes' endpoints controller computes them: pods that
match the Service's selector, are Ready, not terminating and have an IP, at the Service port's
targetPort (a number, or a container port name). The list is refreshed while load runs, so a canary
that comes or goes during a run gets its share.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# Pod labels that say which track and N a pod serves (api/names.py owns the contract).
from specpilot.api.names import N_LABEL, TRACK_LABEL
from specpilot.scrape.pods import pod_url


# API answers worth asking again: throttled, or the server busy, restarting or timing out.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Endpoint:
    url: str
    label: str  # what the summary calls it: the URL, or pod name with track and N


class Targets(Protocol):
    def current(self) -> list[Endpoint]: ...


@dataclass(frozen=True)
class StaticTargets:
    endpoints: tuple[Endpoint, ...]

    def current(self) -> list[Endpoint]:
        return list(self.endpoints)


class EndpointError(RuntimeError):
    """The Service cannot be resolved (missing, no selector, no port); the message says which.
    `transient`: it may resolve if asked again (not created yet, the API server busy or restarting)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return (not (pod.get("metadata") or {}).get("deletionTimestamp") and bool(status.get("podIP"))
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions))


def _target_port(service: Mapping[str, Any], pod: Mapping[str, Any]) -> int | None:
    port = service["spec"]["ports"][0]
    target = port.get("targetPort", port["port"])
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for p in container.get("ports") or []:
            if p.get("name") == target:
                return int(p["containerPort"])
    return None  # the pod does not expose that port name: the Service skips it too


def ready_endpoints(service: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> list[Endpoint]:
    """The Service's endpoints among `pods` (dicts as the API returns them)."""
    spec = service.get("spec") or {}
    selector = spec.get("selector") or {}
    name = (service.get("metadata") or {}).get("name", "?")
    if not selector:
        raise EndpointError(f"Service {name} has no selector; specpilot load cannot compute its endpoints")
    if not spec.get("ports"):
        raise EndpointError(f"Service {name} has no ports")
    out: list[Endpoint] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()) or not _ready(pod):
            continue
        port = _target_port(service, pod)
        if port is None:
            continue
        label = meta.get("name", pod["status"]["podIP"])
        if TRACK_LABEL in labels:  # track and N first: pod names are long and tables narrow
            label = f"{labels[TRACK_LABEL]} N={labels.get(N_LABEL, '?')} {label}"
        url = pod_url(pod["status"]["podIP"], port)
        if url:
            out.append(Endpoint(url, label))
    return sorted(out, key=lambda e: e.label)


class ServiceTargets:
    """A Service's endpoints read through the Kubernetes API, refreshed in the background."""

    def __init__(self, name: str, namespace: str, kubeconfig: str | None, refresh_s: float = 2.0) -> None:
        # Imported here so `specpilot load --url` works without cluster credentials.
        from kubernetes import client, config

        try:
            config.load_kube_config(config_file=kubeconfig)
        except config.ConfigException:
            if kubeconfig:
                raise
            config.load_incluster_config()
        api = client.ApiClient()
        self._core = client.CoreV1Api(api)
        self._api = api
        self.name = name
        self.namespace = namespace
        self.refresh_s = refresh_s
        self._endpoints: list[Endpoint] = []

    def resolve(self) -> list[Endpoint]:
        from kubernetes.client.exceptions import ApiException

        from urllib3.exceptions import HTTPError

        where = f"Service {self.namespace}/{self.name}"
        try:
            service = self._core.read_namespaced_service(self.name, self.namespace, _preload_content=False)
            service_doc = _json(service)
            selector = ",".join(f"{k}={v}" for k, v in
                                ((service_doc.get("spec") or {}).get("selector") or {}).items())
            pods = self._core.list_namespaced_pod(self.namespace, label_selector=selector, _preload_content=False)
        except ApiException as e:
            if e.status == 404:
                raise EndpointError(f"no {where}", transient=True) from e
            raise EndpointError(f"cannot read {where}: HTTP {e.status} {e.reason}",
                                transient=e.status in TRANSIENT_STATUSES) from e
        except HTTPError as e:
            raise EndpointError(f"cannot reach the Kubernetes API for {where}: {e}", transient=True) from e
        return ready_endpoints(service_doc, _json(pods).get("items") or [])

    async def start(self, wait_s: float = 0.0) -> None:
        """Resolve the endpoints, asking again for up to `wait_s` seconds while that may help: load is often
        started right after `kubectl apply`, before the operator has created the Service."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._endpoints = await asyncio.to_thread(self.resolve)
                return
            except EndpointError as e:
                if not e.transient or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))

    async def refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            try:
                self._endpoints = await asyncio.to_thread(self.resolve)
            except Exception:  # noqa: BLE001 - keep the last known endpoints through an API hiccup
                continue

    def current(self) -> list[Endpoint]:
        return self._endpoints

    def close(self) -> None:
        self._api.close()


def _json(response: Any) -> dict[str, Any]:
    """Raw API JSON: the pods' dicts as the API server sent them, not the client's model objects."""
    return json.loads(response.data)
