"""The SpeculativeDeployment's status, computed from what the controller observed (pure)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from specpilot.canary.tracks import TrackPlan
from specpilot.display import bounded

READY, PROGRESSING, SPEC_VALID, TUNING, DEGRADED = "Ready", "Progressing", "SpecValid", "Tuning", "Degraded"
PHASE_PENDING, PHASE_RUNNING, PHASE_TUNING = "Pending", "Running", "Tuning"
PHASE_DEGRADED, PHASE_INVALID, PHASE_PAUSED = "Degraded", "Invalid", "Paused"
# Characters of a condition's message (metav1.Condition allows 32768): enough for every reason the operator
# gives, while text it quotes (a pod's failure, the scheduler's words, a spec value) cannot grow the object.
MAX_MESSAGE = 4096
# Characters kept of the API server's refusal of a track's pods: its Pod Security message names every
# violation, which fits.
MAX_REFUSAL = 1024


def refusal(deployment: dict[str, Any] | None) -> str | None:
    """Why the API server refuses to create the Deployment's pods: its ReplicaFailure condition (which
    kube-controller-manager copies from the ReplicaSet when a pod create fails: Pod Security admission, a
    quota, a webhook), None when there is none."""
    status = (deployment or {}).get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, dict) and c.get("type") == "ReplicaFailure" and c.get("status") == "True":
            return bounded(str(c.get("message") or c.get("reason") or "pod creation failed"), MAX_REFUSAL)
    return None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(conditions: list[dict[str, Any]], ctype: str, status: str, reason: str, message: str,
                  generation: int | None) -> list[dict[str, Any]]:
    """`conditions` with `ctype` set; lastTransitionTime moves only when the status value changes."""
    old = next((c for c in conditions if c.get("type") == ctype), None)
    stamp = old.get("lastTransitionTime") if old and old.get("status") == status else _now()
    new = {"type": ctype, "status": status, "reason": reason, "message": bounded(message, MAX_MESSAGE),
           "lastTransitionTime": stamp, "observedGeneration": generation}
    return [c for c in conditions if c.get("type") != ctype] + [new] if old is None else \
        [new if c.get("type") == ctype else c for c in conditions]


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)


def condition_says(status: dict[str, Any], ctype: str, value: str, message: str) -> bool:
    """The condition already holds this value and message, as `set_condition` stores it (cut to
    MAX_MESSAGE): a Warning is posted once per new message, not once per reconcile of a long one."""
    was = condition(status, ctype) or {}
    return was.get("status") == value and was.get("message") == bounded(message, MAX_MESSAGE)


@dataclass(frozen=True)
class Rollout:
    """What the stable (and canary) Deployments report."""

    desired: int
    replicas: int
    ready: int
    updated: int
    complete: bool              # controller caught up, every pod is from the current template
    deadline_exceeded: bool     # the Deployment's Progressing condition says ProgressDeadlineExceeded
    stable_n: int | None
    canary_n: int | None
    refused: str | None = None  # why the API server refuses the stable's pods (refusal), None if it does not


def rollout_of(stable: dict[str, Any] | None, canary: dict[str, Any] | None, n_label: str) -> Rollout:
    def n_of(dep: dict[str, Any] | None) -> int | None:
        value = ((dep or {}).get("spec", {}).get("template", {}).get("metadata", {}).get("labels") or {}).get(n_label)
        return int(value) if value is not None and str(value).isascii() and str(value).isdigit() else None

    dep = stable or {}
    st, desired = dep.get("status") or {}, int((dep.get("spec") or {}).get("replicas", 0))
    caught_up = st.get("observedGeneration", 0) >= dep.get("metadata", {}).get("generation", 1)
    replicas, updated = st.get("replicas", 0), st.get("updatedReplicas", 0)
    progressing: dict[str, Any] = next((c for c in st.get("conditions") or [] if c.get("type") == "Progressing"), {})
    return Rollout(desired=desired, replicas=replicas, ready=st.get("readyReplicas", 0), updated=updated,
                   complete=bool(stable) and caught_up and updated == desired and replicas == desired,
                   deadline_exceeded=progressing.get("reason") == "ProgressDeadlineExceeded",
                   stable_n=n_of(stable), canary_n=n_of(canary), refused=refusal(stable))


def served(rollout: Rollout, plan: TrackPlan) -> Rollout:
    """The N the tracks serve: under switchback, the arms' (the pods' label is the N they were started at)."""
    if plan.live is None or rollout.stable_n is None:
        return rollout
    stable_k = plan.stable_n if plan.stable_n is not None else max(k for _, _, k in plan.live.arms[0].table)
    return dataclasses.replace(rollout, stable_n=stable_k,
                               canary_n=plan.canary_n if plan.canary_live else rollout.canary_n)


def live_status(rollout: Rollout, plan: TrackPlan) -> dict[str, Any]:
    """status.startedNumSpeculativeTokens and status.liveArms (None without switchback: the fields go)."""
    if plan.live is None:
        return {"startedNumSpeculativeTokens": None, "liveArms": None}
    return {"startedNumSpeculativeTokens": rollout.stable_n,
            "liveArms": " | ".join(arm.key.replace(",", " ") for arm in plan.live.arms)}


def running_status(old: dict[str, Any], generation: int, method: str, rollout: Rollout,
                   tuning_enabled: bool) -> dict[str, Any]:
    """Status after a successful reconcile. `tuning` and `acceptedLength` belong to the tuning loop
    and are left as they are; so is its Tuning condition while tuning is enabled."""
    conds = list(old.get("conditions") or [])
    serving = rollout.ready >= rollout.desired   # full capacity, whichever template the pods run
    ready = rollout.complete and serving
    was_ready = (condition(old, READY) or {}).get("status") == "True"
    # Lost pods outside any rollout (a rollout's own churn is Progressing, not Degraded), or a rollout
    # that stopped making progress.
    refused = rollout.refused is not None and not serving
    degraded = rollout.deadline_exceeded or refused or (was_ready and rollout.complete and not serving)
    if (condition(old, DEGRADED) or {}).get("status") == "True" and not ready:
        degraded = True  # stays degraded until every pod is back
    counts = f"{rollout.ready}/{rollout.desired} stable replicas ready"
    conds = set_condition(conds, SPEC_VALID, "True", "Valid", "spec passed validation", generation)
    conds = set_condition(conds, READY, "True" if ready else "False",
                          "AllReplicasReady" if ready else "ReplicasNotReady", counts, generation)
    conds = set_condition(conds, PROGRESSING, "False" if rollout.complete else "True",
                          "RolloutComplete" if rollout.complete else "RollingOut",
                          f"stable runs N={rollout.stable_n}" if rollout.complete
                          else f"stable rolling to N={rollout.stable_n}: {rollout.updated}/{rollout.desired} updated",
                          generation)
    conds = set_condition(conds, DEGRADED, "True" if degraded else "False",
                          "PodsRefused" if refused else
                          "ProgressDeadlineExceeded" if rollout.deadline_exceeded else
                          "ReplicasUnavailable" if degraded else "AsExpected",
                          f"{counts}; the API server refuses the pods: {rollout.refused}" if refused else counts,
                          generation)
    if not tuning_enabled:
        conds = set_condition(conds, TUNING, "False", "Disabled", "spec.tuning.enabled is false", generation)
    elif condition(old, TUNING) is None or (condition(old, TUNING) or {}).get("reason") == "Disabled":
        conds = set_condition(conds, TUNING, "Unknown", "Waiting", "tuning enabled; no round started yet",
                              generation)
    phase = PHASE_DEGRADED if degraded else PHASE_TUNING if serving and rollout.canary_n is not None \
        else PHASE_RUNNING if serving else PHASE_PENDING
    return {"observedGeneration": generation, "phase": phase, "conditions": conds, "method": method,
            "numSpeculativeTokens": rollout.stable_n, "canaryNumSpeculativeTokens": rollout.canary_n,
            "replicas": rollout.replicas, "readyReplicas": rollout.ready}


def invalid_status(old: dict[str, Any], generation: int, message: str) -> dict[str, Any]:
    """Only SpecValid and the phase change: what runs keeps running, and its numbers stay."""
    conds = set_condition(list(old.get("conditions") or []), SPEC_VALID, "False", "InvalidSpec", message,
                          generation)
    return {"observedGeneration": generation, "phase": PHASE_INVALID, "conditions": conds}


def paused_status(old: dict[str, Any], generation: int) -> dict[str, Any]:
    conds = set_condition(list(old.get("conditions") or []), PROGRESSING, "False", "Paused",
                          "specpilot.io/paused is \"true\": children are left as they are", generation)
    return {"phase": PHASE_PAUSED, "conditions": conds}


def changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(old.get(k) != v for k, v in new.items())
