"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

Built from source by scripts/build-control-plane.sh and run as plain processes, with no container runtime
and no root: everything binds 127.0.0.1 on free ports and lives under one work directory (PKI, etcd data,
kubeconfigs, one log per component). There are no nodes: a node agent registers them separately, with a
client certificate from `client_kubeconfig` (CN=system:node:<name>, O=system:nodes).
"""

from __future__ import annotations

import secrets
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from specpilot_harness.controlplane import audit, etcd
from specpilot_harness.controlplane.kubeconfig import write_cert_kubeconfig, write_token_kubeconfig
from specpilot_harness.controlplane.pki import Pki, create_pki
from specpilot_harness.controlplane.process import Component, https_ok
from specpilot_harness.ports import free_port

REPO = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO / "scripts" / "build-control-plane.sh"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# What the apiserver publishes as the `kubernetes` Service's endpoint. Endpoints validation refuses loopback
# ("may not be in the loopback range"), and left unset the apiserver picks the host's default-route address,
# which differs per machine and is missing where there is no route. So a fixed TEST-NET-2 address (RFC
# 5737): nothing listens there, as nothing could reach a loopback-bound apiserver through the Service anyway.
ADVERTISE_ADDRESS = "198.51.100.1"
START_TIMEOUT_S = 60.0
ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER = "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"


def binaries() -> Path:
    """The directory holding the four binaries: built once by scripts/build-control-plane.sh (which waits
    for a build already running), at once when cached. The script prints that directory last."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    @classmethod
    def pick(cls, apiserver: int = 0) -> Ports:
        """Free ports, the apiserver's `apiserver` unless 0."""
        return cls(free_port(), free_port(), apiserver or free_port(), free_port(), free_port())


def _apiserver_argv(binary: Path, pki: Pki, ports: Ports, tokens: Path, extra: list[str] | None = None) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--advertise-address={ADVERTISE_ADDRESS}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        # The admin's bearer token (system:masters), for raw HTTP clients of the harness and its benchmarks,
        # which authenticate as they did against the emulator: a URL, a CA and a token.
        f"--token-auth-file={tokens}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        # On SIGTERM, end open watches after 2 s: without it the HTTP server waits for the controller-manager's
        # and scheduler's watches to drain, which they never do, and a restart took 15 s (the SIGKILL timeout).
        "--shutdown-watch-termination-grace-period=2s",
        "--profiling=false",
        *(extra or []),
    ]


def _controller_manager_argv(binary: Path, pki: Pki, ports: Ports, kubeconfig: Path) -> list[str]:
    """Its own credentials only to get going; each controller then acts as its own ServiceAccount in
    kube-system (--use-service-account-credentials), as in kubeadm clusters, so RBAC is exercised per
    controller. The CA signs CSRs (a node agent's serving certificates)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca.cert}",
        f"--cluster-signing-cert-file={pki.ca.cert}",
        f"--cluster-signing-key-file={pki.ca.key}",
        "--leader-elect=false",
        # Every default controller but the v1 Endpoints one: Endpoints are deprecated for EndpointSlices (1.33),
        # nothing here reads them, and at a thousand new Services their writes were one in twelve of
        # kube-apiserver's.
        "--controllers=*,-endpoints-controller",
        # Client-side rate limits of a real cluster's defaults (20 and 50 QPS) would make the scale benchmark
        # measure them: a thousand Deployments need a thousand ReplicaSets, pods and bindings at once.
        "--kube-api-qps=300",
        "--kube-api-burst=600",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--tls-cert-file={pki.controller_manager_serving.cert}",
        f"--tls-private-key-file={pki.controller_manager_serving.key}",
        "--profiling=false",
    ]


def _scheduler_argv(binary: Path, pki: Pki, ports: Ports, kubeconfig: Path) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        # Client-side rate limits of a real cluster's defaults (20 and 50 QPS) would make the scale benchmark
        # measure them: a thousand Deployments need a thousand ReplicaSets, pods and bindings at once.
        "--kube-api-qps=300",
        "--kube-api-burst=600",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        f"--tls-cert-file={pki.scheduler_serving.cert}",
        f"--tls-private-key-file={pki.scheduler_serving.key}",
        "--profiling=false",
    ]


def _kubeconfig_path(workdir: Path, name: str) -> Path:
    return workdir / "kubeconfigs" / f"{name}.kubeconfig"


def _audit_log_path(workdir: Path) -> Path:
    return workdir / "logs" / "audit.log"


class ControlPlane:
    """A running control plane; `ControlPlane.start(workdir)` makes one, `stop()` (or leaving a `with`
    block) ends every process it started."""

    def __init__(self, workdir: Path, pki: Pki, ports: Ports, components: list[Component], admin_token: str,
                 audited: bool = False) -> None:
        self.workdir = workdir
        self.audited = audited
        self.admin_token = admin_token
        self.pki = pki
        self.ports = ports
        self._components = {c.name: c for c in components}

    @classmethod
    def start(cls, workdir: Path, bin_dir: Path | None = None, timeout_s: float = START_TIMEOUT_S,
              apiserver_port: int = 0, audit_log: bool = False, audit_users: tuple[str, ...] = ()) -> ControlPlane:
        """Fresh PKI and data under `workdir`; returns once the apiserver's /readyz and the controller-manager's
        and scheduler's /healthz answer 200. Each component gets `timeout_s` to get there. `audit_log`: the
        apiserver logs every request (Metadata level; only `audit_users`' when given) to `audit_log_path`, read
        back by `audit_records`."""
        bins = bin_dir if bin_dir is not None else binaries()
        pki = create_pki(workdir / "pki", SERVICE_CIDR)
        ports = Ports.pick(apiserver_port)
        admin_token = secrets.token_hex(24)
        tokens = workdir / "pki" / "tokens.csv"
        tokens.touch(mode=0o600)
        tokens.write_text(f'{admin_token},admin,admin,"system:masters"\n')
        url = f"https://127.0.0.1:{ports.apiserver}"
        write_cert_kubeconfig(_kubeconfig_path(workdir, "admin"), url, pki.ca.cert, pki.admin)
        cm_kubeconfig = write_cert_kubeconfig(
            _kubeconfig_path(workdir, "controller-manager"), url, pki.ca.cert, pki.controller_manager
        )
        scheduler_kubeconfig = write_cert_kubeconfig(
            _kubeconfig_path(workdir, "scheduler"), url, pki.ca.cert, pki.scheduler
        )
        as_admin = ssl.create_default_context(cafile=pki.ca.cert)
        as_admin.load_cert_chain(pki.admin.cert, pki.admin.key)
        anonymous = ssl.create_default_context(cafile=pki.ca.cert)
        etcd_url = f"http://127.0.0.1:{ports.etcd_client}"
        logs = workdir / "logs"
        audit_policy = workdir / "audit-policy.yaml"
        audit_flags = (audit.apiserver_flags(audit.write_policy(audit_policy, audit_users), _audit_log_path(workdir))
                       if audit_log else [])
        components = [
            Component(
                ETCD,
                etcd.etcd_argv(bins / ETCD, workdir / "etcd", ports.etcd_client, ports.etcd_peer),
                logs / "etcd.log",
                lambda: etcd.healthy(etcd_url),
            ),
            Component(
                APISERVER,
                _apiserver_argv(bins / APISERVER, pki, ports, tokens, audit_flags),
                logs / "kube-apiserver.log",
                lambda: https_ok(f"{url}/readyz", as_admin),
            ),
            Component(
                CONTROLLER_MANAGER,
                _controller_manager_argv(bins / CONTROLLER_MANAGER, pki, ports, cm_kubeconfig),
                logs / "kube-controller-manager.log",
                lambda: https_ok(f"https://127.0.0.1:{ports.controller_manager}/healthz", anonymous),
            ),
            Component(
                SCHEDULER,
                _scheduler_argv(bins / SCHEDULER, pki, ports, scheduler_kubeconfig),
                logs / "kube-scheduler.log",
                lambda: https_ok(f"https://127.0.0.1:{ports.scheduler}/healthz", anonymous),
            ),
        ]
        plane = cls(workdir, pki, ports, components, admin_token, audited=audit_log)
        try:
            for component in components:
                component.start(timeout_s)
        except BaseException:
            plane.stop()
            raise
        return plane

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.etcd_client}"

    @property
    def ca_path(self) -> Path:
        return self.pki.ca.cert

    @property
    def admin_kubeconfig(self) -> Path:
        """system:masters: every right, past RBAC."""
        return _kubeconfig_path(self.workdir, "admin")

    def client_kubeconfig(self, name: str, common_name: str, organizations: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for one more identity (user `common_name`, groups `organizations`), by certificate."""
        client = self.pki.client(name, common_name, organizations)
        return write_cert_kubeconfig(_kubeconfig_path(self.workdir, name), self.url, self.ca_path, client)

    def token_kubeconfig(self, name: str, token: str, namespace: str = "default") -> Path:
        """A kubeconfig for a bearer token: a ServiceAccount's, as the operator authenticates in a cluster."""
        return write_token_kubeconfig(_kubeconfig_path(self.workdir, name), self.url, self.ca_path, token, namespace)

    @property
    def audit_log_path(self) -> Path:
        """The apiserver's audit log (JSON lines), written when started with `audit_log=True`."""
        return _audit_log_path(self.workdir)

    def audit_records(self, user: str | None = None) -> list[audit.AuditRecord]:
        """Every request the apiserver has answered so far, one record each (only `user`'s when given)."""
        if not self.audited:
            raise RuntimeError("this control plane was started without audit_log=True")
        return audit.read(self.audit_log_path, user)

    def pids(self) -> dict[str, int]:
        """The running components' process ids, by component name."""
        return {name: c.pid for name, c in self._components.items() if c.pid is not None and c.running()}

    def restart_apiserver(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """SIGTERM the apiserver and start it again on the same port and etcd: clients see their connections
        and watches drop, and must resume. Returns once /readyz answers 200."""
        apiserver = self._components[APISERVER]
        apiserver.stop()
        apiserver.start(timeout_s)

    def restart_etcd(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Stops etcd and starts it on the same port and data; returns once the apiserver is ready again.
        etcd takes ~7 s to stop while the apiserver holds streams open (it waits out its request timeout)."""
        member = self._components[ETCD]
        member.stop()
        member.start(timeout_s)
        self._components[APISERVER].wait_healthy(timeout_s)

    def compact_etcd(self) -> int:
        """Compacts etcd to its current revision (returned), as the apiserver's own 5-minute compaction does:
        lists at an older resourceVersion get 410 Expired (from the watch cache within ~15 s). Watches resume
        from the watch cache's window, which compaction does not shorten: to expire them too, restart the
        apiserver after compacting (its new cache starts at the current revision)."""
        return etcd.compact(self.etcd_url)

    def stop(self) -> None:
        """Ends every component, last started first (etcd last, so the apiserver shuts down cleanly)."""
        for component in reversed(self._components.values()):
            component.stop()

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
