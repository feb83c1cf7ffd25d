"""Helpers of the API-fault tests: the sandbox's fault rules (`/sandbox/faults`), and a recorder that
watches one tuned object and its Deployments for everything that must hold under faults."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cluster_kit import Cluster


def _call(cluster: Cluster, method: str, body: Any = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    access = cluster.access()
    req = urllib.request.Request(cluster.url + "/sandbox/faults", data=data, method=method,
                                 headers={"Content-Type": "application/json", **access.headers})
    with urllib.request.urlopen(req, timeout=10, context=access.ssl_context()) as resp:
        return json.loads(resp.read())


def add_faults(cluster: Cluster, *rules: dict[str, Any]) -> None:
    _call(cluster, "POST", {"faults": list(rules)})


def clear_faults(cluster: Cluster) -> None:
    _call(cluster, "DELETE")


def faults(cluster: Cluster) -> list[dict[str, Any]]:
    return _call(cluster, "GET")["faults"]


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
    SpeculativeDeployment and the Deployments of its namespace, keeping what the invariants need."""

    cluster: Cluster
    ns: str
    name: str
    tuning_seqs: list[int] = field(default_factory=list)
    tuning_lost: int = 0  # status.tuning was there and then was not
    canary_uids: set[str] = field(default_factory=set)
    stable: list[tuple[str, int, str]] = field(default_factory=list)  # (uid, generation, N label) as it changed
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> "Recorder":
        paths = (f"/apis/specpilot.io/v1alpha1/namespaces/{self.ns}/speculativedeployments",
                 f"/apis/apps/v1/namespaces/{self.ns}/deployments")
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
        elif obj["kind"] == "Deployment" and event_type != "DELETED":
            if meta["name"] == f"{self.name}-canary":
                self.canary_uids.add(meta["uid"])
            elif meta["name"] == self.name:
                labels = obj["spec"]["template"]["metadata"]["labels"]
                seen = (meta["uid"], meta["generation"], labels.get("specpilot.io/num-speculative-tokens", ""))
                if not self.stable or self.stable[-1] != seen:
                    self.stable.append(seen)

    def rolled_back_seqs(self) -> list[tuple[int, int]]:
        """Pairs of consecutive status.tuning seqs where a later write carried an older seq."""
        return [(a, b) for a, b in zip(self.tuning_seqs, self.tuning_seqs[1:]) if b < a]
