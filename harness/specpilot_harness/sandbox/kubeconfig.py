"""The sandbox's kubeconfig: HTTPS on loopback, its CA and its bearer token. `Access` reads one back for
the harness's own raw HTTP clients (benchmarks, tests), which do what kubectl does with it."""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from pathlib import Path

import yaml

CONTEXT = "specpilot-sandbox"


@dataclass(frozen=True)
class Access:
    """Where the sandbox listens and what a client needs to be let in."""

    url: str
    ca_pem: bytes
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    @classmethod
    def read(cls, path: Path) -> "Access":
        doc = yaml.safe_load(path.read_text())
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == CONTEXT)
        user = next(u["user"] for u in doc["users"] if u["name"] == CONTEXT)
        return cls(cluster["server"], base64.b64decode(cluster["certificate-authority-data"]), user["token"])


def kubeconfig(access: Access, namespace: str = "default") -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": CONTEXT, "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": {
            "server": access.url, "certificate-authority-data": base64.b64encode(access.ca_pem).decode()}}],
        "users": [{"name": CONTEXT, "user": {"token": access.token}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}],
    }


def write_kubeconfig(path: Path, access: Access, namespace: str = "default") -> Path:
    """Owner-only from the first byte: it holds the token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(yaml.safe_dump(kubeconfig(access, namespace), sort_keys=False))
    return path
