"""What runs behind each pod of the sandbox's nodes: the PodRuntime seam the node agent
(harness/specpilot_harness/nodes/agent.py) calls, with what it knows of the pod (PodContext).

`start` is called once per pod with a PodContext (its IP: bind the container ports there; the files its
ConfigMap/Secret volumes mount; its owners), `ready` is polled every probe period and drives the pod's Ready
condition, `stop` is called when the pod goes away; `update_files`, where a runtime has it, when the pod's
ConfigMap or Secret volumes changed while it runs (the kubelet's volume re-sync: no restart). Runtimes:
NoopRuntime (below), the simulated engines (sim_pods.py), the pods' real containers (exec_pods.py).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class PodContext:
    """What a PodRuntime gets about one pod, as a kubelet would see it."""

    pod: dict[str, Any]
    ip: str
    # Files the pod's containers see from ConfigMap and Secret volumes: absolute path -> content.
    files: dict[str, str]
    # The pod's controllers, nearest first (ReplicaSet, Deployment, SpeculativeDeployment): a simulated
    # engine reads its workload off the object that owns the pod, so nothing is copied onto real pods.
    owners: tuple[dict[str, Any], ...] = ()

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"]["namespace"])

    def ports(self) -> dict[str, int]:
        """Container ports by name (unnamed ones as "port-<number>")."""
        return {p.get("name") or f"port-{p['containerPort']}": int(p["containerPort"])
                for c in (self.pod.get("spec") or {}).get("containers") or [] for p in c.get("ports") or []}


class PodRuntime(Protocol):
    """What runs behind each sandbox pod."""

    async def start(self, ctx: PodContext) -> None:
        """Start the pod's process(es), bound to ctx.ip and its container ports. Raising fails the pod."""

    async def ready(self, ctx: PodContext) -> bool:
        """Whether the pod is Ready now (its readiness probe); polled every probe period."""

    async def stop(self, ctx: PodContext) -> None:
        """Stop what `start` started; the pod is gone."""

    # Optional, looked up with getattr: `async def terminate(self, ctx) -> None`, a graceful delete: the
    # containers' preStop hooks (`pre_stop_sleep`), then SIGTERM: stop taking new work and return once what
    # is in flight has finished. Awaited within the grace period; `stop` follows either way.
    # And `async def update_files(self, ctx) -> None`: ctx.files changed (a ConfigMap or Secret the pod mounts
    # was updated): show the containers the new contents without restarting them, each file replaced whole.


class NoopRuntime:
    """Runs nothing: every pod is Ready as soon as it has an address."""

    async def start(self, ctx: PodContext) -> None:
        return None

    async def ready(self, ctx: PodContext) -> bool:
        return True

    async def stop(self, ctx: PodContext) -> None:
        return None


def pre_stop_sleep(container: dict[str, Any]) -> float:
    """Seconds a container's preStop hook waits: the `sleep` action, or an exec of `sleep N` (what serving
    pods use), for runtimes that run no commands. Other hooks count as 0."""
    hook = ((container.get("lifecycle") or {}).get("preStop")) or {}
    if "sleep" in hook:
        return float(hook["sleep"].get("seconds", 0))
    command = (hook.get("exec") or {}).get("command") or []
    if len(command) == 2 and command[0] in ("sleep", "/bin/sleep", "/usr/bin/sleep"):
        try:
            return max(0.0, float(command[1]))
        except ValueError:
            return 0.0
    return 0.0


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` whole: a reader sees the old file or the new one, never half of it (a kubelet swaps a
    volume's `..data` symlink for the same reason)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the file from a container running as another user
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
