"""The product's one Kubernetes API client: typed verbs on plain dicts, retries, and the leader fence.

Every call the operator makes besides Kopf's watches goes through `Kube` (Kopf's own writes go through
the same fence, see kopf_session.py). Credentials and TLS come from the official client's configuration
and its urllib3 pool; bodies are serialised here, strictly (`allow_nan=False`: a real API server refuses
NaN and Infinity, so they are refused before sending, and status is made finite first).

Retries: connection errors, 429 (after its Retry-After) and 5xx, with exponential backoff and full
jitter, a bounded number of times. Other 4xx (404, 409, 422, ...) are answers, not hiccups: raised at once.

Fencing: a `Kube` made with a fence checks it before every write and sends nothing when it fails, so an
operator that lost (or never held) the Lease cannot write, even from a reconcile already under way.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode

import urllib3
from kubernetes import client, config

from specpilot.api.models import API_VERSION, PLURAL

log = logging.getLogger(__name__)

FIELD_MANAGER = "specpilot"
REQUEST_TIMEOUT_S = 30.0
# Threads that make API calls at once: reconciles (RECONCILE_WORKERS), everything else the event loop
# hands to a thread (CONCURRENCY: the tuning loops' reads and writes, the Lease), Event posters; each needs
# its own pooled connection, or urllib3 discards one and the next call pays a new TLS handshake.
# Reconciles wait on a busy kube-apiserver and share one GIL: with the real control plane on 2 cores, 2 at once
# had 1000 new objects Ready in 82 s with reconcile p99 404 ms, 4 at once in 113 s with 1157 ms (each
# reconcile's requests queued behind the others'; docs/operator.md "Scale").
RECONCILE_WORKERS = 2
# A reconcile's requests about its children (reads of names it claims, applies) go out at once: one round trip
# instead of one per child, which is most of a new object's reconcile while kube-apiserver is busy.
CHILD_REQUESTS = 4
CONCURRENCY = 24
EVENT_POSTERS = 2
POOL_SIZE = RECONCILE_WORKERS * (1 + CHILD_REQUESTS) + CONCURRENCY + EVENT_POSTERS
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
TYPED_PATCH_FAILURE = "failed to create typed patch object"
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


class KubeError(Exception):
    def __init__(self, status: int, reason: str, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message
        self.retry_after_s = retry_after_s

    @property
    def retriable(self) -> bool:
        """Status 0 is a connection error; 429 and 5xx may go away; any other answer will not, nor will a body
        server-side apply cannot type (kube-apiserver answers that with a 500: a toleration's
        `tolerationSeconds: "soon"` is "failed to create typed patch object ... expected numeric")."""
        if self.status >= 500 and TYPED_PATCH_FAILURE in self.message:
            return False
        return self.status == 0 or self.status == 429 or self.status >= 500

    @property
    def transient(self) -> bool:
        """Worth another reconcile: retriable, or a 409 Conflict (the object moved under the write; a
        level-based reconcile reads it afresh, whereas resending the same body would not help)."""
        return self.retriable or self.status == 409


class NotLeader(Exception):
    """This operator does not hold the Lease (any more): it must not write."""


class Fence(Protocol):
    def check(self) -> None:
        """Raise NotLeader unless writes are allowed now."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter")."""

    attempts: int = 5
    base_s: float = 0.2
    cap_s: float = 10.0

    def delay(self, attempt: int, retry_after_s: float | None = None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.cap_s)
        return random.uniform(0, min(self.cap_s, self.base_s * 2 ** attempt))


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """In-cluster config when running in a pod and no kubeconfig is given, else the kubeconfig."""
    cfg = client.Configuration()
    cfg.connection_pool_maxsize = POOL_SIZE
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
           "Lease": "leases", "PodMonitor": "podmonitors", "SpeculativeDeployment": PLURAL,
           "HTTPRoute": "httproutes"}


def object_path(obj: dict[str, Any], subresource: str | None = None) -> str:
    meta = obj["metadata"]
    path = collection_path(obj["apiVersion"], PLURALS[obj["kind"]], meta.get("namespace")) + f"/{meta['name']}"
    return f"{path}/{subresource}" if subresource else path


def sd_path(namespace: str, name: str) -> str:
    return collection_path(API_VERSION, PLURAL, namespace) + f"/{name}"


def finite(value: Any) -> Any:
    """`value` with every NaN or infinite float replaced by None (JSON null): what status may hold."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _retry_after(headers: Any) -> float | None:
    value = (headers or {}).get("Retry-After", "")
    return float(value) if value.strip().isascii() and value.strip().isdigit() else None


class Kube:
    def __init__(self, api_client: client.ApiClient, fence: Fence | None = None, backoff: Backoff = Backoff(),
                 user_agent: str = FIELD_MANAGER) -> None:
        self.api, self.fence, self.backoff, self.user_agent = api_client, fence, backoff, user_agent

    def fenced(self, fence: Fence) -> "Kube":
        """The same client, writing only while `fence` allows it."""
        return Kube(self.api, fence, self.backoff, self.user_agent)

    # ---- verbs -------------------------------------------------------------------------------

    def get(self, path: str, cached: bool = False) -> dict[str, Any] | None:
        """The object at `path`, None when there is none. `cached` reads kube-apiserver's watch cache
        (resourceVersion=0: no etcd round trip, possibly a few milliseconds old): for reads whose answer is a
        hint that a later write re-checks, never for a read-modify-write."""
        try:
            return self._call("GET", path, query={"resourceVersion": "0"} if cached else None)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def labels_of(self, path: str) -> dict[str, str] | None:
        """An object's labels, asked for as metadata only (PartialObjectMetadata: a Secret's data is never
        sent); None when it does not exist."""
        try:
            found = self._call("GET", path, accept=METADATA_ONLY)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        labels = ((found or {}).get("metadata") or {}).get("labels")
        return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}

    def list(self, api_version: str, plural: str, namespace: str | None,
             label_selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        return self._call("GET", collection_path(api_version, plural, namespace), query=query)["items"]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return self._call("POST", collection_path(obj["apiVersion"], PLURALS[obj["kind"]], meta.get("namespace")),
                          body=obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT; conditional on the object's resourceVersion when it carries one (409 when it moved)."""
        return self._call("PUT", object_path(obj), body=obj)

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._call("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def apply(self, obj: dict[str, Any], field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        """Server-side apply. Forcing takes the fields over from other managers: only for objects the operator
        owns, where what it renders is the truth for its fields; a first apply does not force, so a field
        another manager set in the moment since the operator saw the name free is a 409, not a takeover."""
        return self._call("PATCH", object_path(obj), body=obj, content_type=APPLY_PATCH,
                          query={"fieldManager": field_manager, "force": "true" if force else "false"})

    def patch_status(self, path: str, status: dict[str, Any], resource_version: str | None = None) -> dict[str, Any]:
        """Merge-patch `/status`; non-finite numbers become null (the one place status is written). With
        `resource_version`, only onto that version of the object (a 409 when it has moved since)."""
        body: dict[str, Any] = {"status": finite(status)}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return self._call("PATCH", f"{path}/status", body=body, content_type=MERGE_PATCH)

    def delete(self, obj: dict[str, Any]) -> None:
        """Delete `obj`; with its uid known, only that very object (a 409 when the name now holds another:
        one created since, by anyone, is not this delete's to remove)."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        uid = (obj.get("metadata") or {}).get("uid")
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._call("DELETE", object_path(obj), body=body)
        except KubeError as exc:
            if exc.status != 404:
                raise

    # ---- transport ---------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
              content_type: str = "application/json", accept: str = "application/json") -> Any:
        # Serialised once, strictly: a NaN here is a bug to surface, not to send.
        data = None if body is None else json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
        for attempt in range(self.backoff.attempts):
            try:
                return self._send(method, path, data, query, content_type, accept)
            except KubeError as exc:
                if not exc.retriable or attempt + 1 == self.backoff.attempts:
                    raise
                pause = self.backoff.delay(attempt, exc.retry_after_s)
                log.debug("%s %s: %s; retrying in %.2fs", method, path, exc, pause)
                time.sleep(pause)
        raise AssertionError("unreachable: the last attempt raises")

    def _send(self, method: str, path: str, data: bytes | None, query: dict[str, str] | None,
              content_type: str, accept: str) -> Any:
        if method in WRITES and self.fence is not None:
            self.fence.check()  # before every attempt: a retry must not outlive the leadership either
        url = self.api.configuration.host + path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": accept, "Content-Type": content_type, "User-Agent": self.user_agent}
        self.api.update_params_for_auth(headers, [], ["BearerToken"], path, method, data)
        try:
            resp = self.api.rest_client.pool_manager.request(
                method, url, body=data, headers=headers, retries=False, preload_content=True,
                timeout=urllib3.Timeout(total=REQUEST_TIMEOUT_S))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(0, "ConnectionError", str(exc)) from exc
        if resp.status >= 400:
            raise self._error(resp.status, resp.data, _retry_after(resp.headers))
        return json.loads(resp.data) if resp.data else None

    @staticmethod
    def _error(status: int, body: bytes, retry_after_s: float | None) -> KubeError:
        try:
            payload = json.loads(body)
            return KubeError(status, payload.get("reason", ""), payload.get("message", ""), retry_after_s)
        except (TypeError, ValueError, AttributeError):
            return KubeError(status, "", body[:500].decode(errors="replace"), retry_after_s)
