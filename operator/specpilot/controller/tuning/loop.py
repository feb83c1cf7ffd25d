"""The per-object tuning loop: a Kopf daemon for each SpeculativeDeployment with tuning enabled.

Every analysis window it scrapes the stable and canary pods (scrape/), turns counter deltas into the
tuner's Observations, calls the pure `tuning.step`, and writes the new state to `status.tuning` with the
Tuning condition and `status.acceptedLength`. It acts only through that status: the reconciler renders
the stable track at `status.tuning.stableN` and a canary Deployment while `canaryN` is set, so a
start_canary creates the canary, promote rolls stable and removes the canary, rollback and stop remove
the canary (canary/tracks.py). New decisions also become Events and operator metrics.

Restart safety: the tuner's whole state is in the status; only the previous scrape per pod (for deltas) is
in memory, so a restarted operator spends its first window re-establishing it and then continues the same
round (the canary Deployment, rendered from canaryN, is left as it is).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from typing import Any, Callable

import kopf

from specpilot.api.models import GROUP, PLURAL, VERSION, SpeculativeDeployment, duration_seconds
from specpilot.api.names import DEPLOYMENT_LABEL, MANAGED_BY, MANAGER
from specpilot.api.switchback import tuner_tuning
from specpilot.api.validate import InvalidSpeculativeDeployment, load
from specpilot.canary import resume, traffic
from specpilot.canary.routing import CanaryRoute
from specpilot.canary.tracks import plan_tracks
from specpilot.controller import capacity
from specpilot.controller.drain import DrainMeasure
from specpilot.controller.handlers import Scheduler
from specpilot.controller.kube import KubeError, NotLeader, sd_path
from specpilot.controller.reconcile import PAUSED_ANNOTATION
from specpilot.controller.status import MAX_MESSAGE
from specpilot.controller.status_write import Status, write_fresh
from specpilot.controller.tuning import decision_events, observe, status as ts
from specpilot.controller.tuning.metrics import TunerMetrics, observed_goodput, predicted_bounds, predicted_goodput
from specpilot.display import bounded
from specpilot.render import replicas
from specpilot.scrape import pods as scrape
from specpilot.scrape.owners import StrangerNotice, owned_pods
from specpilot.scrape.windows import WindowCounter
from specpilot.tuning import ActionKind, Observations, TrackWindow, TunerState, tournament, tournament_state
from specpilot.tuning import switchback
from specpilot.tuning.observations import measurable
from specpilot_runtime.engine_config import data_parallel_size

log = logging.getLogger(__name__)

# How often the wait between windows looks at the live spec: a hand edit of N is acted on within this.
POLL_S = 0.5
# A window's API calls and scrapes taking longer than this (and than the window) are logged.
SLOW_TICK_S = 10.0


def _enabled(spec: kopf.Spec, **_: Any) -> bool:
    return bool((spec.get("tuning") or {}).get("enabled"))


def _spec_n(body: kopf.Body) -> Any:
    return ((body.get("spec") or {}).get("speculative") or {}).get("numSpeculativeTokens")


def _phase(namespace: str, name: str) -> float:
    """A fixed fraction in [0, 1) per object."""
    return zlib.crc32(f"{namespace}/{name}".encode()) / 2 ** 32


class TuningLoop:
    """One object's loop. Kube calls are synchronous (the controller's client) and run in threads."""

    def __init__(self, scheduler: Scheduler, metrics: TunerMetrics, scraper: scrape.Scraper,
                 namespace: str, name: str) -> None:
        self.scheduler, self.metrics, self.scraper = scheduler, metrics, scraper
        self.kube = scheduler.reconciler.kube
        self.events = scheduler.reconciler.events
        self.namespace, self.name = namespace, name
        self.path = sd_path(namespace, name)
        self.counter = WindowCounter()
        self.capacity_reported: str | None = None  # the InsufficientCapacity message last posted as an Event
        self.strangers = StrangerNotice()  # labelled pods not its own, named in a Warning once each
        self.http_route = CanaryRoute(self.kube, self.events, namespace, name)
        self.scrape_problem: str | None = None  # the last window's, as logged
        self.implausible: set[str] = set()  # tracks whose last window no engine could have counted, as logged
        self.drain = DrainMeasure(scheduler, namespace, name)

    async def run(self, stopped: kopf.DaemonStopped, body: kopf.Body) -> None:
        log.info("tuning %s/%s: loop started", self.namespace, self.name)
        phase: float | None = _phase(self.namespace, self.name)
        while not stopped:
            started = time.monotonic()
            try:
                window_s = await self.tick()
            except NotLeader:
                log.info("tuning %s/%s: loop ends: not the leader", self.namespace, self.name)
                return  # the new leader's loop takes over; nothing more is written from here
            except Exception as exc:  # an API hiccup costs this window, not the loop
                log.warning("tuning %s/%s: window failed: %s", self.namespace, self.name, exc)
                self.counter.reset()
                window_s = POLL_S * 4
            took = time.monotonic() - started
            if took > max(window_s, SLOW_TICK_S):
                # Decisions (and the progressDeadline) wait for the window: say where the time went.
                log.warning("tuning %s/%s: a window took %.1fs (API calls or scrapes slow)", self.namespace,
                            self.name, took)
            if phase is not None:
                # Objects applied together would tick together every window, and each tick waits for the
                # others' scrapes and API calls: the first window is stretched by a fixed share of itself
                # per object, as Prometheus spreads its scrapes by a hash of the target.
                window_s, phase = window_s * (1 + phase), None
            spec_n = _spec_n(body)
            # Windows start window_s apart: the tick's own time (API calls, scrapes) is part of the window, not
            # added to it, so windows do not fall behind. Sliced waits: a stop, or the user editing N by hand,
            # must not wait for the window to end.
            while (waited := time.monotonic() - started) < window_s and not stopped and _spec_n(body) == spec_n:
                await stopped.wait(min(POLL_S, window_s - waited))
        log.info("tuning %s/%s: loop stopped (%s)", self.namespace, self.name, stopped.reason)

    async def tick(self) -> float:
        """One window; returns the seconds to the next one."""
        obj = await asyncio.to_thread(self.kube.get, self.path)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return POLL_S
        try:
            sd = load(obj, self.scheduler.reconciler.policy)
        except InvalidSpeculativeDeployment:
            self.counter.reset()  # the reconciler reports it; nothing is measured against a bad spec
            return POLL_S * 4
        window_s = duration_seconds(sd.spec.tuning.canary.analysis_window)
        annotations = obj["metadata"].get("annotations") or {}
        if annotations.get(PAUSED_ANNOTATION) == "true" or not sd.spec.tuning.enabled:
            self.counter.reset()
            return window_s
        pods = await self._window(obj, sd)
        await self._report_capacity(obj, pods)
        return window_s

    async def _report_capacity(self, obj: dict[str, Any], pods: list[dict[str, Any]] | None) -> None:
        """Tuning=False/InsufficientCapacity, and a Warning once per new message, while a serving pod is
        Unschedulable: the user sees which GPUs are missing rather than a canary that is never Ready. `pods`
        are the window's, when it listed them."""
        if pods is None:
            pods = await self._own_pods(obj, await asyncio.to_thread(self.scheduler.reconciler.deployments, obj))
        pending = capacity.unschedulable(pods)
        message = capacity.capacity_message(pending) if pending else None
        # The window's decision rewrites the Tuning condition; the Event goes out once per new message.
        if message != self.capacity_reported and message is not None:
            self.events.warning(obj, capacity.INSUFFICIENT_CAPACITY, message)
        self.capacity_reported = message
        if message is None:
            return
        await self._write(obj, lambda status: ts.condition_patch(status, capacity.INSUFFICIENT_CAPACITY, message,
                                                                 _generation(obj)))

    def _selector(self) -> str:
        return f"{MANAGED_BY}={MANAGER},{DEPLOYMENT_LABEL}={self.name}"

    async def _own_pods(self, obj: dict[str, Any], deployments: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The labelled pods whose owner chain leads to this object; a stranger carrying its labels is left
        out of scrapes and counts, and named in a Warning once."""
        pods, replicasets = await asyncio.gather(
            asyncio.to_thread(self.kube.list, "v1", "pods", self.namespace, self._selector()),
            asyncio.to_thread(self.kube.list, "apps/v1", "replicasets", self.namespace, self._selector()))
        own, strangers = owned_pods(pods, replicasets, deployments)
        new = self.strangers.to_name(strangers)
        if new:
            names = [str((p.get("metadata") or {}).get("name")) for p in new]
            message = bounded(f"ignoring pod(s) {', '.join(names)}: they carry this object's labels but no "
                              "ReplicaSet of its Deployments made them", MAX_MESSAGE)
            self.events.warning(obj, "StrangerPodIgnored", message)
            log.warning("tuning %s/%s: %s", self.namespace, self.name, message)
        return own

    async def _window(self, obj: dict[str, Any], sd: SpeculativeDeployment) -> list[dict[str, Any]] | None:
        """One analysis window; returns the serving pods when it listed them."""
        spec, now = sd.spec, time.time()
        status = obj.get("status") or {}
        old = status.get("tuning")
        contenders = tournament_state.contenders_of(spec)
        tour = tournament_state.Tournament.from_status(status.get("tournament"), contenders, now)
        state, invalid = resume.resume(old, sd.for_contender(tour.stable), now)
        if invalid is not None:
            # Said once: the fresh state written here is valid, so the next window resumes it quietly.
            tour = tournament_state.Tournament.new(contenders, now)
            state, _ = resume.resume(old, sd, now)
            message = (f"status.tuning was not written by the tuner ({invalid}): tuning restarts from spec "
                       f"N={state.stable_n}")
            await self._commit(obj, sd, state.history, state, ("False", resume.INVALID_STATE, message), None,
                               tour)
            self.events.warning(obj, resume.INVALID_STATE, message)
            log.warning("tuning %s/%s: %s", self.namespace, self.name, message)
            self.counter.reset()
            return None
        if ts.edited_by_hand(old, spec.speculative.num_speculative_tokens):
            # Acted on before any scrape: the user wins even while metrics are unavailable (and a method
            # tournament starts over from spec.speculative).
            before = list(state.history)
            state = ts.restart_at_spec(state, spec.speculative, now)
            cond = ("True", "Observing", f"spec N set to {state.stable_n} by hand; tuning restarts from it")
            await self._commit(obj, sd, before, state, cond, None, tournament_state.Tournament.new(contenders, now))
            log.info("tuning %s/%s: %s", self.namespace, self.name, cond[2])
            self.counter.reset()
            return None
        # Deployments from the reconciler's child cache (the operator's watches of them); pods are listed.
        deployments = await asyncio.to_thread(self.scheduler.reconciler.deployments, obj)
        pods = await self._own_pods(obj, deployments)
        targets = scrape.pod_targets(pods)
        scrapes = await self.scraper.scrape(targets)
        await self._measure_drain(obj, sd, scrapes)
        now = time.time()
        problem = observe.scrape_problem(scrapes)
        if problem != self.scrape_problem:  # said when it starts, changes and ends, not every window
            if problem:
                log.warning("tuning %s/%s: no decision this window: %s", self.namespace, self.name, problem)
            else:
                log.info("tuning %s/%s: every pod's metrics read again", self.namespace, self.name)
            self.scrape_problem = problem
        if problem:
            # No decision on partial data; the next window starts from fresh baselines.
            self.counter.reset()
            await self._write(obj, lambda status: ts.condition_patch(
                status, ts.METRICS_UNAVAILABLE, f"no decision this window: {problem}", _generation(obj)))
            return pods
        deltas, elapsed = self.counter.advance(scrapes, now)
        if elapsed is None:
            return pods  # the first scrape only sets the baseline of each pod
        obs = observe.observations(deployments, targets, deltas, elapsed, spec.replicas,
                                   data_parallel_size(spec.engine.args), plan_tracks(sd, status))
        implausible = observe.implausible_counters(obs)
        if implausible and set(implausible) != self.implausible:  # said when it starts, not every window
            message = "window not measured, its counters are no engine's: " + \
                "; ".join(f"{track}: {why}" for track, why in implausible.items())
            log.warning("tuning %s/%s: %s", self.namespace, self.name, message)
            self.events.warning(obj, ts.METRICS_IMPLAUSIBLE, message)
        self.implausible = set(implausible)
        tour, new_state, action = tournament.step(tour, state, tuner_tuning(spec), contenders, obs, now)
        measured = obs.stable if measurable(obs.stable, obs.window_s) else None
        written, standing = await self._commit(obj, sd, state.history, new_state,
                                               ts.tuning_condition(new_state, action, tour, contenders), measured,
                                               tour)
        if not written:
            log.info("tuning %s/%s: the spec changed during the window; its decision (%s N=%s) is dropped",
                     self.namespace, self.name, action.kind, action.n)
            return pods
        if spec.tuning.canary.traffic_routing == "gateway" and spec.tuning.canary.http_route:
            canary_n = new_state.canary_n if tour.canary is None else tour.canary_n
            serving = canary_n is not None and any(
                t.ready for t in targets if t.track == "canary" and t.n == canary_n)
            await self.http_route.weigh(obj, spec.tuning.canary.http_route, traffic.canary_weight(sd, serving))
        stable_goodput = observed_goodput(obs.stable, obs.window_s)
        self.metrics.record(self.namespace, self.name, action, now,
                            {"stable": stable_goodput, "canary": observed_goodput(obs.canary, obs.window_s)},
                            predicted_goodput(new_state.history, new_state.stable_n, stable_goodput),
                            predicted_bounds(new_state.history, new_state.stable_n, stable_goodput))
        self.metrics.schedules(self.namespace, self.name, {"stable": new_state.stable_schedule,
                                                           "canary": new_state.canary_schedule})
        self.metrics.methods(self.namespace, self.name, standing["standings"] if standing else None)
        self.metrics.bands(self.namespace, self.name, new_state.history)
        if action.kind != ActionKind.HOLD or new_state.phase != state.phase:
            log.info("tuning %s/%s: %s N=%s (%s) -> %s", self.namespace, self.name, action.kind, action.n,
                     action.reason, new_state.phase)
        return pods

    async def _measure_drain(self, obj: dict[str, Any], sd: SpeculativeDeployment,
                             scrapes: list[scrape.PodScrape]) -> None:
        """The automatic drain from this window's scrapes (controller/drain.py); a failure costs the drain's
        update, not the window."""
        try:
            await self.drain.record(obj, sd.spec.engine.drain_seconds, scrapes)
        except NotLeader:
            raise
        except Exception as exc:
            log.warning("tuning %s/%s: drain not measured this window: %s", self.namespace, self.name, exc)

    async def _commit(self, obj: dict[str, Any], sd: SpeculativeDeployment, old_history: list[dict[str, Any]],
                      state: TunerState, cond: tuple[str, str, str], stable: TrackWindow | None,
                      tour: tournament_state.Tournament) -> tuple[bool, dict[str, Any] | None]:
        """Write the window's status and post its decisions; returns whether it was written (not when the spec
        moved on during the window) and the status.tournament written."""
        spec_n = sd.spec.speculative.num_speculative_tokens
        contenders = tournament_state.contenders_of(sd.spec)
        standing = ts.tournament_status(tour, state, contenders)
        if not await self._write(obj, lambda status: ts.status_patch(status, state, spec_n, cond, _generation(obj),
                                                                     stable, standing)):
            return False, None
        for entry in decision_events.new_entries(old_history, state.history):
            n = entry.get("n")
            live = isinstance(n, int) and entry.get("contender") is None \
                and switchback.live_arm(state, sd.spec.tuning, n, entry.get("schedule"))
            decision = decision_events.decision_event(entry, contenders,
                                                      LIVE_PLACEMENT if live else replicas.placement(sd))
            poster = self.events.warning if decision.event_type == "Warning" else self.events.normal
            poster(obj, decision.reason, decision.message)  # posted in the background
        return True, standing

    async def _write(self, obj: dict[str, Any], patch_of: Callable[[Status], Status]) -> bool:
        """`patch_of` written while the spec is still the one `obj` had (status_write.write_fresh)."""
        return await write_fresh(self.kube, self.scheduler.lock(self.namespace, self.name), self.path, patch_of,
                                 _generation(obj), written=self.scheduler.reconciler.bodies.offer)

    async def stop_tuning(self) -> None:
        """Tuning was turned off or the object is being deleted: the route gets its original rules back,
        and the tuner drops any canary and resumes by observing when turned on again (the reconciler
        already runs spec N without a canary)."""
        self.metrics.forget(self.namespace, self.name)
        obj = await asyncio.to_thread(self.kube.get, self.path)
        tuning = ((obj or {}).get("spec") or {}).get("tuning") or {}
        gone = obj is None or bool(obj["metadata"].get("deletionTimestamp"))
        if gone or not tuning.get("enabled"):  # not on an operator stop: the next leader carries on
            await self.http_route.restore(self.http_route.weighted or (tuning.get("canary") or {}).get("httpRoute"))
        if obj is None or gone:
            self.metrics.drop(self.namespace, self.name)
            return
        try:
            sd = load(obj)
        except InvalidSpeculativeDeployment:
            return
        status = obj.get("status") or {}
        old = status.get("tuning")
        if sd.spec.tuning.enabled or not old:
            return
        now = time.time()
        contenders = tournament_state.contenders_of(sd.spec)
        tour = tournament_state.Tournament.from_status(status.get("tournament"), contenders, now)
        state, _ = resume.resume(old, sd.for_contender(tour.stable), now)
        tour, state, _ = tournament.step(tour, state, tuner_tuning(sd.spec), contenders, Observations(0.0, None),
                                         now)
        spec_n = sd.spec.speculative.num_speculative_tokens
        standing = ts.tournament_status(tour, state, contenders)
        await self._write(obj, lambda status: ts.stopped_patch(state, spec_n, standing))


# Where a live canary runs (tuning.measure switchback), for its Event.
LIVE_PLACEMENT = ("measured live: a second arm that every stable pod alternates with the stable's (the "
                  "<name>-live ConfigMap), no pod restarted")


def _generation(obj: dict[str, Any]) -> int | None:
    return obj["metadata"].get("generation")


def register(registry: kopf.OperatorRegistry, scheduler: Scheduler,
             limits: scrape.ScrapeLimits = scrape.ScrapeLimits()) -> None:
    """Add the tuning daemon to the operator's registry; its metrics go on the operator's registry, and
    every tuned object shares one scraper (one pool, one concurrency bound)."""
    metrics = TunerMetrics(scheduler.metrics.registry)
    scraper = scrape.Scraper(limits)

    @kopf.on.cleanup(registry=registry)
    async def _close(**_: Any) -> None:
        await scraper.close()

    # Stopped daemons are asked first (the loop checks `stopped` every POLL_S and then hands the canary
    # back), and cancelled only if a window in flight (a slow scrape) outlasts the backoff.
    # Kopf's handler types allow a namespace of None; these resources are namespaced.
    @kopf.daemon(GROUP, VERSION, PLURAL, id="tuning", when=_enabled, registry=registry,  # type: ignore[arg-type]
                 cancellation_backoff=3.0, cancellation_timeout=5.0)
    async def _tuning(stopped: kopf.DaemonStopped, namespace: str, name: str, body: kopf.Body,
                      **_: Any) -> None:
        loop = TuningLoop(scheduler, metrics, scraper, namespace, name)
        try:
            await loop.run(stopped, body)
        finally:
            try:
                await loop.stop_tuning()
            except NotLeader:
                pass  # handing the canary back is the new leader's to do
            except KubeError as exc:
                # Kopf also stops daemons when its watches restart (an API server restart): failing here
                # would hold the next daemon back for Kopf's daemon backoff (60 s). The status keeps the
                # state, so the next daemon, or the next stop, carries on.
                log.warning("tuning %s/%s: stopping: %s", namespace, name, exc)
