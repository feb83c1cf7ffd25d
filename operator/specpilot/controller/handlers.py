"""Kopf handlers: when to reconcile. What a reconcile does is reconcile.py's.

Every trigger funnels into `Scheduler.request`, which serialises reconciles per object and collapses
bursts (a rollout changes the Deployment's status many times; one reconcile after the burst is enough).
A failed reconcile is retried with exponential backoff and full jitter, capped, until it succeeds: giving
up after a few quick jittered attempts would leave a tuner's canary unrendered until the 60 s resync. An
answer that will not change (a 4xx other than 429, 409 and 403: a conflict is resolved by a fresh
reconcile) is not retried, and a replica that is not the leader drops the work. A 403, and a child the API
server refused (said in status), are retried on the same capped backoff: RBAC is fixed by someone else, and
a kube-apiserver just restarted answers 403 until its authorizer's cache has synced (seen on the real
control plane: a canary's ConfigMap refused then stayed missing until the resync).
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import kopf

from specpilot.api.models import GROUP, PLURAL, VERSION
from specpilot.controller import metric_names as m
from specpilot.controller.kube import RECONCILE_WORKERS, Backoff, KubeError, NotLeader
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.reconcile import Reconciler

log = logging.getLogger(__name__)

RESYNC_INTERVAL_S = 60.0
# Reconcile retries after the client's own: up to 0.25, 0.5, 1, 2, 4, 8, 16, then 30 s (full jitter), until one
# works: a conflict is over at the next fresh read, and a render a canary waits for (its progressDeadline
# runs) must not sit out seconds per failed attempt.
RETRY = Backoff(attempts=5, base_s=0.25, cap_s=RESYNC_INTERVAL_S / 2)
CHILD_RESOURCES = (("", "v1", "configmaps"), ("apps", "v1", "deployments"), ("", "v1", "services"))


class Scheduler:
    """At most one reconcile per object at a time, and at most one more queued behind it."""

    def __init__(self, reconciler: Reconciler, metrics: OperatorMetrics, retry: Backoff = RETRY) -> None:
        self.reconciler, self.metrics, self.retry = reconciler, metrics, retry
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._queued: set[tuple[str, str]] = set()
        self._known: set[tuple[str, str]] = set()
        self._failures: dict[tuple[str, str], int] = {}
        self._essence: dict[tuple[str, str], str] = {}  # what a reconcile reads besides status, last seen
        # Few at once: when a thousand objects arrive together, each reconcile then takes milliseconds
        # rather than sharing the CPU with twenty others, and the total time is the same (CPU-bound).
        self._pool = ThreadPoolExecutor(RECONCILE_WORKERS, "reconcile")
        # Kept so that they are not garbage-collected mid-flight and can be cancelled at shutdown.
        self._tasks: set[asyncio.Future[None]] = set()
        self._stopped = False

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        """Held while the object is reconciled; the tuning loop holds it too while it writes status, so
        neither overwrites the other's conditions with a stale copy."""
        return self._locks.setdefault((namespace, name), asyncio.Lock())

    async def reconcile_now(self, namespace: str, name: str) -> str | None:
        key = (namespace, name)
        async with self.lock(namespace, name):
            self._queued.discard(key)
            result = await asyncio.get_running_loop().run_in_executor(
                self._pool, self.reconciler.reconcile, namespace, name)
        if result != m.RESULT_REFUSED:  # a refusal counts on: its retries back off (_requested)
            self._failures.pop(key, None)
        if result is None:
            self.forget(namespace, name)
        else:
            self._known.add(key)
            self.metrics.managed.labels("SpeculativeDeployment").set(len(self._known))
        return result

    def essence_changed(self, namespace: str, name: str, obj: dict[str, Any]) -> bool:
        """Whether what a reconcile reads besides status (the spec's generation, labels, annotations,
        deletion) changed since this object was last seen; a new operator has seen nothing, so it reconciles
        everything once."""
        meta = obj.get("metadata") or {}
        essence = json.dumps([meta.get("generation"), meta.get("labels"), meta.get("annotations"),
                              meta.get("deletionTimestamp")], sort_keys=True, default=str)
        key = (namespace, name)
        if self._essence.get(key) == essence:
            return False
        self._essence[key] = essence
        return True

    def request(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        if key in self._queued or self._stopped:
            return
        self._queued.add(key)
        self._keep(asyncio.ensure_future(self._requested(namespace, name)))

    def _keep(self, task: asyncio.Future[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _requested(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        try:
            result = await self.reconcile_now(namespace, name)
        except NotLeader:
            self._queued.discard(key)  # not ours to do any more: the new leader reconciles it
        except Exception as exc:  # counted in metrics by the reconciler
            self._queued.discard(key)
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            if not isinstance(exc, KubeError) and failures >= self.retry.attempts or \
                    isinstance(exc, KubeError) and not exc.transient and exc.status != 403:
                self._failures.pop(key, None)
                log.warning("reconcile of %s/%s failed, not retrying (the next change or resync will): %s",
                            namespace, name, exc)
                return
            pause = self.retry.delay(min(failures - 1, 16))
            if isinstance(exc, KubeError) and exc.status == 409:  # expected: another writer moved the object
                log.info("reconcile of %s/%s: the object changed since it was read, re-reading it in %.1fs",
                         namespace, name, pause)
            else:
                log.warning("reconcile of %s/%s failed, retry %d in %.1fs: %s", namespace, name, failures, pause,
                            exc)
            self._keep(asyncio.ensure_future(self._later(pause, namespace, name)))
        else:
            if result == m.RESULT_REFUSED and not self._stopped:
                failures = self._failures[key] = self._failures.get(key, 0) + 1
                pause = self.retry.delay(min(failures - 1, 16))
                log.info("reconcile of %s/%s: a child was refused (see its ChildrenApplied condition), retry %d "
                         "in %.1fs", namespace, name, failures, pause)
                self._keep(asyncio.ensure_future(self._later(pause, namespace, name)))

    async def _later(self, pause: float, namespace: str, name: str) -> None:
        await asyncio.sleep(pause)
        self.request(namespace, name)

    async def shutdown(self) -> None:
        """Drop queued work and cancel what runs (a reconcile thread already in a request finishes that
        request; the write fence stops its next one)."""
        self._stopped = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def start_resync(self, interval_s: float = RESYNC_INTERVAL_S) -> None:
        """The level-based safety net: every known object is reconciled once per interval, spread over it, so
        status and children converge even if an event was missed. One loop for the operator, not a Kopf timer
        per object: a timer makes Kopf put its finalizer on every object (a write and an event each, and
        deleting one would wait for a running operator)."""
        self._keep(asyncio.ensure_future(self._resync(interval_s)))

    async def _resync(self, interval_s: float) -> None:
        while not self._stopped:
            keys = sorted(self._known)
            if not keys:
                await asyncio.sleep(interval_s)
            for key in keys:
                await asyncio.sleep(interval_s / len(keys))
                if key in self._known:
                    self.request(*key)

    def forget(self, namespace: str, name: str) -> None:
        self._known.discard((namespace, name))
        self._essence.pop((namespace, name), None)
        self._failures.pop((namespace, name), None)
        self._locks.pop((namespace, name), None)
        self.reconciler.forget(namespace, name)
        self.metrics.managed.labels("SpeculativeDeployment").set(len(self._known))
        self.metrics.forget(namespace, name)


def register(registry: kopf.OperatorRegistry, scheduler: Scheduler,
             configure: Callable[[kopf.OperatorSettings], None]) -> None:
    """Add specpilot's handlers to `registry`. The tuning loop adds its per-object daemon to the same
    registry (see docs/operator.md) and asks for re-renders through `scheduler.request`."""

    @kopf.on.startup(registry=registry)
    async def _settings(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)
        scheduler.start_resync()  # on the operator's event loop (a sync handler would run in a thread)

    # Kopf's handler types allow a namespace of None; these resources are namespaced.
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)  # type: ignore[arg-type]
    async def _observed(event: kopf.RawEvent, body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        # Level-based: the initial listing (type None), a new object, a changed spec, labels or annotations
        # (the pause annotation), or a status.tuning that moved stableN/canaryN each ask for a reconcile.
        # Status-only writes (ours, mostly) do not. Kopf's on.create/update would do the same at the cost
        # of two annotation patches per change, each coming back as one more event.
        obj = dict(body)
        if event.get("type") == "DELETED":
            scheduler.forget(namespace, name)
            return
        scheduler.reconciler.bodies.offer(obj)  # the reconcile it may ask for starts from it, not a GET
        if event.get("type") == "ADDED":
            scheduler.reconciler.born(namespace, name, body.get("metadata", {}).get("uid", ""))
        if scheduler.essence_changed(namespace, name, obj) or scheduler.reconciler.needs_render(obj):
            scheduler.request(namespace, name)

    for group, version, plural in CHILD_RESOURCES:
        # Children are found by their owner reference, not by label (Kopf filters labels on the client, so
        # the watch is the same): a child whose label was edited away is still seen, and its deletion too.
        # Kopf's handler types allow a namespace of None; these resources are namespaced.
        @kopf.on.event(group, version, plural, id=f"child-{plural}", registry=registry)  # type: ignore[arg-type]
        async def _child(event: kopf.RawEvent, body: kopf.Body, namespace: str, **_: Any) -> None:
            # A child was created, changed (status included) or deleted, or an object holding a child's
            # name went: reconcile its parent, which restores what was deleted or edited, takes the freed
            # name and refreshes its status. The echo of the reconciler's own apply tells it nothing new.
            parents = scheduler.reconciler.cache.observe(event.get("type"), dict(body))
            if event.get("type") is not None:
                for parent_namespace, parent in parents:
                    scheduler.request(parent_namespace, parent)
