"""Can the model cache's PersistentVolumeClaim serve every pod the deployment runs? (pure)

A ReadWriteOnce volume attaches to one node: a second replica, or a canary, scheduled on another node
waits in ContainerCreating for good (the attach fails). ReadWriteOncePod allows one pod at all. The claim
may not exist yet when the SpeculativeDeployment is applied, so this is a warning (the MODEL_CACHE
condition and an Event), checked at every reconcile, not a refusal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specpilot.api.models import SpeculativeDeployment

MODEL_CACHE = "ModelCache"  # condition type
HOSTNAME_LABEL = "kubernetes.io/hostname"
SHARED_MODES = ("ReadWriteMany", "ReadOnlyMany")


@dataclass(frozen=True)
class Finding:
    status: str  # condition status: True (fine), False (will not attach), Unknown (claim not there yet)
    reason: str
    message: str


def claim_path(namespace: str, claim: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}"


def pods_sharing(sd: SpeculativeDeployment) -> str | None:
    """Why more than one pod may mount the claim; None when only one ever does."""
    spec = sd.spec
    if spec.replicas > 1:
        return f"replicas is {spec.replicas}"
    if spec.tuning.enabled:
        return "tuning is on (a canary pod runs beside the stable one)"
    return None


def assess(sd: SpeculativeDeployment, claim: str, pvc: dict[str, Any] | None) -> Finding:
    """The claim against the pods that will mount it; call only when `pods_sharing` gave a reason."""
    sharing = pods_sharing(sd)
    if pvc is None:
        return Finding("Unknown", "ClaimNotFound", f"PersistentVolumeClaim {claim} not found yet; its access "
                                                   f"modes are checked again at the next reconcile")
    modes = list((pvc.get("spec") or {}).get("accessModes") or [])
    if not modes or any(m in SHARED_MODES for m in modes):
        return Finding("True", "Shareable", f"PersistentVolumeClaim {claim} is {', '.join(modes) or 'unrestricted'}")
    if "ReadWriteOncePod" in modes:
        return Finding("False", "ReadWriteOncePod",
                       f"PersistentVolumeClaim {claim} is ReadWriteOncePod but {sharing}: only one pod can mount "
                       f"it, the others never start. Fix: a ReadWriteMany claim, or replicas: 1 with tuning off")
    if HOSTNAME_LABEL in sd.spec.engine.node_selector:
        return Finding("True", "OneNode", f"PersistentVolumeClaim {claim} is ReadWriteOnce and every pod is pinned "
                                          f"to node {sd.spec.engine.node_selector[HOSTNAME_LABEL]}")
    return Finding("False", "ReadWriteOnce",
                   f"PersistentVolumeClaim {claim} is ReadWriteOnce but {sharing}: a pod scheduled on another "
                   f"node cannot attach it and stays in ContainerCreating. Fix: a ReadWriteMany claim, or "
                   f"replicas: 1 with tuning off, or pin the pods to one node (engine.nodeSelector "
                   f"{HOSTNAME_LABEL}: NODE)")
