"""The control plane's certificates, made with the `openssl` CLI.

A real kube-apiserver authenticates components by client certificate (the subject's CN is the user, each O a
group), serves TLS itself and signs ServiceAccount tokens; this module makes what that takes: one CA, the
serving certificate, the ServiceAccount key pair and a client certificate per identity. `openssl` (present
wherever the harness runs) rather than the `cryptography` package keeps the files exactly as kubeadm's
tooling would make them, and every call is an argv list, never a shell. Keys are EC P-256: generating
one takes milliseconds, so a fresh PKI per test run costs nothing.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Names the apiserver is reached by: loopback for the harness, the in-cluster names for pods' clients.
SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
CA_DAYS = 3650
LEAF_DAYS = 365
_KEY_ARGS = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


@dataclass(frozen=True)
class CertKey:
    """A PEM certificate and its unencrypted PEM private key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Everything the control plane's processes read: paths under one directory."""

    dir: Path
    ca: CertKey
    apiserver: CertKey
    # The private key signs ServiceAccount tokens (apiserver, controller-manager); the public one verifies them.
    service_account_key: Path
    service_account_pub: Path
    admin: CertKey
    controller_manager: CertKey
    scheduler: CertKey
    # Their own HTTPS ports (/healthz), certified by the same CA so that probes verify them too.
    controller_manager_serving: CertKey
    scheduler_serving: CertKey

    def client(self, name: str, common_name: str, organizations: tuple[str, ...] = ()) -> CertKey:
        """A client certificate for one more identity (a node agent: CN=system:node:<n>, O=system:nodes)."""
        return client_cert(self.ca, self.dir / name, common_name, organizations)


def _openssl(*args: str) -> None:
    """Runs openssl; its stderr becomes the exception's message, as nothing else explains a failure."""
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed ({done.returncode}): {done.stderr.strip()}")


def _subject(common_name: str, organizations: tuple[str, ...]) -> str:
    """An openssl -subj string; '/', '+' and '\\' escaped, as a name like system:node:a/b would split."""

    def esc(value: str) -> str:
        return value.replace("\\", "\\\\").replace("/", "\\/").replace("+", "\\+")

    return "".join(f"/O={esc(o)}" for o in organizations) + f"/CN={esc(common_name)}"


def _self_signed_ca(stem: Path, common_name: str) -> CertKey:
    pair = CertKey(stem.with_suffix(".crt"), stem.with_suffix(".key"))
    _openssl(
        "req", "-x509", "-new", *_KEY_ARGS, "-keyout", str(pair.key), "-out", str(pair.cert),
        "-days", str(CA_DAYS), "-subj", _subject(common_name, ()), "-config", "/dev/null",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )
    return pair


def _leaf(ca: CertKey, stem: Path, subject: str, usage: str, extra: tuple[str, ...] = ()) -> CertKey:
    """A certificate signed by `ca` in one call (openssl 3's `req -x509 -CA`); `-config /dev/null` so no
    distribution default (basicConstraints CA:TRUE in v3_ca) leaks into a leaf."""
    pair = CertKey(stem.with_suffix(".crt"), stem.with_suffix(".key"))
    _openssl(
        "req", "-x509", "-new", *_KEY_ARGS, "-keyout", str(pair.key), "-out", str(pair.cert),
        "-days", str(LEAF_DAYS), "-subj", subject, "-config", "/dev/null",
        "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-addext", "basicConstraints=critical,CA:FALSE",
        "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
        "-addext", f"extendedKeyUsage={usage}", *extra,
    )
    return pair


def client_cert(ca: CertKey, stem: Path, common_name: str, organizations: tuple[str, ...] = ()) -> CertKey:
    """A client certificate: the apiserver's user is `common_name`, its groups `organizations`."""
    return _leaf(ca, stem, _subject(common_name, organizations), "clientAuth")


def serving_cert(
    ca: CertKey, stem: Path, common_name: str, ips: tuple[str, ...], dns_names: tuple[str, ...]
) -> CertKey:
    """A TLS server certificate for the given addresses and names."""
    sans = [*(f"IP:{ip}" for ip in ips), *(f"DNS:{name}" for name in dns_names)]
    extra = ("-addext", "subjectAltName=" + ",".join(sans))
    return _leaf(ca, stem, _subject(common_name, ()), "serverAuth", extra)


def apiserver_serving_cert(ca: CertKey, stem: Path, service_cidr: str) -> CertKey:
    """The apiserver's certificate: loopback, the `kubernetes` Service's names and its ClusterIP (the first
    address of the service CIDR, which the apiserver allocates to that Service)."""
    cluster_ip = str(next(ipaddress.ip_network(service_cidr).hosts()))
    return serving_cert(ca, stem, "kube-apiserver", ("127.0.0.1", cluster_ip), SERVING_DNS_NAMES)


def _loopback_serving(ca: CertKey, stem: Path, common_name: str) -> CertKey:
    return serving_cert(ca, stem, common_name, ("127.0.0.1",), ("localhost",))


def create_pki(directory: Path, service_cidr: str) -> Pki:
    """A fresh CA and every certificate and key the control plane needs, under `directory` (owner-only)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = _self_signed_ca(directory / "ca", "specpilot-control-plane-ca")
    sa_key, sa_pub = directory / "service-account.key", directory / "service-account.pub"
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(sa_key))
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))
    return Pki(
        dir=directory,
        ca=ca,
        apiserver=apiserver_serving_cert(ca, directory / "apiserver", service_cidr),
        service_account_key=sa_key,
        service_account_pub=sa_pub,
        admin=client_cert(ca, directory / "admin", "kubernetes-admin", ("system:masters",)),
        controller_manager=client_cert(ca, directory / "controller-manager", "system:kube-controller-manager"),
        scheduler=client_cert(ca, directory / "scheduler", "system:kube-scheduler"),
        controller_manager_serving=_loopback_serving(
            ca, directory / "controller-manager-serving", "kube-controller-manager"
        ),
        scheduler_serving=_loopback_serving(ca, directory / "scheduler-serving", "kube-scheduler"),
    )
