"""etcd for one control plane: a single member, plain HTTP on loopback, and its v3 JSON gateway.

Plain HTTP because only the apiserver (and the harness) talk to it, both on 127.0.0.1: certificates would
buy nothing here. The gateway (`/v3/...`, on the client port, on by default) lets the harness compact etcd
without etcdctl, which the control-plane build does not produce.
"""

from __future__ import annotations

import base64
import http.client
import json
import urllib.request
from pathlib import Path
from typing import Any, cast

MEMBER = "default"
# kube-apiserver's record of the last compaction (k8s.io/apiserver/pkg/storage/etcd3/compact.go).
COMPACT_REV_KEY = b"compact_rev_key"


def etcd_argv(binary: Path, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    """--unsafe-no-fsync: a test cluster's data is disposable, and fsync per write dominates the apiserver's
    write latency on a shared disk. Restarting with the same argv reopens the same data."""
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    return [
        str(binary),
        f"--name={MEMBER}",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={MEMBER}={peer}",
        "--unsafe-no-fsync",
    ]


def _b64(data: bytes) -> str:
    """The gateway's JSON carries keys and values base64-encoded (protobuf `bytes`)."""
    return base64.b64encode(data).decode()


def _post(client_url: str, path: str, body: dict[str, object]) -> dict[str, Any]:
    request = urllib.request.Request(
        client_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return cast(dict[str, Any], json.load(response))


def healthy(client_url: str) -> bool:
    """etcd's own /health: true once the member has a leader and serves reads."""
    try:
        with urllib.request.urlopen(client_url + "/health", timeout=2) as response:
            return bool(json.load(response).get("health") == "true")
    except (OSError, http.client.HTTPException, ValueError):
        return False


def revision(client_url: str) -> int:
    """The store's current revision, from the header of any range request (int64s are JSON strings)."""
    return int(_post(client_url, "/v3/kv/range", {"key": _b64(COMPACT_REV_KEY)})["header"]["revision"])


def compact(client_url: str) -> int:
    """Compacts everything before the current revision (returned), waiting until it is physically done, and
    records it under kube-apiserver's `compact_rev_key` first, as an apiserver's own periodic compaction
    does: apiservers watch that key and drop their watch caches' list snapshots from before it, so lists
    at an older resourceVersion get 410 Expired from the cache (within its 15 s poll) as well as from etcd.
    Watches are served from the watch cache's event window, which etcd compaction does not shorten."""
    current = revision(client_url)
    _post(client_url, "/v3/kv/put", {"key": _b64(COMPACT_REV_KEY), "value": _b64(str(current).encode())})
    _post(client_url, "/v3/kv/compaction", {"revision": str(current), "physical": True})
    return current
