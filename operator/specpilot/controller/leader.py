"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Why a Lease and not Kopf peering: Kopf peering pauses every operator when two of equal priority see
each other, so with identical replicas nobody acts; priorities would have to differ per replica, which
a Deployment cannot express. A Lease gives exactly one holder, hands over when the holder stops
renewing, and is what `kubectl get lease` and every Kubernetes tool understand."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import urllib3

from specpilot.controller.kube import Kube, KubeError, collection_path

log = logging.getLogger(__name__)


def _micro(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class LeaderLost(Exception):
    """This replica stopped holding the Lease; it must stop acting at once."""


class LeaseElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str,
                 lease_duration_s: int = 15, renew_every_s: float = 5.0) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.lease_duration_s, self.renew_every_s = lease_duration_s, renew_every_s

    @property
    def path(self) -> str:
        return collection_path("coordination.k8s.io/v1", "leases", self.namespace) + f"/{self.name}"

    def try_acquire(self) -> bool:
        """One attempt to take or renew the Lease; True while this replica holds it."""
        now = datetime.now(timezone.utc)
        lease = self.kube.get(self.path)
        spec: dict[str, Any] = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration_s,
                                "renewTime": _micro(now)}
        try:
            if lease is None:
                spec.update(acquireTime=_micro(now), leaseTransitions=0)
                self.kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                  "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec})
                return True
            cur = lease.get("spec") or {}
            renewed = _parse(cur.get("renewTime")) or datetime.min.replace(tzinfo=timezone.utc)
            expired = renewed + timedelta(seconds=cur.get("leaseDurationSeconds", self.lease_duration_s)) < now
            holder = cur.get("holderIdentity")
            if holder and holder != self.identity and not expired:
                return False
            if holder == self.identity:
                spec.update(acquireTime=cur.get("acquireTime"), leaseTransitions=cur.get("leaseTransitions", 0))
            else:
                spec.update(acquireTime=_micro(now), leaseTransitions=cur.get("leaseTransitions", 0) + 1)
            # The resourceVersion makes the write conditional: of two standbys racing, one gets a 409.
            self.kube.replace({**lease, "spec": spec})
            return True
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise

    def release(self) -> None:
        """Give the Lease up at shutdown so a standby takes over without waiting for it to expire."""
        lease = self.kube.get(self.path)
        if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
            spec = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1}
            try:
                self.kube.replace({**lease, "spec": spec})
            except KubeError as exc:
                log.warning("could not release the lease: %s", exc)

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        announced = False
        while not await asyncio.to_thread(self._attempt):
            if not announced:
                log.info("standing by: lease %s/%s is held by another replica", self.namespace, self.name)
                announced = True
            await asyncio.sleep(self.renew_every_s / 2)
        log.info("acquired lease %s/%s as %s", self.namespace, self.name, self.identity)

    async def hold(self) -> None:
        """Renew until a renewal fails for longer than the lease lasts; then raise LeaderLost."""
        last_ok = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(self.renew_every_s)
            if await asyncio.to_thread(self._attempt):
                last_ok = asyncio.get_running_loop().time()
            elif asyncio.get_running_loop().time() - last_ok > self.lease_duration_s or \
                    await asyncio.to_thread(self._held_by_other):
                raise LeaderLost(f"lease {self.namespace}/{self.name} lost")

    def _attempt(self) -> bool:
        try:
            return self.try_acquire()
        except (KubeError, OSError, urllib3.exceptions.HTTPError) as exc:  # the API server is unreachable: count as a failed renewal
            log.warning("lease renewal failed: %s", exc)
            return False

    def _held_by_other(self) -> bool:
        try:
            lease = self.kube.get(self.path)
        except (KubeError, OSError, urllib3.exceptions.HTTPError):
            return False
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return bool(holder) and holder != self.identity
