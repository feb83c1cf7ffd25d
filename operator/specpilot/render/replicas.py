"""How many pods each track runs and how the Deployments roll, per tuning.canary.mode.

surge: the canary's pods come on top of the stable ones and a rollout starts a new pod before an old one
stops (spare GPUs needed). replace: while a canary runs the stable track gives up canary.replicas pods, and
every rollout stops an old pod before starting its replacement, so the GPU count never grows (the CRD
requires replicas >= canary.replicas + 1, so a stable pod always serves). auto, the default, is replace
wherever that holds: GPUs to spare are rare, and a canary is then measured at the load it will serve."""

from __future__ import annotations

from typing import Any

from ..api.models import SpeculativeDeployment, canary_pods
from ..api.names import Track

SURGE = {"maxSurge": 1, "maxUnavailable": 0}  # a new pod must be Ready before an old one stops
NO_SURGE = {"maxSurge": 0, "maxUnavailable": 1}  # an old pod stops first: no spare GPU needed


def replacing(sd: SpeculativeDeployment) -> bool:
    canary = sd.spec.tuning.canary
    return sd.spec.tuning.enabled and canary_pods(canary.mode, sd.spec.replicas, canary.replicas) == "replace"


def placement(sd: SpeculativeDeployment) -> str:
    """Where a canary's pods come from, for its Event: a user who left tuning.canary.mode at auto sees which
    it became."""
    canary = sd.spec.tuning.canary
    pods = f"{canary.replicas} pod{'s' if canary.replicas > 1 else ''}"
    if replacing(sd):
        return f"{pods} in place of {canary.replicas} of the {sd.spec.replicas} stable (canary.mode {canary.mode})"
    return f"{pods} beside the {sd.spec.replicas} stable (canary.mode {canary.mode})"


def track_replicas(sd: SpeculativeDeployment, track: Track, canary_running: bool) -> int:
    canary = sd.spec.tuning.canary.replicas
    if track == "canary":
        return canary
    if canary_running and replacing(sd):
        return max(sd.spec.replicas - canary, 1)
    return sd.spec.replicas


def strategy(sd: SpeculativeDeployment) -> dict[str, Any]:
    return {"type": "RollingUpdate", "rollingUpdate": dict(NO_SURGE if replacing(sd) else SURGE)}
