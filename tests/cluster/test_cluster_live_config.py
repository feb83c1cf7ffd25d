"""Draft length set live through a ConfigMap: the node agent re-syncs a running pod's ConfigMap volume as a
kubelet does, and the simulated engine in it follows the new live.json without a restart."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

from cluster_kit import Cluster, wait_for

from specpilot_runtime import live

LIVE_PATH = f"{live.LIVE_DIR}/{live.LIVE_FILE}"
PORT = 8000
# The sandbox's re-sync period plus the engine's poll, with room for a busy machine; a real kubelet may take
# 60-90 s, which nothing may depend on being shorter.
RESYNC_WAIT_S = 45.0


def _live(k: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chat-live"},
            "data": {live.LIVE_FILE: live.LiveConfig((live.Arm(((1, 1024, k),)),)).to_json()}}


def _objects() -> list[dict[str, Any]]:
    engine = {"model": "org/model", "served_model_name": "chat", "port": PORT, "live_file": LIVE_PATH,
              "speculative": {"method": "mtp", "num_speculative_tokens": 5,
                              "num_speculative_tokens_per_batch_size": [[1, 1024, 5]]}}
    labels = {"app": "chat-live-test"}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        # The sandbox's simulated engines serve pods whose owner names a profile.
        "metadata": {"name": "chat", "annotations": {"specpilot.io/sim-profile": "qwen35-122b-mtp-math500"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "containers": [{"name": "engine", "image": "example/engine:1",
                                     "ports": [{"name": "http", "containerPort": PORT}],
                                     "volumeMounts": [{"name": "engine", "mountPath": "/etc/specpilot"},
                                                      {"name": "live", "mountPath": live.LIVE_DIR}]}],
                     "volumes": [{"name": "engine", "configMap": {"name": "chat-engine"}},
                                 {"name": "live", "configMap": {"name": "chat-live"}}]}}}}
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chat-engine"},
             "data": {"engine.json": json.dumps(engine)}}, _live(2), deployment]


def _metrics(ip: str) -> str:
    try:
        with urllib.request.urlopen(f"http://{ip}:{PORT}/metrics", timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


def _served_k(ip: str) -> int | None:
    found = re.search(rf'^{re.escape(live.LIVE_K)}{{band="1-1"}} (\d+)', _metrics(ip), re.M)
    return int(found.group(1)) if found else None


def _ready_pod(cluster: Cluster, ns: str) -> dict[str, Any] | None:
    pods = cluster.items("pods", "-n", ns, "-l", "app=chat-live-test")
    ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                    for c in (p.get("status") or {}).get("conditions") or [])]
    return ready[0] if len(pods) == 1 and ready else None


def test_a_running_engine_follows_its_live_configmap_without_a_restart(cluster: Cluster, ns: str) -> None:
    for obj in _objects():
        done = cluster.apply(obj, ns)
        assert done.returncode == 0, done.stderr
    pod = wait_for("the engine's pod Ready", lambda: _ready_pod(cluster, ns))
    ip = pod["status"]["podIP"]
    wait_for("the engine serving K=2", lambda: _served_k(ip) == 2)
    created = re.findall(r"^vllm:generation_tokens_created.*$", _metrics(ip), re.M)
    assert created

    done = cluster.apply(_live(4), ns)
    assert done.returncode == 0, done.stderr
    wait_for("the engine serving K=4 from the updated ConfigMap", lambda: _served_k(ip) == 4, timeout=RESYNC_WAIT_S)

    after = _ready_pod(cluster, ns)
    assert after is not None and after["metadata"]["uid"] == pod["metadata"]["uid"]  # the same pod
    assert [c["restartCount"] for c in after["status"]["containerStatuses"]] == [0]
    # The same engine process: its counters were created when it started, not again.
    assert re.findall(r"^vllm:generation_tokens_created.*$", _metrics(ip), re.M) == created
