"""The sandbox's stand-in for kube-controller-manager and the kubelet: Deployments get ReplicaSets by
pod-template hash and roll from one to the next; ReplicaSets get pods; pods get a 127.0.0.0/8 address,
run whatever the PodRuntime starts for them, and are Ready while it says so; Services get Endpoints and
EndpointSlices of their ready pods.

PodRuntime is the seam for simulated engines: `start` is called once per pod with a PodContext (its IP:
bind the container ports there; the files its ConfigMap/Secret volumes mount), `ready` is polled every
probe period and drives the pod's Ready condition, `stop` is called when the pod goes away.

A deleted pod terminates as the kubelet terminates it: it leaves the Service's endpoints at once (not
Ready, `terminating` in EndpointSlices), the runtime's optional `terminate` runs (preStop, SIGTERM, finish
what is in flight) within the grace period, then `stop`, and the pod object is removed."""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import json
import logging
import random
from typing import Any, Iterator

from specpilot_harness.sandbox.errors import ApiError
from specpilot_harness.sandbox.pod_runtime import NoopRuntime, PodContext, PodRuntime
from specpilot_harness.sandbox.pod_index import KEYS, Dirty, PodIndex
from specpilot_harness.sandbox.resources import ResourceType
from specpilot_harness.sandbox.rollout import rolling_sizes
from specpilot_harness.sandbox.scheduling import Node, place, usage
from specpilot_harness.sandbox.selectors import selector_from_match
from specpilot_harness.sandbox.store import Store, now

log = logging.getLogger(__name__)

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
NODE_NAME = "sandbox"
WATCHED_KINDS = {"Deployment", "ReplicaSet", "Pod", "Service"}
IP_RANGE = 254 * 254 * 200  # pod addresses 127.1.1.1 .. 127.200.254.254
DEADLINE_CHECK_S = 5.0
# A pass looks only at what changed; one over everything this often catches what no event reports
# (an Endpoints object deleted by hand).
FULL_PASS_S = 30.0
# Objects a pass handles between turns of the event loop (requests, watches, probes).
BREATHE_EVERY = 16


def template_hash(template: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return "".join(c for c in digest if c in "bcdfghjklmnpqrstvwxz2456789")[:10] or digest[:10]


def _owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _sizes(rs: dict[str, Any]) -> tuple[int, int]:
    """A ReplicaSet's (replicas, ready)."""
    return int(rs["spec"].get("replicas", 0)), int((rs.get("status") or {}).get("readyReplicas", 0))


def _is_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _slice_conditions(pod: dict[str, Any]) -> dict[str, bool]:
    """EndpointSlice conditions: a terminating pod is never `ready`, and is `serving` while its readiness
    holds (the sandbox's kubelet takes readiness away as termination starts)."""
    terminating = bool(pod["metadata"].get("deletionTimestamp"))
    return {"ready": _is_ready(pod) and not terminating, "serving": _is_ready(pod), "terminating": terminating}


async def _breathe(i: int) -> None:
    """Let the event loop serve requests every BREATHE_EVERY objects of a pass."""
    if i % BREATHE_EVERY == BREATHE_EVERY - 1:
        await asyncio.sleep(0)


class PodRunner:
    def __init__(self, store: Store, runtime: PodRuntime | None = None, probe_period_s: float = 1.0,
                 nodes: list[Node] | None = None) -> None:
        self.store = store
        # Nodes with allocatable GPUs, enforced when pods are bound; None: one node that fits every pod.
        self.nodes = nodes
        self.runtime: PodRuntime = runtime or NoopRuntime()
        self.probe_period_s = probe_period_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pods: dict[str, asyncio.Task[None]] = {}   # pod uid -> its lifecycle task
        self._ctx: dict[str, PodContext] = {}            # pod uid -> what its runtime was started with
        self._terminating: dict[str, asyncio.Task[None]] = {}  # pod uid -> its graceful termination
        # deployment uid -> (last rollout progress seen, loop time it was first seen)
        self._progress: dict[str, tuple[tuple[str, int, int, int], float]] = {}
        self._index = PodIndex()
        self._dirty = Dirty()
        self._unbound: set[str] = set()  # pods no node had room for: tried again every pass
        # Service -> the resourceVersions its Endpoints were last made from: unchanged, nothing to write.
        self._endpoints_of: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}
        self._members: dict[tuple[str, str], set[str]] = {}    # Service -> pod uids its Endpoints list
        self._member_of: dict[str, set[tuple[str, str]]] = {}  # and back
        self._last_full = self._last_deadlines = 0.0
        # Start at a random address: sandboxes running side by side (parallel test runs) would otherwise
        # hand out the same 127.x addresses, and a second pod runtime could not bind them.
        self._next_ip = random.randrange(IP_RANGE)
        reg = store.registry
        self._t = {k: reg.lookup(g, "v1", p) for k, g, p in (
            ("deploy", "apps", "deployments"), ("rs", "apps", "replicasets"), ("pod", "", "pods"),
            ("svc", "", "services"), ("ep", "", "endpoints"), ("slice", "discovery.k8s.io", "endpointslices"))}

    def _type(self, key: str) -> ResourceType:
        rtype = self._t[key]
        assert rtype is not None
        return rtype

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.store.graceful_pods = True
        self._register_node()
        for key in ("rs", "pod"):
            for obj in self.store.all_objects(self._type(key)):
                self._index.update(key, "ADDED", obj)
        self.store.listeners.append(self._on_change)
        self._task = asyncio.get_running_loop().create_task(self._loop())
        self._wake.set()

    def _register_node(self) -> None:
        """The nodes pods run on, Ready, so `kubectl get nodes` and describe show where pods are."""
        for spec in self.nodes or [Node(NODE_NAME)]:
            self._register(spec)

    def _register(self, spec: Node) -> None:
        node_type = self.store.registry.lookup("", "v1", "nodes")
        assert node_type is not None
        node = self.store.create(node_type, None, {"metadata": {"name": spec.name, "labels": {
            "kubernetes.io/hostname": spec.name, "kubernetes.io/os": "linux"}}})
        stamp = now()
        resources = {"capacity": {k: str(v) for k, v in spec.allocatable.items()},
                     "allocatable": {k: str(v) for k, v in spec.allocatable.items()}} if spec.allocatable else {}
        self.store.replace(node_type, None, spec.name, {**node, "status": {
            **resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "sandbox pod runner is ready", "lastHeartbeatTime": stamp,
                            "lastTransitionTime": stamp}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": spec.name}],
            "nodeInfo": {"kubeletVersion": "v1.32.0-specpilot-sandbox", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "specpilot-sandbox://1"}}},
            subresource="status")

    async def stop(self) -> None:
        if self._on_change in self.store.listeners:
            self.store.listeners.remove(self._on_change)
        tasks = [t for t in [self._task, *self._pods.values(), *self._terminating.values()] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # All at once, as a kubelet's graceful node shutdown does: one by one, six real vLLM pods took 50 s.
        await asyncio.gather(*(self.runtime.stop(ctx) for ctx in list(self._ctx.values())))
        self._ctx.clear()

    def _on_change(self, event_type: str, rtype: ResourceType, obj: dict[str, Any]) -> None:
        if rtype.kind not in WATCHED_KINDS or rtype.group not in ("", "apps"):
            return
        self._index.update(KEYS[rtype.kind], event_type, obj)
        self._dirty.mark(KEYS[rtype.kind], event_type, obj)
        uid = obj["metadata"]["uid"]
        if rtype.kind == "Pod" and event_type == "DELETED":
            for task in (self._pods.pop(uid, None), self._terminating.pop(uid, None)):
                if task is not None:
                    task.cancel()
            ctx = self._ctx.pop(uid, None)
            if ctx is not None:
                asyncio.get_running_loop().create_task(self.runtime.stop(ctx))
        elif rtype.kind == "Pod" and obj["metadata"].get("deletionTimestamp") and uid not in self._terminating:
            self._terminating[uid] = asyncio.get_running_loop().create_task(self._terminate(uid))
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                # Woken by changes; also every few seconds, so that progress deadlines expire on time.
                await asyncio.wait_for(self._wake.wait(), DEADLINE_CHECK_S)
            except TimeoutError:
                pass
            await asyncio.sleep(0.02)  # batch bursts of changes into one pass
            self._wake.clear()
            try:
                await self.sync()
            except ApiError as exc:  # a race with a client write; the next pass sees the new state
                log.debug("pod runner pass interrupted: %s", exc.message)
                self._dirty.full = True  # what this pass had taken is not done
                self._wake.set()

    # ---- one reconciliation pass ------------------------------------------------------------------

    async def sync(self) -> None:
        """One pass over what changed (everything every FULL_PASS_S): Deployments, then ReplicaSets (those
        the Deployments just changed included), then pods to start, then Endpoints. It hands the event loop
        back every few objects, as the API server's other work runs beside real controllers: a pass over a
        thousand changed Deployments would otherwise hold every API request for its whole length. Each
        object is read afresh just before it is handled, so what a client wrote meanwhile is seen."""
        clock = asyncio.get_running_loop().time()
        full = self._dirty.full or clock - self._last_full >= FULL_PASS_S
        if full:
            self._dirty.full, self._last_full = False, clock
        if clock - self._last_deadlines >= DEADLINE_CHECK_S:  # rollouts in progress may have run out of time
            self._last_deadlines = clock
            self._dirty.uids["deploy"].update(self._progress)
        for i, deploy in enumerate(self._changed("deploy", full)):
            if not deploy["metadata"].get("deletionTimestamp"):
                self._sync_deployment(deploy)
            await _breathe(i)
        for i, rs in enumerate(self._changed("rs", full)):
            if not rs["metadata"].get("deletionTimestamp"):
                self._sync_replicaset(rs)
            await _breathe(i)
        pods = {p["metadata"]["uid"]: p for p in self._changed("pod", full)}
        pods.update((uid, pod) for uid in self._unbound if (pod := self.store.by_uid(uid)) is not None)
        self._unbound = set()
        used = usage(self.store.all_objects(self._type("pod"))) if self.nodes is not None and pods else {}
        for pod in sorted(pods.values(), key=lambda p: p["metadata"]["creationTimestamp"]):
            uid = pod["metadata"]["uid"]
            if uid in self._pods or pod["metadata"].get("deletionTimestamp"):
                continue
            if self._bind(pod, used):
                self._pods[uid] = asyncio.get_running_loop().create_task(self._run_pod(uid))
            else:
                self._unbound.add(uid)
        self._sync_endpoints(full)

    def _changed(self, key: str, full: bool) -> Iterator[dict[str, Any]]:
        """Current versions of the objects of `key` changed since the last pass (all of them if `full`),
        each read when it is reached."""
        uids = self._dirty.take(key)
        if full:
            uids = {obj["metadata"]["uid"] for obj in self.store.all_objects(self._type(key))}
        return (obj for obj in map(self.store.by_uid, list(uids)) if obj is not None)

    def _children(self, key: str, owner: dict[str, Any]) -> list[dict[str, Any]]:
        """Current versions of what `owner` controls."""
        return [obj for obj in map(self.store.by_uid, self._index.owned(key, owner["metadata"]["uid"]))
                if obj is not None]

    def _write_status(self, key: str, obj: dict[str, Any], status: dict[str, Any]) -> None:
        if obj.get("status") != status:
            self.store.replace(self._type(key), obj["metadata"]["namespace"], obj["metadata"]["name"],
                               {**obj, "status": status}, subresource="status")

    def _sync_deployment(self, deploy: dict[str, Any]) -> None:
        spec, meta = deploy.get("spec") or {}, deploy["metadata"]
        ns, desired = meta["namespace"], int(spec.get("replicas", 1))
        template = copy.deepcopy(spec.get("template") or {})
        phash = template_hash(template)
        owned = self._children("rs", deploy)
        if spec.get("paused"):
            return  # `kubectl rollout pause`: the controller leaves ReplicaSets and status as they are
        new = next((rs for rs in owned if rs["metadata"].get("labels", {}).get(HASH_LABEL) == phash), None)
        olds = [rs for rs in owned if rs is not new]
        revisions = [int(rs["metadata"].get("annotations", {}).get(REVISION, "0")) for rs in owned]
        rs_type = self._type("rs")
        if new is None:
            template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = phash
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})[HASH_LABEL] = phash
            new = self.store.create(rs_type, ns, {
                "metadata": {"name": f"{meta['name']}-{phash}", "namespace": ns,
                             "labels": {**(template["metadata"].get("labels") or {})},
                             "annotations": {REVISION: str(max(revisions, default=0) + 1)},
                             "ownerReferences": [_owner_ref(deploy)]},
                "spec": {"replicas": 0, "selector": selector, "template": template}})
        old_pods = sum((rs.get("status") or {}).get("replicas", 0) for rs in olds)
        strategy = spec.get("strategy") or {}
        olds = sorted(olds, key=lambda r: r["metadata"]["creationTimestamp"])
        if strategy.get("type") == "Recreate":
            new_size, old_sizes = (0 if old_pods else desired), [0] * len(olds)
        else:
            new_size, old_sizes = rolling_sizes(desired, strategy, _sizes(new), [_sizes(rs) for rs in olds])
        self._scale(new, new_size)
        for rs, size in zip(olds, old_sizes):
            self._scale(rs, size)
        for rs in olds[: max(0, len(olds) - int(spec.get("revisionHistoryLimit", 10)))]:
            if rs["spec"].get("replicas", 0) == 0 and not rs.get("status", {}).get("replicas"):
                self.store.delete(rs_type, ns, rs["metadata"]["name"])
        new = self.store.get(rs_type, ns, new["metadata"]["name"])
        self._deployment_status(deploy, new, olds, desired)

    def _bind(self, pod: dict[str, Any], used: dict[str, Any]) -> bool:
        """Bind an unbound pod to a node with room for its GPUs, as kube-scheduler would; a pod that fits
        nowhere stays Pending, PodScheduled=False/Unschedulable with the scheduler's message, and is
        tried again on every pass (a deleted pod frees its node's GPUs)."""
        if self.nodes is None or (pod.get("spec") or {}).get("nodeName"):
            return True
        node, why = place(pod, self.nodes, used)
        meta = pod["metadata"]
        if node is not None:
            self.store.patch(self._type("pod"), meta["namespace"], meta["name"], "application/merge-patch+json",
                             {"spec": {"nodeName": node}})
            return True
        old: dict[str, Any] = next((c for c in (pod.get("status") or {}).get("conditions") or []
                                    if c["type"] == "PodScheduled"), {})
        stamp = old.get("lastTransitionTime") if old.get("status") == "False" else now()
        status = {"phase": "Pending", "qosClass": "BestEffort", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why,
            "lastTransitionTime": stamp}]}
        self._write_status("pod", pod, status)
        return False

    def _scale(self, rs: dict[str, Any], replicas: int) -> None:
        if rs["spec"].get("replicas") != replicas:
            self.store.patch(self._type("rs"), rs["metadata"]["namespace"], rs["metadata"]["name"],
                             "application/merge-patch+json", {"spec": {"replicas": replicas}})

    def _deployment_status(self, deploy: dict[str, Any], new: dict[str, Any], olds: list[dict[str, Any]],
                           desired: int) -> None:
        rs_status = [(rs.get("status") or {}) for rs in [new, *olds]]
        total = sum(s.get("replicas", 0) for s in rs_status)
        ready = sum(s.get("readyReplicas", 0) for s in rs_status)
        updated = (new.get("status") or {}).get("replicas", 0)
        new_ready = (new.get("status") or {}).get("readyReplicas", 0)
        complete = new_ready >= desired and total == updated
        old = deploy.get("status") or {}
        conds = {c["type"]: c for c in old.get("conditions") or []}

        def cond(ctype: str, status: str, reason: str, message: str) -> dict[str, Any]:
            prev = conds.get(ctype)
            stamp = prev["lastTransitionTime"] if prev and prev["status"] == status else now()
            keep = prev and prev["status"] == status and prev["reason"] == reason
            return {"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastUpdateTime": prev["lastUpdateTime"] if keep and prev else now(), "lastTransitionTime": stamp}

        name = new["metadata"]["name"]
        status = {
            "observedGeneration": deploy["metadata"].get("generation", 1),
            "replicas": total, "updatedReplicas": updated, "readyReplicas": ready, "availableReplicas": ready,
            "conditions": [
                cond("Available", "True" if ready >= desired else "False",
                     "MinimumReplicasAvailable" if ready >= desired else "MinimumReplicasUnavailable",
                     "Deployment has minimum availability." if ready >= desired
                     else "Deployment does not have minimum availability."),
                self._progressing(deploy, cond, complete, (name, updated, ready, total))],
        }
        failed = next((c for st in rs_status for c in st.get("conditions") or [] if c["type"] == "ReplicaFailure"), None)
        if failed:
            status["conditions"].append(cond("ReplicaFailure", "True", failed["reason"], failed["message"]))
        if total - ready > 0:
            status["unavailableReplicas"] = total - ready
        for key in ("readyReplicas", "availableReplicas", "updatedReplicas", "replicas"):
            if not status[key]:
                del status[key]  # the real controller omits zero counts
        self._write_status("deploy", deploy, status)
        revision = new["metadata"].get("annotations", {}).get(REVISION)
        fresh = self.store.get(self._type("deploy"), deploy["metadata"]["namespace"], deploy["metadata"]["name"])
        if revision and fresh["metadata"].get("annotations", {}).get(REVISION) != revision:
            self.store.patch(self._type("deploy"), fresh["metadata"]["namespace"], fresh["metadata"]["name"],
                             "application/merge-patch+json", {"metadata": {"annotations": {REVISION: revision}}})

    def _progressing(self, deploy: dict[str, Any], cond: Any, complete: bool,
                     progress: tuple[str, int, int, int]) -> dict[str, Any]:
        """The Progressing condition: ProgressDeadlineExceeded when a rollout made no progress (no pod
        created, updated or readied) for spec.progressDeadlineSeconds, as the deployment controller says."""
        name = progress[0]
        if complete:
            self._progress.pop(deploy["metadata"]["uid"], None)
            return cond("Progressing", "True", "NewReplicaSetAvailable", f'ReplicaSet "{name}" has successfully progressed.')
        clock = asyncio.get_running_loop().time()
        last = self._progress.get(deploy["metadata"]["uid"])
        if last is None or last[0] != progress:
            last = (progress, clock)
            self._progress[deploy["metadata"]["uid"]] = last
        deadline = float((deploy.get("spec") or {}).get("progressDeadlineSeconds", 600))
        if clock - last[1] > deadline:
            return cond("Progressing", "False", "ProgressDeadlineExceeded",
                        f'ReplicaSet "{name}" has timed out progressing.')
        return cond("Progressing", "True", "ReplicaSetUpdated", f'ReplicaSet "{name}" is progressing.')

    def _sync_replicaset(self, rs: dict[str, Any]) -> None:
        ns = rs["metadata"]["namespace"]
        desired = int(rs["spec"].get("replicas", 1))
        pods = [p for p in self._children("pod", rs) if not p["metadata"].get("deletionTimestamp")]
        pod_type = self._type("pod")
        template = rs["spec"].get("template") or {}
        failure = None
        for _ in range(desired - len(pods)):
            try:
                pods.append(self.store.create(pod_type, ns, {
                    "metadata": {"generateName": f"{rs['metadata']['name']}-", "namespace": ns,
                                 "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                                 "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                                 "ownerReferences": [_owner_ref(rs)]},
                    "spec": copy.deepcopy(template.get("spec") or {})}))
            except ApiError as exc:
                if exc.code != 403:
                    raise
                # Admission (PodSecurity) refused it: the ReplicaSet controller reports FailedCreate.
                failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                           "message": exc.message}
                break
        if len(pods) > desired:
            # Scale down the pods that serve least: not ready first, then the youngest.
            victims = sorted(pods, key=lambda p: (_is_ready(p), p["metadata"]["creationTimestamp"],
                                                  p["metadata"]["name"]))
            for pod in victims[: len(pods) - desired]:
                self.store.delete(pod_type, ns, pod["metadata"]["name"])
                pods.remove(pod)
        ready = sum(1 for p in pods if _is_ready(p))
        status = {"replicas": len(pods), "fullyLabeledReplicas": len(pods), "readyReplicas": ready,
                  "availableReplicas": ready, "observedGeneration": rs["metadata"].get("generation", 1),
                  "conditions": [failure] if failure else []}
        self._write_status("rs", rs, {k: v for k, v in status.items() if v or k == "replicas"})

    # ---- pods ------------------------------------------------------------------------------------

    def _allocate_ip(self) -> str:
        used = {ctx.ip for ctx in self._ctx.values()}
        while True:
            self._next_ip += 1
            n = self._next_ip % IP_RANGE
            ip = f"127.{1 + n // (254 * 254)}.{(n // 254) % 254 + 1}.{n % 254 + 1}"
            if ip not in used:
                return ip

    def _pod_status(self, uid: str, ip: str, phase: str, ready: bool, message: str = "") -> None:
        pod = self.store.by_uid(uid)
        if pod is None:
            return
        stamp = now()
        old = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}

        def cond(ctype: str, value: bool) -> dict[str, Any]:
            status = "True" if value else "False"
            prev = old.get(ctype)
            return {"type": ctype, "status": status,
                    "lastTransitionTime": prev["lastTransitionTime"] if prev and prev["status"] == status else stamp}

        running = phase == "Running"
        containers = [{"name": c.get("name", ""), "image": c.get("image", ""), "ready": ready and running,
                       "restartCount": 0, "started": running,
                       "state": {"running": {"startedAt": pod["metadata"]["creationTimestamp"]}} if running
                       else {"waiting": {"reason": "ContainerCreating" if phase == "Pending" else "Error",
                                         "message": message}}}
                      for c in (pod.get("spec") or {}).get("containers") or []]
        status = {"phase": phase, "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}],
                  "startTime": (pod.get("status") or {}).get("startTime", stamp), "qosClass": "BestEffort",
                  "conditions": [cond("PodScheduled", True), cond("Initialized", True),
                                 cond("ContainersReady", ready and running), cond("Ready", ready and running)],
                  "containerStatuses": containers}
        if pod.get("status") != status:
            self.store.replace(self._type("pod"), pod["metadata"]["namespace"], pod["metadata"]["name"],
                               {**pod, "status": status}, subresource="status")

    async def _run_pod(self, uid: str) -> None:
        pod = self.store.by_uid(uid)
        if pod is None:
            return
        if not (pod.get("spec") or {}).get("nodeName"):
            pod = self.store.patch(self._type("pod"), pod["metadata"]["namespace"], pod["metadata"]["name"],
                                   "application/merge-patch+json", {"spec": {"nodeName": NODE_NAME}})
        ip = self._allocate_ip()
        ctx = PodContext(pod, ip, self._mounted_files(pod), self._owners(pod))
        self._ctx[uid] = ctx
        self._pod_status(uid, ip, "Pending", False)
        try:
            await self.runtime.start(ctx)
        except Exception as exc:  # the pod fails as a container that exits at start would
            log.warning("pod %s failed to start: %s", ctx.name, exc)
            self._pod_status(uid, ip, "Failed", False, str(exc))
            return
        ready: bool | None = None
        while True:
            now_ready = await self.runtime.ready(ctx)
            if now_ready != ready:
                ready = now_ready
                self._pod_status(uid, ip, "Running", ready)
            await asyncio.sleep(self.probe_period_s)

    async def _terminate(self, uid: str) -> None:
        """The kubelet's part of a graceful delete: not Ready, preStop, SIGTERM, then SIGKILL at the grace
        period's end at the latest, and the pod object removed."""
        pod = self.store.by_uid(uid)
        if pod is None:
            return
        probe = self._pods.pop(uid, None)
        if probe is not None:
            probe.cancel()
        ctx = self._ctx.get(uid)
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        terminate = getattr(self.runtime, "terminate", None)
        try:
            if ctx is not None:
                self._pod_status(uid, ctx.ip, "Running", False)
                if terminate is not None:
                    await asyncio.wait_for(terminate(ctx), grace)
        except TimeoutError:
            log.info("pod %s did not stop within its %g s grace period: killed", pod["metadata"]["name"], grace)
        finally:
            ctx = self._ctx.pop(uid, None)
            if ctx is not None:
                await self.runtime.stop(ctx)
        try:
            self.store.delete(self._type("pod"), pod["metadata"]["namespace"], pod["metadata"]["name"],
                              grace_period=0)
        except ApiError:
            pass  # already gone
        self._terminating.pop(uid, None)

    def _owners(self, obj: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        """`obj`'s chain of controller owners, as the API server holds them (a cycle ends the chain)."""
        chain: list[dict[str, Any]] = []
        seen = {obj["metadata"].get("uid")}
        while True:
            ref = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if not ref or ref.get("uid") in seen:
                return tuple(chain)
            owner = self.store.by_uid(ref["uid"])
            if owner is None:
                return tuple(chain)
            chain.append(owner)
            seen.add(ref["uid"])
            obj = owner

    def _mounted_files(self, pod: dict[str, Any]) -> dict[str, str]:
        """ConfigMap and Secret volumes as the containers would see them (missing sources: no files)."""
        ns, spec = pod["metadata"]["namespace"], pod.get("spec") or {}
        sources: dict[str, dict[str, str]] = {}
        for vol in spec.get("volumes") or []:
            if "configMap" in vol:
                cm = self.store.objects.get(("", "configmaps"), {}).get((ns, vol["configMap"].get("name", "")))
                sources[vol["name"]] = dict((cm or {}).get("data") or {})
            elif "secret" in vol:
                sec = self.store.objects.get(("", "secrets"), {}).get((ns, vol["secret"].get("secretName", "")))
                sources[vol["name"]] = {k: base64.b64decode(v).decode(errors="replace")
                                        for k, v in ((sec or {}).get("data") or {}).items()}
        files: dict[str, str] = {}
        for container in spec.get("containers") or []:
            for mount in container.get("volumeMounts") or []:
                data = sources.get(mount.get("name", ""), {})
                if mount.get("subPath"):
                    if mount["subPath"] in data:
                        files[mount["mountPath"]] = data[mount["subPath"]]
                else:
                    files.update({f"{mount['mountPath'].rstrip('/')}/{k}": v for k, v in data.items()})
        return files

    # ---- endpoints -------------------------------------------------------------------------------

    def _sync_endpoints(self, full: bool) -> None:
        """Endpoints and EndpointSlices of the Services that changed or that select (or selected) a pod that
        changed (all if `full`), written only when the Service or its pods changed since."""
        svc_type, ep_type, slice_type = self._type("svc"), self._type("ep"), self._type("slice")
        for ns, name in self._dirty.take_gone_services():
            self._endpoints_of.pop((ns, name), None)
            self._note_members((ns, name), set())
            if (ns, name) in self.store.objects.get(ep_type.key, {}):
                self.store.delete(ep_type, ns, name)
        services, pods = self._dirty.take_endpoints()
        services_now = self.store.objects.get(svc_type.key, {})
        if full:
            services = set(services_now)
        for uid in pods:
            services |= self._member_of.get(uid, set())
            if (pod := self.store.by_uid(uid)) is not None:
                services |= self._index.services_for(pod)
        for ns, name in services:
            svc = services_now.get((ns, name))
            if svc is None or not (selector := (svc.get("spec") or {}).get("selector")):
                self._note_members((ns, name), set())
                continue
            match = selector_from_match({"matchLabels": selector})
            members = sorted((p for p in map(self.store.by_uid, self._index.candidates(ns, selector))
                              if p is not None and (p.get("status") or {}).get("podIP")
                              and match(p["metadata"].get("labels") or {})),
                             key=lambda p: p["metadata"]["name"])
            self._note_members((ns, name), {p["metadata"]["uid"] for p in members})
            made_from = (svc["metadata"]["resourceVersion"], tuple(p["metadata"]["resourceVersion"] for p in members))
            if not full and self._endpoints_of.get((ns, name)) == made_from:
                continue
            self._endpoints_of[(ns, name)] = made_from
            ports = [self._port(svc_port, members) for svc_port in svc["spec"].get("ports") or []]
            self._put(ep_type, ns, name, self._endpoints(svc, members, ports))
            slice_name = f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:5]}"
            self._put(slice_type, ns, slice_name, self._slice(svc, slice_name, members, ports))
        for ep in self.store.all_objects(ep_type) if full else ():
            key = (ep["metadata"]["namespace"], ep["metadata"]["name"])
            if not (services_now.get(key, {}).get("spec") or {}).get("selector"):
                self.store.delete(ep_type, *key)

    def _note_members(self, service: tuple[str, str], members: set[str]) -> None:
        """Remember which pods a Service's Endpoints list, so that a pod that leaves it is noticed."""
        before = self._members.pop(service, set())
        for uid in before - members:
            held = self._member_of.get(uid, set())
            held.discard(service)
            if not held:
                self._member_of.pop(uid, None)
        for uid in members - before:
            self._member_of.setdefault(uid, set()).add(service)
        if members:
            self._members[service] = members

    @staticmethod
    def _port(svc_port: dict[str, Any], members: list[dict[str, Any]]) -> dict[str, Any]:
        target: Any = svc_port.get("targetPort", svc_port.get("port"))  # a number, a port's name or absent
        if isinstance(target, str) and not target.isdigit():
            for pod in members:
                for c in (pod.get("spec") or {}).get("containers") or []:
                    for p in c.get("ports") or []:
                        if p.get("name") == target:
                            target = p["containerPort"]
        port = {"port": int(target) if str(target).isdigit() else svc_port.get("port"),
                "protocol": svc_port.get("protocol", "TCP")}
        if svc_port.get("name"):
            port["name"] = svc_port["name"]
        return port

    @staticmethod
    def _address(pod: dict[str, Any]) -> dict[str, Any]:
        return {"ip": pod["status"]["podIP"], "nodeName": NODE_NAME,
                "targetRef": {"kind": "Pod", "name": pod["metadata"]["name"],
                              "namespace": pod["metadata"]["namespace"], "uid": pod["metadata"]["uid"]}}

    def _endpoints(self, svc: dict[str, Any], members: list[dict[str, Any]],
                   ports: list[dict[str, Any]]) -> dict[str, Any]:
        # Terminating pods leave Endpoints at once; EndpointSlices keep them, marked terminating.
        members = [p for p in members if not p["metadata"].get("deletionTimestamp")]
        ready = [self._address(p) for p in members if _is_ready(p)]
        not_ready = [self._address(p) for p in members if not _is_ready(p)]
        subset: dict[str, Any] = {"ports": ports}
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        return {"metadata": {"name": svc["metadata"]["name"], "namespace": svc["metadata"]["namespace"],
                             "labels": dict(svc["metadata"].get("labels") or {})},
                "subsets": [subset] if members else []}

    def _slice(self, svc: dict[str, Any], name: str, members: list[dict[str, Any]],
               ports: list[dict[str, Any]]) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": svc["metadata"]["namespace"],
                             "labels": {"kubernetes.io/service-name": svc["metadata"]["name"],
                                        "endpointslice.kubernetes.io/managed-by": "specpilot-sandbox"},
                             "ownerReferences": [_owner_ref(svc)]},
                "addressType": "IPv4", "ports": ports,
                "endpoints": [{"addresses": [p["status"]["podIP"]], "nodeName": NODE_NAME,
                               "conditions": _slice_conditions(p), "targetRef": self._address(p)["targetRef"]}
                              for p in members]}

    def _put(self, rtype: ResourceType, ns: str, name: str, desired: dict[str, Any]) -> None:
        try:
            current = self.store.get(rtype, ns, name)
        except ApiError:
            self.store.create(rtype, ns, desired)
            return
        meta = {**current["metadata"], **desired["metadata"]}
        if meta == current["metadata"] and all(current.get(k) == v for k, v in desired.items() if k != "metadata"):
            return  # unchanged: skip the copy and compare the store would do
        self.store.replace(rtype, ns, name, {**desired, "metadata": meta})
