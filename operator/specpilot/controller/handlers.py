"""Kopf handlers: when to reconcile. What a reconcile does is reconcile.py's.

Every trigger funnels into `Scheduler.request`, which serialises reconciles per object and collapses
bursts (a rollout changes the Deployment's status many times; one reconcile after the burst is enough).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import kopf

from specpilot.api.models import GROUP, PLURAL, VERSION
from specpilot.controller.kube import KubeError
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.reconcile import Reconciler
from specpilot.render.names import DEPLOYMENT_LABEL, MANAGED_BY, MANAGER

log = logging.getLogger(__name__)

RESYNC_INTERVAL_S = 60.0
RETRY_DELAY_S = 5.0
CHILD_RESOURCES = (("", "v1", "configmaps"), ("apps", "v1", "deployments"), ("", "v1", "services"))


class Scheduler:
    """At most one reconcile per object at a time, and at most one more queued behind it."""

    def __init__(self, reconciler: Reconciler, metrics: OperatorMetrics) -> None:
        self.reconciler, self.metrics = reconciler, metrics
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._queued: set[tuple[str, str]] = set()
        self._known: set[tuple[str, str]] = set()

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        """Held while the object is reconciled; the tuning loop holds it too while it writes status, so
        neither overwrites the other's conditions with a stale copy."""
        return self._locks.setdefault((namespace, name), asyncio.Lock())

    async def reconcile_now(self, namespace: str, name: str) -> str | None:
        key = (namespace, name)
        async with self.lock(namespace, name):
            self._queued.discard(key)
            result = await asyncio.to_thread(self.reconciler.reconcile, namespace, name)
        if result is None:
            self.forget(namespace, name)
        else:
            self._known.add(key)
            self.metrics.managed.labels("SpeculativeDeployment").set(len(self._known))
        return result

    def request(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        if key in self._queued:
            return
        self._queued.add(key)
        asyncio.get_running_loop().create_task(self._requested(namespace, name))

    async def _requested(self, namespace: str, name: str) -> None:
        try:
            await self.reconcile_now(namespace, name)
        except Exception as exc:  # retried like a Kopf handler would be; the error is counted in metrics
            log.warning("reconcile of %s/%s failed, retrying in %ss: %s", namespace, name, RETRY_DELAY_S, exc)
            asyncio.get_running_loop().call_later(RETRY_DELAY_S, self.request, namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        self._known.discard((namespace, name))
        self._locks.pop((namespace, name), None)
        self.reconciler.forget(namespace, name)
        self.metrics.managed.labels("SpeculativeDeployment").set(len(self._known))
        self.metrics.forget(namespace, name)


def register(registry: kopf.OperatorRegistry, scheduler: Scheduler,
             configure: Callable[[kopf.OperatorSettings], None]) -> None:
    """Add specpilot's handlers to `registry`. The tuning loop adds its per-object daemon to the same
    registry (see docs/operator.md) and asks for re-renders through `scheduler.request`."""

    @kopf.on.startup(registry=registry)
    def _settings(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.update(GROUP, VERSION, PLURAL, registry=registry)
    async def _changed(namespace: str, name: str, **_: Any) -> None:
        try:
            await scheduler.reconcile_now(namespace, name)
        except KubeError as exc:
            raise kopf.TemporaryError(f"API error: {exc}", delay=RETRY_DELAY_S) from exc

    @kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_INTERVAL_S, initial_delay=RESYNC_INTERVAL_S,
                idle=RESYNC_INTERVAL_S / 2, registry=registry)
    async def _resync(namespace: str, name: str, **_: Any) -> None:
        # Level-based safety net: status and children converge even if an event was missed.
        scheduler.request(namespace, name)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def _observed(event: dict[str, Any], body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            scheduler.forget(namespace, name)
        elif event.get("type") == "MODIFIED" and scheduler.reconciler.needs_render(dict(body)):
            # The tuning loop moved stableN/canaryN in status.tuning: render the tracks for it now.
            scheduler.request(namespace, name)

    for group, version, plural in CHILD_RESOURCES:
        @kopf.on.event(group, version, plural, labels={MANAGED_BY: MANAGER, DEPLOYMENT_LABEL: kopf.PRESENT},
                       id=f"child-{plural}", registry=registry)
        async def _child(event: dict[str, Any], body: kopf.Body, namespace: str, **_: Any) -> None:
            # A child was created, changed (status included) or deleted: reconcile its parent, which
            # restores what was deleted or edited and refreshes the parent's status.
            parent = body.get("metadata", {}).get("labels", {}).get(DEPLOYMENT_LABEL)
            if parent and event.get("type") is not None:
                scheduler.request(namespace, parent)
