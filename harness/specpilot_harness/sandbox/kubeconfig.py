"""A kubeconfig for the sandbox: plain HTTP on loopback, no credentials (the emulator has no auth)."""

from __future__ import annotations

from pathlib import Path

import yaml

CONTEXT = "specpilot-sandbox"


def kubeconfig(server_url: str, namespace: str = "default") -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": CONTEXT, "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": {"server": server_url}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}],
    }


def write_kubeconfig(path: Path, server_url: str, namespace: str = "default") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(server_url, namespace), sort_keys=False))
    path.chmod(0o600)
    return path
