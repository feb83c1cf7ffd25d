"""Helpers of the API-fault tests on the real control plane: the fault proxy's rules (`/sandbox/faults`) and
drills (`/sandbox/control/...`) of `specpilot sandbox --fault-proxy`, the operator as the chart's
ServiceAccount behind that proxy, its RBAC edited on purpose, and a recorder that watches one tuned object
and its Deployments for everything that must hold under faults."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml
from cluster_kit import REPO, Cluster
from specpilot_harness.sandbox.fault_proxy import proxy_kubeconfig_path
from specpilot_harness.sandbox.kubeconfig import Access, write_kubeconfig

HELM = REPO / ".tools" / "bin" / "helm"
CHART = REPO / "charts" / "specpilot"
OPERATOR_NAMESPACE = "kube-system"  # where cluster_kit's operators hold their Lease


def proxy_access(cluster: Cluster) -> Access:
    """The fault proxy's URL, the control plane's CA (which signed the proxy's certificate), the admin token."""
    return Access.read(proxy_kubeconfig_path(cluster.kubeconfig))


def _call(cluster: Cluster, method: str, path: str = "/sandbox/faults", body: Any = None,
          timeout: float = 10) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    access = proxy_access(cluster)
    req = urllib.request.Request(access.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **access.headers})
    with urllib.request.urlopen(req, timeout=timeout, context=access.ssl_context()) as resp:
        return json.loads(resp.read())


def add_faults(cluster: Cluster, *rules: dict[str, Any]) -> None:
    _call(cluster, "POST", body={"faults": list(rules)})


def clear_faults(cluster: Cluster) -> None:
    _call(cluster, "DELETE")


def faults(cluster: Cluster) -> list[dict[str, Any]]:
    return _call(cluster, "GET")["faults"]


def drill(cluster: Cluster, name: str) -> dict[str, Any]:
    """A server-wide drill on the real control plane (restart-apiserver, restart-etcd, compact-etcd,
    expire-watches); returns once it is ready again, with `seconds` taken and `ended` (time.monotonic())."""
    done = _call(cluster, "POST", f"/sandbox/control/{name}", timeout=180)
    return {**done, "ended": time.monotonic()}


def proxy_stats(cluster: Cluster) -> dict[str, Any]:
    """Requests forwarded and watch streams that carried a 410, by client; the drills run."""
    return _call(cluster, "GET", "/sandbox/control")


# ---- the operator as the chart's ServiceAccount -------------------------------------------------------


def chart_rbac() -> list[dict[str, Any]]:
    """The chart's ServiceAccount, ClusterRole(Binding) and leader-election Role(Binding), released into
    the namespace the test operators keep their Lease in."""
    done = subprocess.run([str(HELM), "template", "specpilot", str(CHART), "--namespace", OPERATOR_NAMESPACE,
                           "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml"],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"helm template failed (make tools installs helm): {done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def operator_kubeconfig(cluster: Cluster) -> tuple[Path, str]:
    """Applies the chart's RBAC and returns a kubeconfig for the fault proxy with its ServiceAccount's token
    (`kubectl create token`), as the operator authenticates in a cluster, and the ClusterRole's name."""
    objects = chart_rbac()
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    account = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    role = next(o for o in objects if o["kind"] == "ClusterRole")["metadata"]["name"]
    token = cluster.kubectl("create", "token", account, "-n", OPERATOR_NAMESPACE, "--duration", "2h").stdout.strip()
    proxy = proxy_access(cluster)
    path = write_kubeconfig(cluster.workdir / "operator.kubeconfig", Access(proxy.url, proxy.ca_pem, token))
    return path, role


def set_verbs(cluster: Cluster, role: str, group: str, resource: str,
              edit: Callable[[list[str]], list[str]]) -> list[str]:
    """Rewrites the verbs of the ClusterRole's rule for `resource` in API `group`; returns them as they were."""
    obj = cluster.get("clusterrole", role)
    assert obj is not None, role
    rule = next(r for r in obj["rules"] if group in r.get("apiGroups", []) and resource in r.get("resources", []))
    before = list(rule["verbs"])
    rule["verbs"] = edit(before)
    cluster.kubectl("replace", "-f", "-", stdin=json.dumps(obj))
    return before


def in_namespace(ns: str, **rule: Any) -> dict[str, Any]:
    """A rule for the operator's requests about objects in `ns` (its cluster-wide watches are not hit)."""
    return {"path": f"/namespaces/{ns}/", **rule}


def peak_rate(times: list[float], start: float, end: float) -> float:
    """The most requests in any one second of [start, end)."""
    buckets = Counter(int(t) for t in times if start <= t < end)
    return max(buckets.values(), default=0)


@dataclass
class Recorder:
    """Watches (as a client the faults do not hit; it reconnects across an API server restart) one
    SpeculativeDeployment and the Deployments and ConfigMaps of its namespace, keeping what the invariants
    need."""

    cluster: Cluster
    ns: str
    name: str
    tuning_seqs: list[int] = field(default_factory=list)
    tuning_times: list[float] = field(default_factory=list)  # time.monotonic() each seq was first seen
    tuning_lost: int = 0  # status.tuning was there and then was not
    canary_uids: set[str] = field(default_factory=set)
    canary_config_uids: set[str] = field(default_factory=set)  # the canary's engine ConfigMap, as rendered
    stable: list[tuple[str, int, str]] = field(default_factory=list)  # (uid, generation, N label) as it changed
    replica_failures: set[str] = field(default_factory=set)  # "<deployment>: <ReplicaFailure message>"
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> "Recorder":
        paths = (f"/apis/specpilot.io/v1alpha1/namespaces/{self.ns}/speculativedeployments",
                 f"/apis/apps/v1/namespaces/{self.ns}/deployments", f"/api/v1/namespaces/{self.ns}/configmaps")
        for path in paths:
            thread = threading.Thread(target=self._watch, args=(path,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self, path: str) -> None:
        access = self.cluster.access()
        tls = access.ssl_context()
        rv = "0"
        while not self._stop.is_set():
            try:
                url = f"{self.cluster.url}{path}?watch=true&resourceVersion={rv}&timeoutSeconds=5"
                with urllib.request.urlopen(urllib.request.Request(url, headers=access.headers), timeout=10,
                                            context=tls) as resp:
                    for line in resp:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            rv = "0"
                            break
                        rv = event["object"]["metadata"]["resourceVersion"]
                        self._observe(event["type"], event["object"])
            except urllib.error.HTTPError as exc:
                # 410 Gone: the resourceVersion was compacted away (a watch cache restarted past it is refused
                # outright, not with an ERROR event): start again from what is there now.
                rv = "0" if exc.code == 410 else rv
                time.sleep(0.2)
            except (OSError, ValueError):
                time.sleep(0.2)  # the API server restarts: resume from the last resourceVersion

    def _observe(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if obj["kind"] == "SpeculativeDeployment" and meta["name"] == self.name:
            tuning = (obj.get("status") or {}).get("tuning")
            if tuning is None:
                self.tuning_lost += bool(self.tuning_seqs)
            elif not self.tuning_seqs or tuning["seq"] != self.tuning_seqs[-1]:
                self.tuning_seqs.append(tuning["seq"])
                self.tuning_times.append(time.monotonic())
        elif obj["kind"] == "ConfigMap" and event_type != "DELETED":
            if meta["name"] == f"{self.name}-canary-engine":
                self.canary_config_uids.add(meta["uid"])
        elif obj["kind"] == "Deployment" and event_type != "DELETED":
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
                    self.replica_failures.add(f"{meta['name']}: {cond.get('message', '')}")
            if meta["name"] == f"{self.name}-canary":
                self.canary_uids.add(meta["uid"])
            elif meta["name"] == self.name:
                labels = obj["spec"]["template"]["metadata"]["labels"]
                seen = (meta["uid"], meta["generation"], labels.get("specpilot.io/num-speculative-tokens", ""))
                if not self.stable or self.stable[-1] != seen:
                    self.stable.append(seen)

    def first_write_after(self, moment: float) -> float | None:
        """Seconds from `moment` (time.monotonic()) to the first new status.tuning seen after it."""
        return next((round(t - moment, 1) for t in self.tuning_times if t > moment), None)

    def rolled_back_seqs(self) -> list[tuple[int, int]]:
        """Pairs of consecutive status.tuning seqs where a later write carried an older seq."""
        return [(a, b) for a, b in zip(self.tuning_seqs, self.tuning_seqs[1:]) if b < a]
