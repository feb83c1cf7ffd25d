"""Kubeconfig files for the control plane, one identity each, every secret embedded.

Embedded data (not paths) so a kubeconfig can be copied, carried to another machine or handed to a
subprocess with a different working directory and still work: kubectl, the Python client and Kopf all read
`*-data` fields. Components authenticate by client certificate; the operator, like any in-cluster
workload, by a ServiceAccount's bearer token.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from specpilot_harness.controlplane.pki import CertKey

CLUSTER = "specpilot-control-plane"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _write(path: Path, server: str, ca_cert: Path, user: dict[str, str], namespace: str) -> Path:
    """Owner-only from the first byte: the file holds a private key or a token."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": CLUSTER,
        "preferences": {},
        "clusters": [{"name": CLUSTER, "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)}}],
        "users": [{"name": CLUSTER, "user": user}],
        "contexts": [{"name": CLUSTER, "context": {"cluster": CLUSTER, "user": CLUSTER, "namespace": namespace}}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def write_cert_kubeconfig(
    path: Path, server: str, ca_cert: Path, client: CertKey, namespace: str = "default"
) -> Path:
    """A kubeconfig that authenticates with `client`'s certificate (user = its CN, groups = its Os)."""
    user = {"client-certificate-data": _b64(client.cert), "client-key-data": _b64(client.key)}
    return _write(path, server, ca_cert, user, namespace)


def write_token_kubeconfig(path: Path, server: str, ca_cert: Path, token: str, namespace: str = "default") -> Path:
    """A kubeconfig that authenticates with a bearer token (a ServiceAccount's, from the TokenRequest API)."""
    return _write(path, server, ca_cert, {"token": token}, namespace)
