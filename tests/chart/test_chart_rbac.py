"""The chart's RBAC against what the operator really calls.

The operator runs with the chart's own `specpilot run` arguments against the sandbox API server, which
records every request it makes while it reconciles a SpeculativeDeployment through its life (create,
a deleted child, a spec change, deletion) and hands its Lease over at shutdown. Each request becomes the
(verb, group, resource, namespace) Kubernetes would authorize; each must be allowed by the rules the
chart binds to the operator's ServiceAccount, and each rule the chart grants must have been needed.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx
import pytest
import yaml
from helm_tools import NAMESPACE, RELEASE, ROOT, by_kind, render

from specpilot.render.names import DEPLOYMENT_LABEL
from specpilot_harness.sandbox.cluster import Sandbox
from specpilot_harness.ports import free_port

TEST_AGENT = "specpilot-rbac-test"
WATCHED = "team-a"
EXAMPLE = ROOT / "deploy" / "examples" / "mtp.yaml"
SD_API = "/apis/specpilot.io/v1alpha1"
WAIT_S = 60.0
# Grants the scenario cannot reach, each with why the operator needs it.
NOT_EXERCISED = {
    # A child stops being rendered only when a canary ends (the tuning loop); the reconciler then deletes it.
    ("", "configmaps", "delete"), ("", "services", "delete"), ("apps", "deployments", "delete"),
    # An opted-in Secret's labels, read only when a spec names engine.hfTokenSecretRef
    # (tests/unit/test_author_policy.py).
    ("", "secrets", "get"),
}


@dataclass(frozen=True)
class Call:
    verb: str
    group: str
    resource: str  # with "/subresource" when there is one
    namespace: str | None


def to_call(method: str, path: str, query: dict[str, str]) -> Call | None:
    """The authorization attributes of one API request; None for discovery, /version and the like."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") in ("1", "true") else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return Call(verb, group, f"{resource}/{sub}" if sub else resource, namespace)


def _grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


@dataclass
class Authorizer:
    """RBAC as the API server evaluates it for the chart's ServiceAccount: cluster roles everywhere,
    roles in their own namespace."""

    cluster: set[tuple[str, str, str]]
    by_namespace: dict[str, set[tuple[str, str, str]]]

    @classmethod
    def from_chart(cls, objects: list[dict[str, Any]]) -> Authorizer:
        account = {"kind": "ServiceAccount", "name": f"{RELEASE}", "namespace": NAMESPACE}
        roles = {(r["kind"], r["metadata"].get("namespace"), r["metadata"]["name"]): r["rules"]
                 for r in by_kind(objects, "ClusterRole") + by_kind(objects, "Role")}
        cluster: set[tuple[str, str, str]] = set()
        by_namespace: dict[str, set[tuple[str, str, str]]] = {}
        for binding in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding"):
            if account not in binding["subjects"]:
                continue
            ns = binding["metadata"].get("namespace")
            ref = binding["roleRef"]
            rules = roles[(ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"])]
            if ns is None:
                cluster |= _grants(rules)
            else:
                by_namespace.setdefault(ns, set()).update(_grants(rules))
        return cls(cluster, by_namespace)

    def allows(self, call: Call) -> bool:
        key = (call.group, call.resource, call.verb)
        return key in self.cluster or (call.namespace is not None and key in self.by_namespace.get(call.namespace, set()))

    def granted(self) -> set[tuple[str, str, str]]:
        return self.cluster.union(*self.by_namespace.values())


class RecordingSandbox:
    """The sandbox API server, noting every request that is not the test's own."""

    def __init__(self) -> None:
        self.sandbox = Sandbox()
        self.calls: list[Call] = []
        inner = self.sandbox.api._dispatch  # the one entry point of every request (sandbox/server.py)

        async def dispatch(request: Any) -> Any:
            if request.headers.get("User-Agent") != TEST_AGENT:
                call = to_call(request.method, request.path, dict(request.query))
                if call is not None:
                    self.calls.append(call)
            return await inner(request)

        self.sandbox.api._dispatch = dispatch  # type: ignore[method-assign]


async def _eventually(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    delay = 0.05
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


async def _start_operator(args: list[str], kubeconfig: Path, log: Path) -> asyncio.subprocess.Process:
    """`specpilot run` with the chart's arguments, pointed at the sandbox instead of in-cluster config."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specpilot.cli", *args, "--kubeconfig", str(kubeconfig),
        "--metrics-port", str(free_port()), "--metrics-host", "127.0.0.1", "--identity", "rbac-test",
        stdout=log.open("wb"), stderr=asyncio.subprocess.STDOUT, cwd=ROOT)


async def _life_of_a_speculative_deployment(api: httpx.AsyncClient, lease_path: str) -> None:
    """What the operator is asked to handle; returns once it handled each step."""
    await _eventually("the operator to take its Lease", lambda: _lease_held(api, lease_path))
    sd = yaml.safe_load(EXAMPLE.read_text())
    sd["spec"]["engine"] = {"modelCache": {"claimName": "models"}}  # tuned: its access modes are read
    name = sd["metadata"]["name"]
    sd_path = f"{SD_API}/namespaces/{WATCHED}/speculativedeployments/{name}"
    (await api.post(f"{SD_API}/namespaces/{WATCHED}/speculativedeployments", json=sd)).raise_for_status()

    async def reconciled(generation: int) -> bool:
        status = (await api.get(sd_path)).json().get("status") or {}
        return status.get("observedGeneration") == generation

    async def config_maps() -> list[dict[str, Any]]:
        got = await api.get(f"/api/v1/namespaces/{WATCHED}/configmaps", params={"labelSelector": f"{DEPLOYMENT_LABEL}={name}"})
        return got.json()["items"]

    await _eventually("the first reconcile", lambda: reconciled(1))
    (child,) = await config_maps()
    (await api.delete(f"/api/v1/namespaces/{WATCHED}/configmaps/{child['metadata']['name']}")).raise_for_status()
    await _eventually("the deleted ConfigMap to be restored", lambda: _nonempty(config_maps()))
    patch = {"spec": {"speculative": {"numSpeculativeTokens": sd["spec"]["speculative"]["numSpeculativeTokens"] + 1}}}
    (await api.patch(sd_path, json=patch, headers={"Content-Type": "application/merge-patch+json"})).raise_for_status()
    await _eventually("the spec change to be reconciled", lambda: reconciled(2))
    (await api.delete(sd_path)).raise_for_status()
    await _eventually("the SpeculativeDeployment to be gone", lambda: _gone(api, sd_path))


async def _nonempty(items: Awaitable[list[Any]]) -> bool:
    return bool(await items)


async def _gone(api: httpx.AsyncClient, path: str) -> bool:
    return (await api.get(path)).status_code == 404


async def _lease_held(api: httpx.AsyncClient, lease_path: str) -> bool:
    reply = await api.get(lease_path)
    return reply.status_code == 200 and bool((reply.json().get("spec") or {}).get("holderIdentity"))


async def _record(chart_args: tuple[str, ...], tmp_path: Path) -> tuple[list[Call], list[dict[str, Any]]]:
    objects = render(*chart_args)
    (deployment,) = by_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    lease_name = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--lease-name="))
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{lease_name}"
    recording = RecordingSandbox()
    url = await recording.sandbox.start()
    kubeconfig = recording.sandbox.write_kubeconfig(tmp_path / "kubeconfig")
    log = tmp_path / "operator.log"
    operator = None
    try:
        access = recording.sandbox.access
        async with httpx.AsyncClient(base_url=url, headers={"User-Agent": TEST_AGENT, **access.headers},
                                     verify=access.ssl_context(), timeout=10) as api:
            for ns in (NAMESPACE, WATCHED):
                body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                (await api.post("/api/v1/namespaces", json=body)).raise_for_status()
            operator = await _start_operator(container["args"], kubeconfig, log)
            try:
                await _life_of_a_speculative_deployment(api, lease_path)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; operator log:\n{log.read_text()[-3000:]}") from None
            # A clean stop hands the Lease over: that write is part of what the operator does.
            operator.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(operator.wait(), 30) == 0, log.read_text()[-3000:]
    finally:
        if operator is not None and operator.returncode is None:
            operator.kill()
            await operator.wait()
        await recording.sandbox.stop()
    return recording.calls, objects


MODES = {"cluster-wide": (), "namespaced": ("--set", f"watch.namespaces={{{WATCHED}}}")}


@pytest.mark.parametrize("chart_args", MODES.values(), ids=MODES.keys())
async def test_chart_rbac_allows_every_call_and_grants_nothing_unused(chart_args: tuple[str, ...],
                                                                       tmp_path: Path) -> None:
    calls, objects = await _record(chart_args, tmp_path)
    authorizer = Authorizer.from_chart(objects)
    denied = sorted({c for c in calls if not authorizer.allows(c)}, key=str)
    assert denied == [], "the chart's RBAC would forbid these calls of the operator"
    used = {(c.group, c.resource, c.verb) for c in calls}
    unused = authorizer.granted() - used - NOT_EXERCISED
    assert unused == set(), "granted but never needed: drop them from charts/specpilot/templates/_rbac.tpl"
