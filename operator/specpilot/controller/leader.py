"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Why a Lease and not Kopf peering: Kopf peering pauses every operator when two of equal priority see
each other, so with identical replicas nobody acts; priorities would have to differ per replica, which
a Deployment cannot express. A Lease gives exactly one holder, hands over when the holder stops
renewing, and is what `kubectl get lease` and every Kubernetes tool understand.

The elector is also the fence for every write (`check`): writes are allowed only until a renewal deadline
that starts before each successful renewal was sent and ends a fifth of a lease duration (at least half a
second, for clock skew) before a standby may take over, as client-go's renewDeadline does. The deadline
runs on the monotonic clock, not on the event loop, so a leader whose loop was blocked finds it passed and
writes nothing, even from a reconcile thread that was already under way; once lost, the fence never opens
again. Renewals run on their own thread, never queued behind reconciles."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any

import urllib3

from specpilot.controller.kube import Backoff, Kube, KubeError, NotLeader, collection_path

log = logging.getLogger(__name__)


def _micro(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _expired(spec: dict[str, Any], now: datetime, default_s: int) -> bool:
    """Whether a Lease's holder stopped renewing in time. Anyone who may write the Lease may write anything
    the API server takes into it: a renewTime it cannot read counts as never renewed (client-go reads it
    as the zero time), one so late that its expiry is past year 9999 as held (it raised OverflowError out
    of every replica's election, and all of them crash-looped)."""
    duration = spec.get("leaseDurationSeconds")
    try:
        renewed = _parse(spec.get("renewTime"))
    except ValueError:
        renewed = None
    if renewed is None:
        return True
    try:
        return renewed + timedelta(seconds=duration if isinstance(duration, int) else default_s) < now
    except OverflowError:
        return False


# After a failed renewal the next attempt comes this many times sooner than a regular one.
RETRY_FRACTION = 3


class LeaderLost(Exception):
    """This replica stopped holding the Lease; it must stop acting at once."""


class LeaseElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str,
                 lease_duration_s: int = 15, renew_every_s: float = 5.0) -> None:
        # One attempt per renewal: the next renewal is the retry, and a late one must not outlive the fence.
        self.kube = Kube(kube.api, backoff=Backoff(attempts=1), user_agent=kube.user_agent)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration_s, self.renew_every_s = lease_duration_s, renew_every_s
        self.renew_deadline_s = lease_duration_s - max(0.5, lease_duration_s / 5)
        self._thread = ThreadPoolExecutor(1, "lease")
        self._stop = threading.Event()
        self._valid_until = 0.0  # time.monotonic() after which this replica may not write
        self._lost = False
        self._guard = threading.Lock()

    def holding(self) -> bool:
        with self._guard:
            if self._valid_until and time.monotonic() >= self._valid_until:
                # Seen closed, closed for good: whoever saw it has stopped acting (a tuning loop ends on
                # NotLeader), so a renewal sent before the deadline that returns after it must not reopen
                # it; the replica exits on LeaderLost and its restart resumes everything. Reopened, it kept
                # the Lease with its tuning loops gone, and a canary was never rolled back (a CI run).
                self._lost = True
            return not self._lost and time.monotonic() < self._valid_until

    def check(self) -> None:
        """The write fence: raise NotLeader unless this replica holds the Lease now."""
        if not self.holding():
            raise NotLeader(f"not the leader of lease {self.namespace}/{self.name}: not writing")

    def _renewed(self, sent_at: float) -> None:
        with self._guard:
            if not self._lost:
                self._valid_until = max(self._valid_until, sent_at + self.renew_deadline_s)

    def lose(self) -> None:
        """Close the fence for good (the Lease was lost or handed over)."""
        with self._guard:
            self._lost = True

    @property
    def path(self) -> str:
        return collection_path("coordination.k8s.io/v1", "leases", self.namespace) + f"/{self.name}"

    def try_acquire(self) -> bool:
        """One attempt to take or renew the Lease; True while this replica holds it."""
        sent_at = time.monotonic()
        now = datetime.now(timezone.utc)
        lease = self.kube.get(self.path)
        spec: dict[str, Any] = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration_s,
                                "renewTime": _micro(now)}
        try:
            if lease is None:
                spec.update(acquireTime=_micro(now), leaseTransitions=0)
                self.kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                  "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec})
                self._renewed(sent_at)
                return True
            cur = lease.get("spec") or {}
            expired = _expired(cur, now, self.lease_duration_s)
            holder = cur.get("holderIdentity")
            if holder and holder != self.identity and not expired:
                return False
            if holder == self.identity:
                spec.update(acquireTime=cur.get("acquireTime"), leaseTransitions=cur.get("leaseTransitions", 0))
            else:
                spec.update(acquireTime=_micro(now), leaseTransitions=cur.get("leaseTransitions", 0) + 1)
            # The resourceVersion makes the write conditional: of two standbys racing, one gets a 409.
            self.kube.replace({**lease, "spec": spec})
            self._renewed(sent_at)
            return True
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise

    def release(self) -> None:
        """Give the Lease up at shutdown so a standby takes over without waiting for it to expire."""
        self.lose()
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
        while not await self._off_loop(self._attempt):
            if not announced:
                log.info("standing by: lease %s/%s is held by another replica", self.namespace, self.name)
                announced = True
            await asyncio.sleep(self.renew_every_s / 2)
        log.info("acquired lease %s/%s as %s", self.namespace, self.name, self.identity)

    async def hold(self) -> None:
        """Renew until the renewal deadline passes without a renewal, or another replica holds the Lease;
        then close the fence and raise LeaderLost. The renewals run on the elector's thread, so a busy
        event loop does not cost the Lease; a frozen process stops them and its fence closes."""
        try:
            await self._off_loop(self._renew_until_lost)
        finally:
            self._stop.set()
        raise LeaderLost(f"lease {self.namespace}/{self.name} lost")

    def _renew_until_lost(self) -> None:
        wait = self.renew_every_s
        while not self._stop.wait(min(wait, max(0.0, self._valid_until - time.monotonic()))):
            if self.holding() and self._attempt():
                wait = self.renew_every_s
                continue
            if not self.holding() or self._held_by_other():
                self.lose()
                return
            # A failed renewal is retried sooner, as client-go's retryPeriod does: a few seconds of API
            # errors (a restart, a 5xx burst) must not use up every attempt before the renewal deadline.
            wait = self.renew_every_s / RETRY_FRACTION

    async def _off_loop(self, call: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

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
