"""The deployment controller's rolling update, by maxSurge and maxUnavailable: how far the new
ReplicaSet may grow and the old ones shrink in one pass. maxSurge 0 with maxUnavailable 1 rolls without
ever needing a spare node's worth of GPUs (one old pod goes before its replacement starts)."""

from __future__ import annotations

import math
from typing import Any

DEFAULT_BOUND = "25%"


def _bound(value: Any, desired: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        share = desired * float(value[:-1]) / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def surge_and_unavailable(strategy: dict[str, Any], desired: int) -> tuple[int, int]:
    rolling = strategy.get("rollingUpdate") or {}
    surge = _bound(rolling.get("maxSurge", DEFAULT_BOUND), desired, True)
    unavailable = _bound(rolling.get("maxUnavailable", DEFAULT_BOUND), desired, False)
    # Both zero would never progress; the API server refuses it, the controller would use 1.
    return surge, unavailable if surge or unavailable else 1


def rolling_sizes(desired: int, strategy: dict[str, Any], new: tuple[int, int],
                  olds: list[tuple[int, int]]) -> tuple[int, list[int]]:
    """(new ReplicaSet size, old ReplicaSet sizes, oldest first) from (replicas, ready) of each."""
    surge, unavailable = surge_and_unavailable(strategy, desired)
    old_total = sum(r for r, _ in olds)
    new_size = min(desired, max(new[0], desired + surge - old_total)) if new[0] < desired else desired
    # Old pods may go while desired - maxUnavailable stay available (a new pod not yet ready is not);
    # old pods that are not ready go first.
    new_unavailable = new_size - min(new[1], new_size)
    budget = max(0, new_size + old_total - (desired - unavailable) - new_unavailable)
    sizes = []
    for replicas, ready in olds:
        unhealthy = min(replicas - min(ready, replicas), budget)
        healthy = min(replicas - unhealthy, budget - unhealthy)
        budget -= unhealthy + healthy
        sizes.append(replicas - unhealthy - healthy)
    return new_size, sizes
