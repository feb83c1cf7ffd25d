"""Why pods do not run: serving pods the scheduler left Pending as Unschedulable (no node has the GPUs),
read off their PodScheduled condition, for the Tuning condition and an Event that name what is missing."""

from __future__ import annotations

from typing import Any

from specpilot.display import bounded, printable, some_of
from specpilot.api.names import TRACK_LABEL

INSUFFICIENT_CAPACITY = "InsufficientCapacity"
# Characters of one scheduler message kept (they are a line long; a webhook's or a plugin's may not be).
MAX_WHY = 512


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
    """One line naming the waiting pods by track and the scheduler's reason (a few names per reason), and
    what follows: the canary is rolled back at progressDeadline and the stable track is left as it is."""
    by_why: dict[tuple[str, str], list[str]] = {}
    for track, name, why in pending:
        by_why.setdefault((track, bounded(printable(why), MAX_WHY)), []).append(name)
    # Pods of one track usually wait for the same reason: it is said once, with some of their names.
    parts = [f"{track} pod{'s' if len(names) > 1 else ''} {some_of(names)} cannot be scheduled: {why}"
             for (track, why), names in by_why.items()]
    return "; ".join(parts) + ("; the canary is rolled back at progressDeadline, the stable track is untouched"
                               if any(t == "canary" for t, _, _ in pending) else
                               "; free GPUs, or use tuning.canary.mode replace")
