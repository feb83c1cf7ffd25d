"""The controller's Kubernetes client: a few verbs over the official client's ApiClient, on plain dicts.

The typed clients turn objects into models and back, which loses fields they do not know (CRs, newer
fields) and costs time at 200 objects; the controller renders and compares dicts anyway."""

from __future__ import annotations

import json
from urllib.parse import urlencode
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

FIELD_MANAGER = "specpilot"
REQUEST_TIMEOUT_S = 30.0


class KubeError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


# Reconciles run in this many threads at once; each needs its own pooled connection.
CONCURRENCY = 24


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """In-cluster config when running in a pod and no kubeconfig is given, else the kubeconfig."""
    cfg = client.Configuration()
    cfg.connection_pool_maxsize = CONCURRENCY
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        except config.ConfigException:
            pass
    config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    return client.ApiClient(cfg)


def collection_path(api_version: str, plural: str, namespace: str | None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


PLURALS = {"ConfigMap": "configmaps", "Service": "services", "Deployment": "deployments", "Event": "events",
           "Lease": "leases", "PodMonitor": "podmonitors"}


def object_path(obj: dict[str, Any], subresource: str | None = None) -> str:
    meta = obj["metadata"]
    path = collection_path(obj["apiVersion"], PLURALS[obj["kind"]], meta.get("namespace")) + f"/{meta['name']}"
    return f"{path}/{subresource}" if subresource else path


class Kube:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = api_client

    def request(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
                content_type: str = "application/json", timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        url = self.api.configuration.host + path
        headers = {"Accept": "application/json", "Content-Type": content_type}
        self.api.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        try:
            resp = self.api.rest_client.request(
                method, url + ("?" + urlencode(query) if query else ""),
                headers=headers, body=body, _request_timeout=timeout_s)
        except ApiException as exc:
            raise self._error(exc.status or 0, exc.body) from exc
        data = resp.read()
        if resp.status >= 400:
            raise self._error(resp.status, data)
        return json.loads(data) if data else None

    @staticmethod
    def _error(status: int, body: Any) -> KubeError:
        try:
            payload = json.loads(body)
            return KubeError(status, payload.get("reason", ""), payload.get("message", ""))
        except (TypeError, ValueError):
            return KubeError(status, "", str(body)[:500])

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, plural: str, namespace: str | None,
             label_selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        return self.request("GET", collection_path(api_version, plural, namespace), query=query)["items"]

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply, forcing ownership: what the operator renders is the truth for its fields."""
        return self.request("PATCH", object_path(obj), body=obj, content_type="application/apply-patch+yaml",
                            query={"fieldManager": FIELD_MANAGER, "force": "true"})

    def delete(self, obj: dict[str, Any]) -> None:
        try:
            self.request("DELETE", object_path(obj), body={"propagationPolicy": "Background"})
        except KubeError as exc:
            if exc.status != 404:
                raise

    def patch_status(self, path: str, status: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", f"{path}/status", body={"status": status},
                            content_type="application/merge-patch+json")

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return self.request("POST", collection_path(obj["apiVersion"], PLURALS[obj["kind"]], meta.get("namespace")),
                            body=obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", object_path(obj), body=obj)
