"""The sandbox's scheduler: per-node allocatable GPUs (extended resources), so a cluster without spare GPUs
leaves pods Pending as kube-scheduler does, with its message: "0/2 nodes are available: 2 Insufficient
amd.com/gpu." Only extended resources (names with a '/') are counted; CPU and memory always fit."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from specpilot.api.models import GPU_RESOURCES

# Nodes advertise every vendor's GPUs the API knows, so a pod of either vendor can be placed.
DEFAULT_GPU_RESOURCES = tuple(sorted(GPU_RESOURCES.values()))


@dataclass(frozen=True)
class Node:
    name: str
    allocatable: dict[str, int] = field(default_factory=dict)


def gpu_nodes(count: int, gpus_per_node: int, resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES) -> list[Node]:
    """`count` nodes named sandbox-1.., each advertising `gpus_per_node` of every resource in `resources`."""
    return [Node(f"sandbox-{i + 1}", {r: gpus_per_node for r in resources}) for i in range(count)]


def requests(pod: dict[str, Any]) -> Counter[str]:
    """Extended resources the pod asks for: each container's limit (extended resources need one), else its
    request, summed over containers."""
    total: Counter[str] = Counter()
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for name, value in {**(res.get("requests") or {}), **(res.get("limits") or {})}.items():
            if "/" in name:
                total[name] += int(value)
    return total


def usage(pods: Iterable[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Resources held per node by pods bound to it; a terminating pod holds them until it is gone."""
    used: dict[str, Counter[str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            used.setdefault(node, Counter()).update(requests(pod))
    return used


def _missing(node: Node, want: Counter[str], used: Counter[str]) -> list[str]:
    return [r for r, n in sorted(want.items()) if node.allocatable.get(r, 0) - used.get(r, 0) < n]


def place(pod: dict[str, Any], nodes: list[Node], used: dict[str, Counter[str]]) -> tuple[str | None, str]:
    """(the node the pod fits on, ""), the fullest that fits (GPU bin packing); or (None, the scheduler's
    message). Updates `used` when placed."""
    want = requests(pod)
    fits = [n for n in nodes if not _missing(n, want, used.get(n.name, Counter()))]
    if fits:
        best = max(fits, key=lambda n: (sum(used.get(n.name, Counter()).values()), -nodes.index(n)))
        used.setdefault(best.name, Counter()).update(want)
        return best.name, ""
    reasons: Counter[str] = Counter()
    for n in nodes:
        reasons.update(f"Insufficient {r}" for r in _missing(n, want, used.get(n.name, Counter())))
    detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return None, f"0/{len(nodes)} nodes are available: {detail}."
