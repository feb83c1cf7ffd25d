"""Which listed pods are a SpeculativeDeployment's own: those whose owner chain leads to it (pod -> ReplicaSet ->
Deployment -> SpeculativeDeployment, by uid). Labels are anyone's to set; a pod that merely carries the labels
is a stranger, whose counters must not steer the tuner and whose failures must not stall it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True and isinstance(ref.get("uid"), str):
            return str(ref["uid"])
    return None


def owned_pods(pods: list[dict[str, Any]], replicasets: list[dict[str, Any]],
               deployments: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(own pods, strangers): `deployments` are the object's own (owned by its uid, as the reconciler knows
    them); a pod is its own when its controller is a ReplicaSet whose controller is one of them."""
    deployment_uids = {(d.get("metadata") or {}).get("uid") for d in deployments} - {None}
    replicaset_uids = {(rs.get("metadata") or {}).get("uid") for rs in replicasets
                       if _controller_uid(rs) in deployment_uids} - {None}
    own: list[dict[str, Any]] = []
    strangers: list[dict[str, Any]] = []
    for pod in pods:
        (own if _controller_uid(pod) in replicaset_uids else strangers).append(pod)
    return own, strangers


def _uid(obj: dict[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("uid")


@dataclass
class StrangerNotice:
    """Which strangers to name in a Warning, once each: only one seen in two windows running, since a pod
    listed a moment before its new ReplicaSet or Deployment reaches the lists (a canary just created) is the
    object's own by the next window."""

    suspects: set[Any] = field(default_factory=set)  # uids of strangers in the last window
    named: set[Any] = field(default_factory=set)  # uids already named, while they are still around

    def to_name(self, strangers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        uids = {_uid(p) for p in strangers}
        # A terminating pod is on its way out: a rolled-back canary's, draining after its ReplicaSet went.
        new = [p for p in strangers if _uid(p) in self.suspects and _uid(p) not in self.named
               and not (p.get("metadata") or {}).get("deletionTimestamp")]
        self.suspects = uids
        self.named = (self.named | {_uid(p) for p in new}) & uids
        return new
