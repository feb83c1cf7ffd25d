"""The harness's kubelet: fake GPU nodes on a real control plane, and the pods kube-scheduler binds to them.

Nodes are Node objects with GPU capacity (`amd.com/gpu` or `nvidia.com/gpu`), kept alive by renewing their
Lease in kube-node-lease, as a kubelet does, so kube-controller-manager's node lifecycle controller keeps them
Ready. For each pod bound to one of them, the agent does the kubelet's part: an address (addresses.py), the
pod's ConfigMap and Secret volumes and its owners read from the API, its containers started by a PodRuntime
(the sandbox's: simulated engines, real processes, or nothing), its readiness polled, a failed start retried
with the kubelet's back-off under restartPolicy Always, pod status written (podIP, conditions,
containerStatuses, restart counts), the ConfigMap and Secret volumes of running pods re-synced when those
objects change (volumes.py: the runtime's `update_files`, no restart). A graceful delete runs the runtime's
`terminate` (preStop, SIGTERM) within the pod's grace period, then `stop`, then removes the pod object, as the
kubelet does.

What stays emulated, and why: there is no container runtime here (the PodRuntime runs what it can as local
processes or in-process engines), and liveness probes are not run (the runtimes' engines do not hang).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import httpx

from specpilot_harness.nodes.addresses import AddressPool
from specpilot_harness.nodes.api import Api, ApiError, Credentials
from specpilot_harness.nodes.volumes import (VolumeSources, mounted_files, optional_volumes, source_data,
                                               volume_sources)
from specpilot_harness.sandbox.pod_runtime import NoopRuntime, PodContext, PodRuntime

log = logging.getLogger(__name__)

LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
RESTART_BACKOFF_S = (10.0, 300.0)  # the kubelet's crash-loop back-off: first wait, cap
# How often the ConfigMap and Secret volumes of running pods are brought up to date. A real kubelet does it on
# its periodic pod sync (--sync-frequency, 1 min, plus jitter) from its watch of those objects, so an update
# reaches a pod within about 60-90 s; the sandbox is quicker so tests need not wait that long. Nothing may
# depend on either: a pod sees a new ConfigMap some time later, never at once.
VOLUME_SYNC_S = 2.0
PLURALS = {"ReplicaSet": "replicasets", "Deployment": "deployments", "StatefulSet": "statefulsets",
           "SpeculativeDeployment": "speculativedeployments"}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpus: dict[str, int] = field(default_factory=lambda: {"amd.com/gpu": 8})  # extended resource -> count
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110


@dataclass
class _Pod:
    uid: str
    ctx: PodContext
    task: asyncio.Task[None] | None = None
    restarts: int = 0
    terminating: bool = False
    started: bool = False  # the runtime started it: its files can be re-synced
    synced: int = -1  # VolumeSources.version its files were last compared at
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)


class NodeAgent:
    def __init__(self, creds: Credentials, nodes: list[NodeSpec], runtime: PodRuntime | None = None,
                 probe_period_s: float = 1.0, restart_backoff_s: tuple[float, float] = RESTART_BACKOFF_S,
                 volume_sync_s: float = VOLUME_SYNC_S) -> None:
        self.api = Api(creds)
        self.nodes = {n.name: n for n in nodes}
        self.runtime: PodRuntime = runtime or NoopRuntime()
        self.probe_period_s, self.restart_backoff_s = probe_period_s, restart_backoff_s
        self.volume_sync_s = volume_sync_s
        self.volumes = VolumeSources()
        self.addresses = AddressPool()
        self._pods: dict[str, _Pod] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for spec in self.nodes.values():
            await self._register(spec)
        self._tasks = [asyncio.create_task(self._heartbeat(), name="node-heartbeat"),
                       asyncio.create_task(self._watch_pods(), name="node-pods"),
                       asyncio.create_task(self._provision(), name="node-volumes"),
                       asyncio.create_task(self._watch_sources("configmaps"), name="node-configmaps"),
                       asyncio.create_task(self._watch_sources("secrets"), name="node-secrets"),
                       asyncio.create_task(self._resync_volumes(), name="node-volume-sync")]
        for task in self._tasks:
            task.add_done_callback(_said_if_failed)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # All at once, as a node's kubelet stops its pods: one after the other, a run's real vLLM pods took
        # seconds each to exit (48 s for the e2e sweep's eight).
        pods = list(self._pods.values())
        for pod, stopped in zip(pods, await asyncio.gather(*(self._forget(p) for p in pods), return_exceptions=True)):
            if isinstance(stopped, Exception):
                log.warning("pod %s/%s: not stopped cleanly: %s", pod.ctx.namespace, pod.ctx.name, stopped)
        self.addresses.close()
        await self.api.close()

    # ---- nodes -----------------------------------------------------------------------------------

    def _node_status(self, spec: NodeSpec) -> dict[str, Any]:
        capacity = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.pods),
                    **{resource: str(count) for resource, count in spec.gpus.items()}}
        stamp = _now()
        return {"capacity": capacity, "allocatable": capacity,
                "addresses": [{"type": "InternalIP", "address": self.addresses.node_address},
                              {"type": "Hostname", "address": spec.name}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "specpilot node agent is posting ready status",
                                "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}],
                "nodeInfo": {"kubeletVersion": "v1.36.3-specpilot", "containerRuntimeVersion": "specpilot://harness",
                             "operatingSystem": "linux", "architecture": "amd64", "osImage": "", "kernelVersion": "",
                             "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": ""}}

    async def _register(self, spec: NodeSpec) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": spec.name, "labels": {"kubernetes.io/hostname": spec.name,
                                                           "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                                           "specpilot.io/harness-node": "true"}}}
        if await self.api.get(f"/api/v1/nodes/{spec.name}") is None:
            await self.api.create("/api/v1/nodes", body)
        await self.api.merge_patch(f"/api/v1/nodes/{spec.name}/status", {"status": self._node_status(spec)})
        await self._renew(spec.name)

    async def _renew(self, name: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": _micro_now()}
        try:
            await self.api.merge_patch(path, {"spec": spec})
        except ApiError as exc:
            if exc.status != 404:
                raise
            await self.api.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                                  {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                   "metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": spec})

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(LEASE_RENEW_S)
            for spec in self.nodes.values():
                try:
                    await self._renew(spec.name)
                    await self.api.merge_patch(f"/api/v1/nodes/{spec.name}/status",
                                               {"status": {"conditions": self._node_status(spec)["conditions"]}})
                except Exception as exc:  # the API server may be restarting: the next beat tries again
                    log.info("node %s heartbeat failed: %s", spec.name, exc)

    # ---- volumes ---------------------------------------------------------------------------------

    async def _provision(self) -> None:
        """A volume for every claim that waits for one, as a cluster's local-path provisioner makes them: a
        PersistentVolume pre-bound to the claim (kube-controller-manager binds the pair; the scheduler refuses
        pods whose claims are unbound). What backs it is the PodRuntime's business (exec_pods.py: a directory
        per claim)."""
        async for event, claim in self.api.watch("/api/v1/persistentvolumeclaims"):
            meta, spec = claim.get("metadata") or {}, claim.get("spec") or {}
            if event == "DELETED" or spec.get("volumeName") or spec.get("storageClassName"):
                continue
            volume = {"apiVersion": "v1", "kind": "PersistentVolume",
                      "metadata": {"name": f"pvc-{meta.get('uid', '')}", "labels": {"specpilot.io/harness-volume": "true"}},
                      "spec": {"capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {})
                                            .get("storage", "1Gi")},
                               "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                               "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                               "hostPath": {"path": f"/var/lib/specpilot-harness/{meta.get('uid', '')}"},
                               "claimRef": {"namespace": meta.get("namespace"), "name": meta.get("name"),
                                            "uid": meta.get("uid")}}}
            try:
                await self.api.create("/api/v1/persistentvolumes", volume)
            except ApiError as exc:
                if exc.status != 409:  # made already
                    log.info("no volume for claim %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)

    async def _watch_sources(self, kind: str) -> None:
        """ConfigMaps or Secrets, as the kubelet watches what its pods mount."""
        async for event, obj in self.api.watch(f"/api/v1/{kind}"):
            self.volumes.observe(kind, event, obj)

    async def _resync_volumes(self) -> None:
        """Every VOLUME_SYNC_S, running pods whose mounted objects changed get the new files."""
        while True:
            await asyncio.sleep(self.volume_sync_s)
            version = self.volumes.version
            for pod in list(self._pods.values()):
                if not pod.started or pod.terminating or pod.synced == version:
                    continue
                try:
                    await self._resync(pod)
                    pod.synced = version
                except Exception:  # the next period tries again
                    log.exception("volumes of pod %s not re-synced", pod.ctx.name)

    async def _resync(self, pod: _Pod) -> None:
        files = self.volumes.files_for(pod.ctx.pod, pod.ctx.files)
        if files is None or files == pod.ctx.files:
            return
        changed = sorted(p for p in files.keys() | pod.ctx.files.keys() if files.get(p) != pod.ctx.files.get(p))
        ctx = replace(pod.ctx, files=files)
        update = getattr(self.runtime, "update_files", None)
        if update is not None:
            await update(ctx)
        pod.ctx = ctx
        log.info("pod %s: volumes re-synced: %s", ctx.name, ", ".join(changed))

    # ---- pods ------------------------------------------------------------------------------------

    async def _watch_pods(self) -> None:
        async for event, pod in self.api.watch("/api/v1/pods"):
            try:
                await self._on_pod(event, pod)
            except Exception:
                log.exception("pod event %s %s", event, (pod.get("metadata") or {}).get("name"))

    async def _on_pod(self, event: str, pod: dict[str, Any]) -> None:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        uid = meta.get("uid", "")
        if spec.get("nodeName") not in self.nodes:
            return
        known = self._pods.get(uid)
        if event == "DELETED":
            if known is not None:
                await self._forget(known)
            return
        if meta.get("deletionTimestamp"):
            if known is None:
                await self.api.delete(_path(pod), {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
            elif not known.terminating:
                known.terminating = True
                if known.task is not None:
                    known.task.cancel()
                known.task = asyncio.create_task(self._terminate(known, pod))
            return
        if known is None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            # Set up in a task of its own: the watch must not wait on one pod's reads (a thousand pods
            # bound at once would start one after another).
            known = self._pods[uid] = _Pod(uid, PodContext(pod, "", {}))
            known.task = asyncio.create_task(self._setup_and_run(known, pod), name=f"pod {meta.get('name')}")
            known.task.add_done_callback(_said_if_failed)

    async def _setup_and_run(self, pod: _Pod, live: dict[str, Any]) -> None:
        """The pod's address, volumes and owners, then its containers. As a kubelet, no container starts while
        a volume's ConfigMap or Secret is missing (unless the volume is optional): the pod stays
        ContainerCreating, saying which, and the mount is tried again until the object exists."""
        pod.ctx = PodContext(live, await asyncio.to_thread(self.addresses.take), {})
        said = ""
        while True:
            try:
                files, missing = await self._files(live)
                owners = await self._owners(live)
            except (ApiError, httpx.HTTPError) as exc:  # the kubelet's next pod sync tries again
                log.info("pod %s/%s: set-up read failed, retrying: %s", pod.ctx.namespace, pod.ctx.name, exc)
                await asyncio.sleep(self.volume_sync_s)
                continue
            if not missing:
                break
            message = "MountVolume.SetUp failed: " + "; ".join(missing)
            if message != said and await self._status(pod, "Pending", False, waiting=("ContainerCreating", message)):
                said = message  # written when it changes, not every attempt
            await asyncio.sleep(self.volume_sync_s)
        pod.ctx = PodContext(live, pod.ctx.ip, files, owners)
        await self._run(pod)

    async def _run(self, pod: _Pod) -> None:
        backoff = self.restart_backoff_s[0]
        while True:
            await self._status(pod, "Pending", False, waiting=("ContainerCreating", ""))
            try:
                await self.runtime.start(pod.ctx)
                pod.started = True
            except Exception as exc:  # a container that exits at start
                log.warning("pod %s failed to start: %s", pod.ctx.name, exc)
                if (pod.ctx.pod.get("spec") or {}).get("restartPolicy", "Always") == "Never":
                    # Nothing writes this pod's status after this one: written until the server takes it.
                    while not await self._status(pod, "Failed", False, waiting=("Error", str(exc))):
                        await asyncio.sleep(self.probe_period_s)
                    return
                await self._status(pod, "Running", False, waiting=("CrashLoopBackOff", str(exc)))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.restart_backoff_s[1])
                pod.restarts += 1
                continue
            break
        ready: bool | None = None  # as the API server last took it
        while True:
            now_ready = await self.runtime.ready(pod.ctx)
            # A write the server did not take is made again at the next probe, as the kubelet's status
            # manager does: a pod must not stay unready in the API because one write failed.
            if now_ready != ready and await self._status(pod, "Running", now_ready):
                ready = now_ready
                log.info("pod %s/%s: running, %s", pod.ctx.namespace, pod.ctx.name, "ready" if ready else "not ready")
            await asyncio.sleep(self.probe_period_s)

    async def _terminate(self, pod: _Pod, live: dict[str, Any]) -> None:
        """Not Ready at once (the pod leaves the endpoints), preStop and SIGTERM within the grace period, then
        stopped, and the pod object removed."""
        grace = float(live["metadata"].get("deletionGracePeriodSeconds") or 0)
        started = time.monotonic()
        try:
            await self._status(pod, "Running", False)
            terminate = getattr(self.runtime, "terminate", None)
            if terminate is not None:
                await asyncio.wait_for(terminate(pod.ctx), max(0.0, grace - (time.monotonic() - started)))
        except (TimeoutError, ApiError):
            log.info("pod %s did not stop within its %g s grace period: killed", pod.ctx.name, grace)
        finally:
            await self._forget(pod)
        await self.api.delete(_path(live), {"gracePeriodSeconds": 0, "preconditions": {"uid": pod.uid}})

    async def _forget(self, pod: _Pod) -> None:
        if self._pods.pop(pod.uid, None) is None:
            return
        if pod.task is not None and pod.task is not asyncio.current_task():
            pod.task.cancel()
        if not pod.ctx.ip:
            return  # still being set up: nothing started, no address taken yet
        try:
            await self.runtime.stop(pod.ctx)
        finally:
            await asyncio.to_thread(self.addresses.give, pod.ctx.ip)

    async def _status(self, pod: _Pod, phase: str, ready: bool, waiting: tuple[str, str] | None = None) -> bool:
        """Writes the pod's status; False when the server did not take it (the pod gone counts as taken)."""
        stamp = _now()

        def cond(ctype: str, value: bool) -> dict[str, Any]:
            status = "True" if value else "False"
            old = pod.conditions.get(ctype)
            kept = old if old is not None and old["status"] == status else {
                "type": ctype, "status": status, "lastTransitionTime": stamp}
            pod.conditions[ctype] = kept
            return kept

        running = phase == "Running" and waiting is None
        state: dict[str, Any] = {"running": {"startedAt": stamp}} if running else \
            {"waiting": {"reason": waiting[0], "message": waiting[1][:1000]}} if waiting else {"waiting": {}}
        spec = pod.ctx.pod.get("spec") or {}
        containers = [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "",
                       "ready": ready and running, "restartCount": pod.restarts, "started": running, "state": state}
                      for c in spec.get("containers") or []]
        status = {"phase": phase, "hostIP": self.addresses.node_address, "podIP": pod.ctx.ip,
                  "hostIPs": [{"ip": self.addresses.node_address}], "podIPs": [{"ip": pod.ctx.ip}],
                  "startTime": (pod.ctx.pod.get("status") or {}).get("startTime") or stamp,
                  "conditions": [cond("PodScheduled", True), cond("Initialized", True),
                                 cond("ContainersReady", ready and running), cond("Ready", ready and running)],
                  "containerStatuses": containers}
        try:
            await self.api.merge_patch(_path(pod.ctx.pod) + "/status", {"status": status})
        except ApiError as exc:
            if exc.status != 404:
                log.info("status of pod %s not written: %s", pod.ctx.name, exc)
                return False
        except httpx.HTTPError as exc:  # a timeout or a dropped connection: the server is busy or restarting
            log.info("status of pod %s not written: %r", pod.ctx.name, exc)
            return False
        return True

    async def _files(self, pod: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
        """ConfigMap and Secret volumes as the containers would see them, and the required ones whose object is
        missing (as the kubelet says it): from the watches, the API asked for what they have not delivered yet
        (a pod made with its ConfigMap)."""
        sources: dict[str, dict[str, str]] = {}
        missing: list[str] = []
        optional = optional_volumes(pod)
        for name, (kind, ns, obj_name) in volume_sources(pod).items():
            data = self.volumes.objects.get((kind, ns, obj_name))
            if data is None:
                obj = await self.api.get(f"/api/v1/namespaces/{ns}/{kind}/{obj_name}", cached=True)
                if obj is None and name not in optional:
                    missing.append(f'volume "{name}": {kind[:-1]} "{obj_name}" not found')
                data = source_data(kind, obj)
            sources[name] = data
        return mounted_files(pod, sources), missing

    async def _owners(self, obj: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        """`obj`'s chain of controller owners as the API server holds them, nearest first."""
        chain: list[dict[str, Any]] = []
        ns = obj["metadata"].get("namespace", "")
        seen = {obj["metadata"].get("uid")}
        while True:
            ref = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if not ref or ref.get("uid") in seen or ref.get("kind") not in PLURALS:
                return tuple(chain)
            version = ref.get("apiVersion", "")
            base = f"/apis/{version}" if "/" in version else f"/api/{version}"
            path = f"{base}/namespaces/{ns}/{PLURALS[ref['kind']]}/{ref.get('name', '')}"
            owner = await self.api.get(path, cached=True)
            if owner is not None and owner["metadata"].get("uid") != ref.get("uid"):
                owner = await self.api.get(path)  # the cache may still hold an earlier object of that name
            if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
                return tuple(chain)
            chain.append(owner)
            seen.add(ref["uid"])
            obj = owner


def _path(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


def _said_if_failed(task: asyncio.Task[None]) -> None:
    """A loop of the node that ended on an error leaves the node deaf to it, and a pod's that did leaves the
    pod as it was: say so, loudly, once."""
    if not task.cancelled() and task.exception() is not None:
        log.error("node task %s ended: %r; the node no longer follows it", task.get_name(), task.exception())
