"""The serving container's CPU and memory: defaults per accelerator profile, and the pod's QoS class.

Without CPU or memory requests a pod is BestEffort: the first the kubelet evicts under node pressure, and
its processes get the smallest CPU share, so vLLM's engine core (a busy loop: the scheduler) and the API
server (HTTP, tokenisation) can be starved by any neighbour. So every serving container requests CPU and
memory (Burstable), and when the user limits both, requests equal limits (Guaranteed).

Where the numbers come from:
- CPU: vLLM's own floor, "CPU Resources for GPU Deployments" in vLLM's docs (docs.vllm.ai,
  configuration/optimization; vllm-project/vllm#33940): one API-server process, one engine-core process
  and one worker per GPU each want a core, so 2 + GPUs cores; fewer "significantly degrade throughput and
  latency".
- Memory: host memory per GPU, chosen by hand per profile (no benchmark split): the worker's Python and
  PyTorch runtime, pinned staging buffers and the safetensors shards read through host memory while the
  weights load grow with the device memory to fill, so AMD Instinct (MI300X 192 GB, MI325X 256 GB of
  HBM) gets twice NVIDIA's (H100 80 GB, H200 141 GB); plus a fixed share for the API server and engine core.
`spec.engine.resources` overrides any of them (docs/api.md, "Resources").
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The resources Kubernetes' QoS classes are computed from.
QOS_RESOURCES = ("cpu", "memory")


@dataclass(frozen=True)
class Profile:
    """Default requests of one accelerator vendor's serving container."""

    base_cpu: int  # cores for the API server and the engine core
    cpu_per_gpu: int  # a worker process per GPU
    base_memory_gi: int  # GiB for the API server and the engine core
    memory_per_gpu_gi: int  # GiB per GPU worker


PROFILES: Mapping[str, Profile] = {
    "amd": Profile(base_cpu=2, cpu_per_gpu=1, base_memory_gi=8, memory_per_gpu_gi=32),
    "nvidia": Profile(base_cpu=2, cpu_per_gpu=1, base_memory_gi=8, memory_per_gpu_gi=16),
}


def default_requests(vendor: str, gpus: int) -> dict[str, str]:
    """CPU and memory a serving container of `vendor` with `gpus` GPUs requests unless the user says."""
    if vendor not in PROFILES:
        raise ValueError(f"spec.accelerator.vendor: {vendor!r} has no resource profile, allowed: "
                         f"{', '.join(PROFILES)}")
    if gpus < 1:
        raise ValueError(f"spec.accelerator.count: {gpus} GPUs, allowed: 1 or more")
    p = PROFILES[vendor]
    return {"cpu": str(p.base_cpu + p.cpu_per_gpu * gpus),
            "memory": f"{p.base_memory_gi + p.memory_per_gpu_gi * gpus}Gi"}


def container_resources(user: Mapping[str, Any], vendor: str, gpus: int, gpu_resource: str) -> dict[str, Any]:
    """The vLLM container's resources: the user's, the GPU limit from the accelerator, and CPU and memory
    requests: the user's when set, else the user's limit of that resource (so limiting both makes the pod
    Guaranteed), else the profile's default (Burstable)."""
    out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in user.items()}
    limits = out.setdefault("limits", {})
    limits[gpu_resource] = str(gpus)  # a quantity, as the API stores it
    requests = out.setdefault("requests", {})
    for name, default in default_requests(vendor, gpus).items():
        if name not in requests:
            requests[name] = limits.get(name, default)
    return out


def guaranteed(resources: Mapping[str, Any]) -> bool:
    """Whether a container with `resources` qualifies for the Guaranteed QoS class: CPU and memory limited,
    and requested exactly as limited (Kubernetes compares the quantities; render writes them alike)."""
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    return all(name in limits and requests.get(name, limits[name]) == limits[name] for name in QOS_RESOURCES)


def as_guaranteed(resources: Mapping[str, Any]) -> dict[str, Any]:
    """A helper container's `resources` raised to Guaranteed (every container must be, for the pod to be):
    each of CPU and memory requested and limited at its limit, or its request where it has none."""
    requests, limits = dict(resources.get("requests") or {}), dict(resources.get("limits") or {})
    for name in QOS_RESOURCES:
        value = limits.get(name, requests.get(name))
        if value is None:
            raise ValueError(f"resources.{name}: neither requested nor limited, so it cannot be Guaranteed")
        requests[name] = limits[name] = value
    return {"requests": requests, "limits": limits}
