"""What the cluster shows -> the tuner's Observations: each track's window from its Deployment, its pods and
their counter deltas, and why a window's metrics cannot be used (failed scrapes, counters no engine could
have counted). No I/O: loop.py scrapes."""

from __future__ import annotations

import dataclasses
from typing import Any

from specpilot_runtime.vllm_metrics import Snapshot

from specpilot.api.names import N_LABEL, TRACK_LABEL
from specpilot.display import some_of
from specpilot.canary.tracks import TrackPlan
from specpilot.controller.status import refusal
from specpilot.scrape.pods import PodScrape, PodTarget
from specpilot.scrape.switchback import arm_bands, arm_snapshot, cut
from specpilot.scrape.windows import TrackDelta
from specpilot.tuning import Observations, TrackWindow
from specpilot.tuning.observations import has_traffic, implausible


def template_n(deployment: dict[str, Any]) -> int | None:
    labels = ((deployment.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    value = str(labels.get(N_LABEL, ""))
    return int(value) if value.isascii() and value.isdigit() else None


def by_track(deployments: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["labels"][TRACK_LABEL]: d for d in deployments
            if TRACK_LABEL in (d["metadata"].get("labels") or {})}


def _current_pods(deployment: dict[str, Any]) -> int | None:
    """Pods of the Deployment's current template, as its controller reports them: a rolling update that keeps
    N (another method or draft at the same N) still has old pods at that N, which are not the track's."""
    status = deployment.get("status") or {}
    if "updatedReplicas" not in status:
        return None  # no report yet: the pods' N alone tells them apart
    generation = (deployment.get("metadata") or {}).get("generation")
    if isinstance(generation, int) and status.get("observedGeneration", generation) < generation:
        return 0  # the template changed and the controller has not rolled anything yet
    return int(status.get("updatedReplicas") or 0)


def track_window(deployment: dict[str, Any] | None, targets: list[PodTarget],
                 deltas: dict[tuple[str, int], TrackDelta], engines: int = 1) -> TrackWindow | None:
    """One track's window: pods at the Deployment's current N only (old pods of a rolling update are not
    the track's N); a track whose pods are not ready yet gets an empty delta. `engines`: vLLM engines per
    pod (the data-parallel size)."""
    if deployment is None:
        return None
    n = template_n(deployment)
    if n is None:
        return None
    track = deployment["metadata"]["labels"][TRACK_LABEL]
    ready = sum(1 for t in targets if t.track == track and t.n == n and t.ready)
    current = _current_pods(deployment)
    if current is not None:
        ready = min(ready, current)
    got = deltas.get((track, n))
    return TrackWindow(n=n, delta=got.delta if got else Snapshot(), ready_pods=ready if got else 0,
                       desired_pods=int((deployment.get("spec") or {}).get("replicas", 0)),
                       errors=float(got.restarts) if got else 0.0, engines=engines, refused=refusal(deployment))


def observations(deployments: list[dict[str, Any]], targets: list[PodTarget],
                 deltas: dict[tuple[str, int], TrackDelta], window_s: float, replicas: int,
                 engines: int = 1, plan: TrackPlan | None = None) -> Observations:
    """`replicas`: spec.replicas, the pods the stable track runs with no canary beside it; `engines`: vLLM
    engines per pod (the data-parallel size spec.engine.args asks for); `plan`: the tracks the reconciler
    renders, whose switchback arms (`TrackPlan.live`) are read from the stable pods' counters."""
    tracks = by_track(deployments)
    stable = track_window(tracks.get("stable"), targets, deltas, engines)
    canary = track_window(tracks.get("canary"), targets, deltas, engines)
    if plan is not None and plan.live is not None and stable is not None:
        return arm_observations(stable, plan, window_s, replicas, canary)
    return Observations(window_s=window_s, stable=stable, canary=canary, stable_replicas=replicas)


def arm_observations(stable: TrackWindow, plan: TrackPlan, window_s: float, replicas: int,
                     canary_pods: TrackWindow | None = None) -> Observations:
    """The stable pods' window as the tuner reads tracks: the stable's N (what the pods were started at is
    not what they serve), and while a canary runs as an arm, each arm's own counters (scrape/switchback.py);
    a canary of pods of its own (a restart: a higher N, another method, the table check's static pods) is
    `canary_pods`, read as any canary track."""
    assert plan.live is not None
    n = stable.n if plan.stable_n is None else plan.stable_n
    if not plan.canary_live or plan.canary_n is None:
        return Observations(window_s=window_s, stable=dataclasses.replace(stable, n=n, delta=cut(stable.delta, n)),
                            canary=canary_pods, stable_replicas=replicas)
    pods = stable.ready_pods
    arm_s, arm_c = plan.live.arms[0], plan.live.arms[1]
    s = dataclasses.replace(stable, n=n, delta=arm_snapshot(stable.delta, arm_s.key, n, window_s, pods),
                            bands=arm_bands(stable.delta, arm_s.key))
    c = dataclasses.replace(stable, n=plan.canary_n,
                            delta=arm_snapshot(stable.delta, arm_c.key, plan.canary_n, window_s, pods),
                            bands=arm_bands(stable.delta, arm_c.key))
    return Observations(window_s=window_s, stable=s, canary=c, stable_replicas=replicas, switchback=True)


def scrape_problem(scrapes: list[PodScrape]) -> str | None:
    """Why this window's metrics cannot be used, naming the pods; None when every scrape worked."""
    by_error: dict[str, list[str]] = {}
    for s in scrapes:
        if s.snapshot is None:
            by_error.setdefault(s.error or "not scraped", []).append(s.target.name)
    # Pods failing alike (a network policy, a version skew) are said once, with a few of their names.
    return "; ".join(f"{some_of(names)}: {error}" for error, names in by_error.items()) or None


def implausible_counters(obs: Observations) -> dict[str, str]:
    """The tracks whose window the tuner does not measure because no engine could have counted it, and why."""
    return {name: why for name, w in (("stable", obs.stable), ("canary", obs.canary))
            if has_traffic(w) and (why := implausible(w, obs.window_s))}
