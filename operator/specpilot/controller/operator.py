"""`specpilot run`: the operator process. Waits for the leader Lease, then runs Kopf until stopped or
until the Lease is lost (then it exits, so the Pod restarts as a standby: client-go does the same)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf

from specpilot.api import cel
from specpilot.api.validate import DEFAULT_POLICY, Policy, crd_schema
from specpilot.controller import drain, gc_policy, kopf_session
from specpilot.controller.events import EventRecorder
from specpilot.controller.handlers import Scheduler, register
from specpilot.controller.health import DEFAULT_STALL_S, LEADER, STANDBY, STOPPING, Health, serve
from specpilot.controller.kube import CONCURRENCY, FIELD_MANAGER, Kube, load_api_client
from specpilot.controller.leader import LeaderLost, LeaseElector
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.reconcile import Reconciler
from specpilot.controller.tuning import loop as tuning_loop
from specpilot.render.images import DEFAULT_SERVING, ServingDefaults
from specpilot.scrape.pods import ScrapeLimits

log = logging.getLogger(__name__)

# Kopf puts it on every SpeculativeDeployment so that the per-object timer and tuning daemon are stopped
# before the object goes.
FINALIZER = "specpilot.io/finalizer"
# A clean stop waits this long for Events recorded but not yet posted.
EVENT_FLUSH_S = 2.0


@dataclass
class OperatorOptions:
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = field(default_factory=list)   # empty: all namespaces
    metrics_port: int = 8080
    metrics_host: str = "0.0.0.0"
    stall_after_s: float = DEFAULT_STALL_S   # /healthz fails once the event loop is silent this long
    lease_name: str = "specpilot-operator"
    lease_namespace: str | None = None
    lease_duration_s: int = 15
    identity: str = ""
    leader_election: bool = True
    scrape: ScrapeLimits = field(default_factory=ScrapeLimits)
    policy: Policy = DEFAULT_POLICY
    serving: ServingDefaults = DEFAULT_SERVING


def _identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}-{uuid.uuid4().hex[:6]}"


def _lease_namespace(opts: OperatorOptions, default: str) -> str:
    if opts.lease_namespace:
        return opts.lease_namespace
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return os.environ.get("POD_NAMESPACE") or default


class NoDiffBase(kopf.DiffBaseStorage):
    """Kopf diffs every watch event against the last handled state, deep-copying the whole body several
    times, for on.create/update handlers; specpilot has none (handlers.py decides what changed), so the
    essence is the generation and nothing is stored. Kopf's only other use, resetting a timer's idle
    period, then counts every event of the object."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return {"metadata": {"generation": body.get("metadata", {}).get("generation")}}  # type: ignore[typeddict-unknown-key]

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def _configure(settings: kopf.OperatorSettings) -> None:
    settings.peering.standalone = True  # leadership comes from the Lease, see leader.py
    settings.persistence.finalizer = FINALIZER
    settings.persistence.diffbase_storage = NoDiffBase()
    # Kopf would post an Event for every handler run; the reconciler posts the ones that say something.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60


async def run_operator(opts: OperatorOptions) -> int:
    gc_policy.configure()
    # Reconciles block on HTTP in threads; the default executor (CPUs + 4) would queue them behind each other.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(CONCURRENCY, "api"))
    identity = opts.identity or _identity()
    # The Lease itself is written unfenced (that is how leadership is won); everything else is fenced.
    kube = Kube(load_api_client(opts.kubeconfig, opts.context), user_agent=f"{FIELD_MANAGER}/{identity}")
    metrics = OperatorMetrics()
    health = Health(opts.stall_after_s)
    # Born before Kopf starts, like the tasks below, and before the Lease, so standbys are watched too.
    heartbeat = asyncio.create_task(health.heartbeat())
    serve(opts.metrics_port, opts.metrics_host, health, metrics.registry)
    metrics.leader.set(0)
    # CEL rules compiled while the Lease is sought, not by the first reconciles (a second or two of CPU).
    compiled = asyncio.create_task(asyncio.to_thread(cel.compile_all, crd_schema()))
    elector = None
    if opts.leader_election:
        elector = LeaseElector(kube, _lease_namespace(opts, "default"), opts.lease_name, identity,
                               opts.lease_duration_s, max(0.5, opts.lease_duration_s / 5))
        health.set_role(STANDBY)
        await elector.acquire()
    # Renewing starts the moment the Lease is won: the fence stays open only a renewal deadline after the
    # last renewal sent, and the CEL rules still compiling (seconds on a busy machine) must not use it up
    # (a CI run on two loaded cores lost a 4-second Lease so, 3.5 seconds after winning it). Created before
    # Kopf starts: Kopf treats every task born after its start as its own and waits for them at shutdown,
    # which would hold the exit for its 5-second grace period.
    holder = asyncio.create_task(elector.hold()) if elector else None
    log.info("compiled the CRD's %d CEL rules", await compiled)
    writer = kube.fenced(elector) if elector else kube
    metrics.leader.set(1)
    health.set_role(LEADER)
    registry = kopf.OperatorRegistry()
    events = EventRecorder(writer, identity)
    scheduler = Scheduler(Reconciler(writer, metrics, events, opts.policy, opts.serving), metrics)
    register(registry, scheduler, _configure)
    tuning_loop.register(registry, scheduler, opts.scrape)
    drain.register(registry, scheduler, opts.scrape)

    @kopf.on.login(registry=registry)
    async def _login(**_: object) -> kopf.AiohttpSession:  # async: the session belongs to the loop
        return kopf_session.session(kube, elector)

    operator = asyncio.create_task(kopf.operator(
        registry=registry, standalone=True, clusterwide=not opts.namespaces, namespaces=opts.namespaces,
        ready_flag=health.kopf_ready))
    # No stop_flag: Kopf stops on SIGINT/SIGTERM itself, and a lost lease cancels it (below). Kopf leaves
    # its stop-flag waiter task pending at exit, which would cost its 5-second grace period.
    waiters: set[asyncio.Task[None]] = {operator}
    if holder:
        waiters.add(holder)
    code = 0
    try:
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if holder in done and isinstance(holder.exception(), LeaderLost):
            log.error("%s; stopping so that only the new leader acts", holder.exception())
            code = 1
    finally:
        health.set_role(STOPPING)
        if elector and code:
            elector.lose()  # already closed by hold(); said again so no path can skip it
        await scheduler.shutdown()
        operator.cancel()
        if holder:
            holder.cancel()
        await asyncio.gather(operator, return_exceptions=True)
        heartbeat.cancel()
        metrics.leader.set(0)
        if code == 0:
            await asyncio.to_thread(events.flush, EVENT_FLUSH_S)
        if elector and code == 0:
            await asyncio.to_thread(elector.release)
    return code
