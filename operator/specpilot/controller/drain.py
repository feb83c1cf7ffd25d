"""The drain measurement (spec.engine.drainSeconds left out): the serving pods' e2e latency histograms, summed,
give a p99; api/drain.py decides the drain; status.drain records it, the reconciler renders it into the
`<name>-drain` ConfigMap (needs_render sees status.drain move), and the runtime reads it when SIGTERM comes.

Who measures: the tuning loop, every window, from the scrapes it takes anyway; without tuning, one loop of the
operator visits every object it reconciled once per DRAIN_INTERVAL_S and lists and scrapes the pods itself (not
a Kopf timer per object: a timer puts Kopf's finalizer on every object, handlers.Scheduler.start_resync says
why). Bounded in time; failures are logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from specpilot.api import drain
from specpilot.api.names import DEPLOYMENT_LABEL, MANAGED_BY, MANAGER
from specpilot.controller.handlers import Scheduler
from specpilot.controller.kube import NotLeader, sd_path
from specpilot.controller.reconcile import PAUSED_ANNOTATION
from specpilot.controller.status_write import write_fresh
from specpilot.scrape import pods as scrape
from specpilot.scrape.owners import owned_pods

log = logging.getLogger(__name__)

DRAIN_CHANGED = "DrainChanged"
# How often an untuned object is measured (the first round this long after the operator starts, so a burst of
# new objects is not measured while it is being created): a drain follows the request mix, which moves over
# minutes to hours, and each pass costs two lists and a scrape per pod.
DRAIN_INTERVAL_S = 120.0
# One pass (lists, scrapes, status write) at most: a slow API server or pod costs the pass, not the timer.
PASS_TIMEOUT_S = 30.0


def merged_buckets(histograms: list[tuple[tuple[float, float], ...]]) -> list[tuple[float, float]]:
    """Cumulative histograms of several pods summed: only the bounds every pod has (a sum over a bound some
    pod lacks would not be cumulative)."""
    present = [h for h in histograms if h]
    if not present:
        return []
    bounds = set.intersection(*({le for le, _ in h} for h in present))
    sums = dict.fromkeys(bounds, 0.0)
    for h in present:
        for le, count in h:
            if le in sums:
                sums[le] += count
    return sorted(sums.items())


def _text(d: drain.Drain) -> str:
    return f"{d.seconds} s ({d.source})"


class DrainMeasure:
    """Turns one object's scrapes into status.drain, with an Event and a log line when the drain moves."""

    def __init__(self, scheduler: Scheduler, namespace: str, name: str) -> None:
        self.scheduler, self.namespace, self.name = scheduler, namespace, name
        self.kube, self.events = scheduler.reconciler.kube, scheduler.reconciler.events

    async def record(self, obj: dict[str, Any], drain_seconds: int | None, scrapes: list[scrape.PodScrape]) -> None:
        """Measure from `scrapes` (the object's ready serving pods) when its drain is automatic."""
        if drain_seconds is not None:
            return
        histogram = merged_buckets([s.snapshot.e2e_latency_buckets for s in scrapes if s.snapshot is not None])
        if not histogram:
            return
        p99, requests = drain.p99_from_histogram(histogram), drain.requests_in(histogram)
        before = drain.in_force(None, (obj.get("status") or {}).get("drain"))
        after, _ = drain.measured(before, p99, requests)
        if not after.worth_writing(before):
            return
        written: list[tuple[drain.Drain, drain.Drain, str]] = []

        def patch(status: dict[str, Any]) -> dict[str, Any]:
            # Re-based on the status as it is now (a reconcile or another pass may have written it).
            now = drain.in_force(None, status.get("drain"))
            new, why = drain.measured(now, p99, requests)
            written[:] = [(now, new, why)]
            return {"drain": new.to_status()}

        await write_fresh(self.kube, self.scheduler.lock(self.namespace, self.name),
                          sd_path(self.namespace, self.name), patch, obj["metadata"].get("generation"))
        if written and written[0][0].seconds != written[0][1].seconds:
            old, new, why = written[0]
            message = f"drain {_text(old)} -> {_text(new)}: {why}"  # `why` names the p99 and the requests
            self.events.normal(obj, DRAIN_CHANGED, message)
            log.info("drain %s/%s: %s", self.namespace, self.name, message)


def _untuned_automatic(obj: dict[str, Any]) -> bool:
    """Read off the body as it is, not validated (validation runs CEL: too dear for every object every round; an
    invalid spec's pods are measured harmlessly, and the reconciler renders nothing for it)."""
    def field(parent: Any, key: str) -> dict[str, Any]:
        value = parent.get(key) if isinstance(parent, dict) else None
        return value if isinstance(value, dict) else {}
    spec = field(obj, "spec")
    return field(spec, "engine").get("drainSeconds") is None and field(spec, "tuning").get("enabled") is not True


async def _own_pods(scheduler: Scheduler, obj: dict[str, Any], namespace: str, name: str) -> list[dict[str, Any]]:
    kube = scheduler.reconciler.kube
    selector = f"{MANAGED_BY}={MANAGER},{DEPLOYMENT_LABEL}={name}"
    deployments, pods, replicasets = await asyncio.gather(
        asyncio.to_thread(scheduler.reconciler.deployments, obj),
        asyncio.to_thread(kube.list, "v1", "pods", namespace, selector),
        asyncio.to_thread(kube.list, "apps/v1", "replicasets", namespace, selector))
    return owned_pods(pods, replicasets, deployments)[0]


async def measure_once(scheduler: Scheduler, scraper: scrape.Scraper, namespace: str, name: str) -> None:
    """One pass over one object: read it (the body the watch delivered, else a GET), list and scrape its ready
    pods, record; nothing for a tuned object (its loop measures), a fixed drain, or no ready pod."""
    obj = scheduler.reconciler.bodies.take(namespace, name)
    if obj is None:
        obj = await asyncio.to_thread(scheduler.reconciler.kube.get, sd_path(namespace, name))
    if obj is None or obj["metadata"].get("deletionTimestamp") or \
            (obj["metadata"].get("annotations") or {}).get(PAUSED_ANNOTATION) == "true":
        return
    if not (obj.get("status") or {}).get("readyReplicas") or not _untuned_automatic(obj):
        return
    targets = scrape.pod_targets(await _own_pods(scheduler, obj, namespace, name))
    scrapes = await scraper.scrape(targets)
    await DrainMeasure(scheduler, namespace, name).record(obj, None, scrapes)


async def _pass(scheduler: Scheduler, scraper: scrape.Scraper, namespace: str, name: str) -> None:
    try:
        async with asyncio.timeout(PASS_TIMEOUT_S):
            await measure_once(scheduler, scraper, namespace, name)
    except NotLeader:
        raise
    except Exception as exc:  # an API or pod hiccup costs this pass
        log.warning("drain %s/%s: measurement skipped: %s", namespace, name, exc)


async def measure_all(scheduler: Scheduler, scraper: scrape.Scraper, interval_s: float = DRAIN_INTERVAL_S) -> None:
    """Every object the operator reconciled, once per interval, spread over it; until cancelled or no longer
    the leader."""
    await asyncio.sleep(interval_s)
    while True:
        keys = sorted(scheduler.reconciler.uids)
        if not keys:
            await asyncio.sleep(interval_s)
        for key in keys:
            await asyncio.sleep(interval_s / len(keys))
            if key in scheduler.reconciler.uids:
                try:
                    await _pass(scheduler, scraper, *key)
                except NotLeader:
                    return  # the new leader measures


def register(registry: kopf.OperatorRegistry, scheduler: Scheduler,
             limits: scrape.ScrapeLimits = scrape.ScrapeLimits()) -> None:
    """The measurement loop for untuned objects with an automatic drain, with a scraper of its own."""
    scraper = scrape.Scraper(limits)
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def _start(**_: Any) -> None:
        tasks.append(asyncio.create_task(measure_all(scheduler, scraper), name="drain-measure"))

    @kopf.on.cleanup(registry=registry)
    async def _close(**_: Any) -> None:
        for task in tasks:  # Kopf would wait for a task born after its start
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await scraper.close()
