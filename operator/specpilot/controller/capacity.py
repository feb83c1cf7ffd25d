"""Why pods do not run: serving pods the scheduler left Pending as Unschedulable (no node has the GPUs),
read off their PodScheduled condition, for the Tuning condition and an Event that name what is missing."""

from __future__ import annotations

from typing import Any

from specpilot.render.names import TRACK_LABEL

INSUFFICIENT_CAPACITY = "InsufficientCapacity"


def unschedulable(pods: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(track, pod name, the scheduler's message) of each pod Pending as Unschedulable."""
    out = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Pending" or pod["metadata"].get("deletionTimestamp"):
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                    and cond.get("reason") == "Unschedulable":
                track = (pod["metadata"].get("labels") or {}).get(TRACK_LABEL, "?")
                out.append((track, pod["metadata"]["name"], cond.get("message", "")))
    return sorted(out)


def capacity_message(pending: list[tuple[str, str, str]]) -> str:
    """One line naming each waiting pod, its track and the missing resource; the canary is rolled back at
    progressDeadline and the stable track is left as it is."""
    parts = [f"{track} pod {name} cannot be scheduled: {why}" for track, name, why in pending]
    return "; ".join(parts) + ("; the canary is rolled back at progressDeadline, the stable track is untouched"
                               if any(t == "canary" for t, _, _ in pending) else
                               "; free GPUs, or use tuning.canary.mode replace")
