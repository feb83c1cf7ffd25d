"""The emulated API server's state: objects, resourceVersions, the watch log, finalizers and garbage
collection. Everything runs on one asyncio loop and no method awaits, so each call is atomic: a watch
registered with a resourceVersion replays the log and joins the live stream with nothing in between."""

from __future__ import annotations

import asyncio
import builtins  # `Store.list` shadows the builtin in the annotations of the methods after it
import copy
import json
import re
import uuid
from collections import deque
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable

from specpilot_harness.sandbox import errors, pod_security
from specpilot_harness.sandbox.defaults import apply_defaults
from specpilot_harness.sandbox.errors import ApiError
from specpilot_harness.sandbox.label_index import LabelIndex
from specpilot_harness.sandbox.patch import PatchError, apply_config, json_patch, merge_patch, strategic_merge
from specpilot_harness.sandbox.resources import Registry, ResourceType
from specpilot_harness.sandbox.selectors import parse_field_selector, parse_label_selector, required_labels
from specpilot_harness.sandbox.structural import prune

Key = tuple[str, str]          # (group, plural)
ObjKey = tuple[str, str]       # (namespace or "", name)
# (custom resource type, new object, old object or None) -> (the object as stored, with defaults,
# [(field path, message)]); an empty list admits it.
Admission = Callable[[ResourceType, dict[str, Any], "dict[str, Any] | None"],
                     tuple[dict[str, Any], list[tuple[str, str]]]]
# (event type, resource type, object) called synchronously after every change.
Listener = Callable[[str, ResourceType, dict[str, Any]], None]

LOG_SIZE = 200_000
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
FOREGROUND = "foregroundDeletion"
# etcd's default --max-request-bytes: a larger object is refused at the write (the API server passes
# etcd's error on as a 500, "etcdserver: request is too large"). Custom resources are stored as JSON.
ETCD_MAX_OBJECT_BYTES = 1536 * 1024


def now(after_s: float = 0.0) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=after_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _suffix() -> str:
    return uuid.uuid4().hex[:5]


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": meta}


class Watch:
    """One client's watch: a queue of (type, object) fed by the store, filtered by its selectors."""

    def __init__(self, rtype: ResourceType, namespace: str | None,
                 label_selector: str | None, field_selector: str | None) -> None:
        self.rtype, self.namespace = rtype, namespace
        self._labels = parse_label_selector(label_selector)
        self._fields = parse_field_selector(field_selector)
        self.queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return self._labels(meta.get("labels") or {}) and self._fields(obj)

    def offer(self, event_type: str, obj: dict[str, Any]) -> None:
        if self.matches(obj):
            self.queue.put_nowait((event_type, obj))


class Store:
    def __init__(self, registry: Registry, admission: Admission | None = None) -> None:
        self.registry = registry
        self.admission = admission
        self.rv = 1000
        self.objects: dict[Key, dict[ObjKey, dict[str, Any]]] = {}
        self._log: deque[tuple[int, Key, str, dict[str, Any]]] = deque(maxlen=LOG_SIZE)
        self._watches: dict[Key, set[Watch]] = {}
        self._by_uid: dict[str, tuple[ResourceType, ObjKey]] = {}
        self._labels = LabelIndex()
        # Services' addresses, and where to look for the next free one (None: a Service stored without one).
        self._cluster_ips: set[str | None] = set()
        self._next_cluster_ip = 10
        self._applied: dict[tuple[Key, ObjKey, str], dict[str, Any]] = {}
        self.listeners: list[Listener] = []
        # Deleted pods terminate gracefully (deletionTimestamp, grace period) and the pod runner removes them
        # once stopped; without a pod runner nothing would, so they go at once.
        self.graceful_pods = False
        ns_type = self._type("", "namespaces")
        for name in SYSTEM_NAMESPACES:
            self.create(ns_type, None, {"metadata": {"name": name}})

    # ---- helpers -------------------------------------------------------------------------------

    def _type(self, group: str, plural: str) -> ResourceType:
        rtype = next((t for t in self.registry.all() if t.key == (group, plural)), None)
        assert rtype is not None, (group, plural)
        return rtype

    def _bucket(self, rtype: ResourceType) -> dict[ObjKey, dict[str, Any]]:
        return self.objects.setdefault(rtype.key, {})

    def _okey(self, rtype: ResourceType, namespace: str | None, name: str) -> ObjKey:
        return ((namespace or "") if rtype.namespaced else "", name)

    def _keep(self, rtype: ResourceType, okey: ObjKey, obj: dict[str, Any]) -> None:
        """Every write of a stored object goes through here, so the label index stays exact."""
        self._bucket(rtype)[okey] = obj
        self._labels.put(rtype.key, okey, obj)
        if rtype.kind == "Service" and not rtype.group:
            self._cluster_ips.add((obj.get("spec") or {}).get("clusterIP"))

    def _emit(self, rtype: ResourceType, event_type: str, obj: dict[str, Any]) -> None:
        self._log.append((self.rv, rtype.key, event_type, obj))
        for watch in list(self._watches.get(rtype.key, ())):
            watch.offer(event_type, obj)
        for listener in self.listeners:
            listener(event_type, rtype, obj)

    def _check_namespace(self, rtype: ResourceType, namespace: str | None) -> None:
        if not rtype.namespaced:
            return
        if not namespace:
            raise errors.bad_request("the namespace of the provided object is missing")
        ns = self.objects.get(("", "namespaces"), {}).get(("", namespace))
        if ns is None:
            raise errors.namespace_not_found(namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", f"unable to create new content in namespace {namespace} "
                                             "because it is being terminated")

    def _admit(self, rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        name = obj["metadata"].get("name", "")
        causes: list[tuple[str, str]] = []
        if not NAME_RE.match(name) or len(name) > 253:
            causes.append(("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
                                            "consist of lower case alphanumeric characters, '-' or '.'"))
        if not causes and rtype.crd is not None and self.admission is not None:
            obj, causes = self.admission(rtype, obj, old)
        if causes:
            raise errors.invalid(rtype, name, causes)
        return obj

    def _structural(self, rtype: ResourceType, obj: dict[str, Any], field_validation: str,
                    warnings: list[str]) -> dict[str, Any]:
        if rtype.schema is None:
            return obj
        out, unknown = prune(obj, rtype.schema)
        if unknown and field_validation == "Strict":
            raise errors.bad_request("strict decoding error: " +
                                     ", ".join(f'unknown field "{p}"' for p in unknown))
        if field_validation != "Ignore":
            warnings.extend(f'unknown field "{p}"' for p in unknown)
        return out

    # ---- reads ---------------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self._bucket(rtype).get(self._okey(rtype, namespace, name))
        if obj is None:
            raise errors.not_found(rtype, name)
        return obj

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        hit = self._by_uid.get(uid)
        return self._bucket(hit[0]).get(hit[1]) if hit else None

    def list(self, rtype: ResourceType, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict[str, Any]]:
        labels, fields = parse_label_selector(label_selector), parse_field_selector(field_selector)
        bucket = self._bucket(rtype)
        narrowed = self._labels.candidates(rtype.key, required_labels(label_selector))
        items = bucket.items() if narrowed is None else ((k, bucket[k]) for k in narrowed if k in bucket)
        out = []
        for (ns, _), obj in sorted(items):
            if namespace and rtype.namespaced and ns != namespace:
                continue
            if labels(obj["metadata"].get("labels") or {}) and fields(obj):
                out.append(obj)
        return out

    def watch(self, rtype: ResourceType, namespace: str | None, label_selector: str | None,
              field_selector: str | None, since: str | None, send_initial: bool) -> Watch:
        """A watch from resourceVersion `since` (replaying the log), or from now with every current object
        sent as ADDED first (since unset or "0"); 410 Gone comes as an ERROR event if `since` is too old."""
        watch = Watch(rtype, namespace, label_selector, field_selector)
        if since in (None, "", "0") or send_initial:
            for obj in self.list(rtype, namespace, label_selector, field_selector):
                watch.queue.put_nowait(("ADDED", obj))
            if send_initial:
                watch.queue.put_nowait(("BOOKMARK", {
                    "kind": rtype.kind, "apiVersion": rtype.api_version,
                    "metadata": {"resourceVersion": str(self.rv),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}))
        else:
            try:
                start = int(since)
            except ValueError as exc:
                raise errors.bad_request(f"invalid resource version: {since}") from exc
            if self._log and start < self._log[0][0] - 1 and start < self.rv:
                watch.queue.put_nowait(("ERROR", ApiError(410, "Expired",
                                                          f"too old resource version: {start}").status()))
            else:
                for rv, key, event_type, obj in self._log:
                    if rv > start and key == rtype.key:
                        watch.offer(event_type, obj)
        self._watches.setdefault(rtype.key, set()).add(watch)
        return watch

    def unwatch(self, watch: Watch) -> None:
        self._watches.get(watch.rtype.key, set()).discard(watch)

    # ---- writes --------------------------------------------------------------------------------

    def create(self, rtype: ResourceType, namespace: str | None, body: dict[str, Any], *, dry_run: bool = False,
               field_validation: str = "Warn", warnings: builtins.list[str] | None = None) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if rtype.namespaced:
            namespace = namespace or meta.get("namespace")
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        self._check_namespace(rtype, namespace)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(rtype, "", [("metadata.name", "Required value: name or generateName is "
                                                                   "required")])
            meta["name"] = meta["generateName"] + _suffix()
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        okey = self._okey(rtype, namespace, meta["name"])
        if okey in self._bucket(rtype):
            raise errors.already_exists(rtype, meta["name"])
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        if rtype.has_generation:
            meta["generation"] = 1
        if "status" in rtype.subresources and rtype.kind not in ("Namespace",):
            obj.pop("status", None)
        obj = self._structural(rtype, obj, field_validation, warnings if warnings is not None else [])
        if rtype.crd is None:
            apply_defaults(rtype.kind, obj)
        obj = self._admit(rtype, obj, None)
        if rtype.kind == "Pod" and not rtype.group:
            pod_security.admit_pod(self.objects.get(("", "namespaces"), {}).get(("", namespace or "")), obj)
        meta = obj["metadata"]
        self._on_create(rtype, obj)
        if dry_run:
            return obj
        _fits_etcd(obj)
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self._keep(rtype, okey, obj)
        self._by_uid[meta["uid"]] = (rtype, okey)
        self._emit(rtype, "ADDED", obj)
        self._after_write(rtype, obj)
        return obj

    def replace(self, rtype: ResourceType, namespace: str | None, name: str, body: dict[str, Any], *,
                subresource: str | None = None, dry_run: bool = False, field_validation: str = "Warn",
                warnings: builtins.list[str] | None = None) -> dict[str, Any]:
        old = self.get(rtype, namespace, name)
        new = copy.deepcopy(body)
        meta = new.setdefault("metadata", {})
        want_rv = meta.get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype, name, "the object has been modified; please apply your changes to the "
                                               "latest version and try again")
        if meta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL")
        if subresource == "status":
            # Stored objects are never changed in place, so the new version shares all but metadata and
            # status with the old one (copying a whole pod per status write was most of the pod runner's cost).
            new = {**old, "metadata": copy.deepcopy(old["metadata"]), "status": new.get("status")}
            if new["status"] is None:
                new.pop("status")
        elif subresource in (None, "finalize"):
            if "status" in rtype.subresources:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
            new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                          "generation", "namespace", "name"):
                if field in old["metadata"]:
                    meta[field] = old["metadata"][field]
                else:
                    meta.pop(field, None)
            if old["metadata"].get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
                if added:
                    raise errors.invalid(rtype, name, [("metadata.finalizers", "Forbidden: no new finalizers can "
                                                                               "be added if the object is being deleted")])
            new = self._structural(rtype, new, field_validation, warnings if warnings is not None else [])
            if rtype.crd is None:
                apply_defaults(rtype.kind, new)
        else:
            raise errors.not_found(rtype, f"{name}/{subresource}")
        new = self._admit(rtype, new, old)
        meta = new["metadata"]
        if rtype.has_generation and _spec_part(new) != _spec_part(old):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        if _comparable(new) == _comparable(old):
            return old  # no-op writes keep the resourceVersion and send no event, as the real server does
        self._on_update(rtype, new, old)
        if dry_run:
            return new
        _fits_etcd(new)
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not self._terminating(rtype, new):
            return self._remove(rtype, new)
        self._keep(rtype, self._okey(rtype, namespace, name), new)
        self._emit(rtype, "MODIFIED", new)
        self._after_write(rtype, new)
        return new

    def patch(self, rtype: ResourceType, namespace: str | None, name: str, content_type: str, body: Any, *,
              subresource: str | None = None, field_manager: str | None = None, dry_run: bool = False,
              field_validation: str = "Warn", warnings: builtins.list[str] | None = None) -> dict[str, Any]:
        is_apply = content_type.startswith("application/apply-patch")
        try:
            old = self.get(rtype, namespace, name)
        except ApiError:
            if not is_apply:
                raise
            return self._apply_create(rtype, namespace, name, body, field_manager, dry_run, field_validation, warnings)
        try:
            if content_type.startswith("application/json-patch"):
                new = json_patch(old, body)
            elif content_type.startswith("application/merge-patch"):
                new = merge_patch(old, body)
            elif content_type.startswith("application/strategic-merge-patch"):
                if rtype.crd is not None:
                    raise ApiError(415, "UnsupportedMediaType", "strategic merge patch is not supported for "
                                                                "custom resources; use a merge patch")
                new = strategic_merge(old, body)
            elif is_apply:
                if not field_manager:
                    raise errors.bad_request("PATCH /apply requires fieldManager")
                akey = (rtype.key, self._okey(rtype, namespace, name), field_manager)
                new = apply_config(old, body, self._applied.get(akey))
                if not dry_run:
                    self._applied[akey] = copy.deepcopy(body)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: "
                                                            f"{content_type}")
        except PatchError as exc:  # a failed JSON-patch `test` included: 422, which Kopf retries on
            raise ApiError(422, "Invalid", str(exc)) from exc
        # A patch never moves the object's identity, whatever the patch body says.
        new.setdefault("metadata", {})["resourceVersion"] = old["metadata"]["resourceVersion"]
        new["metadata"]["name"] = name
        return self.replace(rtype, namespace, name, new, subresource=subresource, dry_run=dry_run,
                            field_validation=field_validation, warnings=warnings)

    def _apply_create(self, rtype: ResourceType, namespace: str | None, name: str, body: Any,
                      field_manager: str | None, dry_run: bool, field_validation: str,
                      warnings: builtins.list[str] | None) -> dict[str, Any]:
        if not field_manager:
            raise errors.bad_request("PATCH /apply requires fieldManager")
        body = copy.deepcopy(body)
        body.setdefault("metadata", {})["name"] = name
        obj = self.create(rtype, namespace, body, dry_run=dry_run, field_validation=field_validation,
                          warnings=warnings)
        if not dry_run:
            self._applied[(rtype.key, self._okey(rtype, namespace, name), field_manager)] = body
        return obj

    def delete(self, rtype: ResourceType, namespace: str | None, name: str, *, propagation: str | None = None,
               preconditions: dict[str, str] | None = None, dry_run: bool = False,
               grace_period: int | None = None) -> dict[str, Any]:
        old = self.get(rtype, namespace, name)
        for field, value in (preconditions or {}).items():
            if value and old["metadata"].get(field) != value:
                raise errors.conflict(rtype, name, f"Precondition failed: {field} in precondition: {value}, "
                                                   f"{field} in object meta: {old['metadata'].get(field)}")
        if dry_run:
            return old
        grace = self._pod_grace(rtype, old, grace_period)
        if grace:
            return self._start_termination(rtype, old, grace)
        if self._terminating(rtype, old):  # the kubelet's final delete, or a forced one
            old = self._start_termination(rtype, old, 0)
        finalizers = list(old["metadata"].get("finalizers") or [])
        if propagation == "Foreground" and FOREGROUND not in finalizers and self._dependents(old):
            finalizers.append(FOREGROUND)
        if propagation == "Orphan":
            self._orphan(old)
        if rtype.kind == "Namespace":
            finalizers = finalizers or ["kubernetes"]  # emptied by _collect once its content is gone
        if not finalizers:
            return self._remove(rtype, old)
        if old["metadata"].get("deletionTimestamp") and finalizers == old["metadata"].get("finalizers"):
            return old
        new = copy.deepcopy(old)
        new["metadata"]["finalizers"] = finalizers
        new["metadata"].setdefault("deletionTimestamp", now())
        new["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        if rtype.kind == "Namespace":
            new.setdefault("status", {})["phase"] = "Terminating"
        self.rv += 1
        new["metadata"]["resourceVersion"] = str(self.rv)
        self._keep(rtype, self._okey(rtype, namespace, name), new)
        self._emit(rtype, "MODIFIED", new)
        self._collect(rtype, new)
        return new

    def _pod_grace(self, rtype: ResourceType, pod: dict[str, Any], grace_period: int | None) -> int:
        """Seconds a deleted pod gets to terminate (0: removed at once). As the real server: the delete's
        gracePeriodSeconds, else the pod's terminationGracePeriodSeconds; a pod not yet on a node or already
        finished goes at once; a second delete may shorten the grace, never lengthen it."""
        if rtype.kind != "Pod" or not self.graceful_pods:
            return 0
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = int(spec.get("terminationGracePeriodSeconds", 30) if grace_period is None or grace_period < 0
                    else grace_period)
        if meta.get("deletionTimestamp"):
            return min(grace, int(meta.get("deletionGracePeriodSeconds") or 0))
        return max(grace, 0)

    def _terminating(self, rtype: ResourceType, obj: dict[str, Any]) -> bool:
        """A pod in its grace period: the kubelet (the pod runner) removes it once its containers stopped."""
        return rtype.kind == "Pod" and self.graceful_pods and bool(obj["metadata"].get("deletionGracePeriodSeconds"))

    def _start_termination(self, rtype: ResourceType, old: dict[str, Any], grace: int) -> dict[str, Any]:
        meta = old["metadata"]
        if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == grace:
            return old
        new = copy.deepcopy(old)
        new["metadata"]["deletionTimestamp"] = now(grace)
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        self.rv += 1
        new["metadata"]["resourceVersion"] = str(self.rv)
        self._keep(rtype, self._okey(rtype, meta.get("namespace"), meta["name"]), new)
        self._emit(rtype, "MODIFIED", new)
        return new

    def _remove(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        okey = self._okey(rtype, meta.get("namespace"), meta["name"])
        self._bucket(rtype).pop(okey, None)
        self._labels.put(rtype.key, okey, None)
        self._by_uid.pop(meta["uid"], None)
        if rtype.kind == "Service" and not rtype.group:
            self._cluster_ips.discard((obj.get("spec") or {}).get("clusterIP"))
        for akey in [k for k in self._applied if k[0] == rtype.key and k[1] == okey]:
            del self._applied[akey]
        self.rv += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(rtype, "DELETED", gone)
        self._on_removed(rtype, gone)
        return gone

    # ---- garbage collection and type-specific behaviour --------------------------------------------

    def _dependents(self, owner: dict[str, Any]) -> builtins.list[tuple[ResourceType, dict[str, Any]]]:
        uid = owner["metadata"]["uid"]
        out = []
        for rtype in self.registry.all():
            for obj in self._bucket(rtype).values():
                if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or []):
                    out.append((rtype, obj))
        return out

    def _orphan(self, owner: dict[str, Any]) -> None:
        uid = owner["metadata"]["uid"]
        for rtype, dep in self._dependents(owner):
            refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            patched = copy.deepcopy(dep)
            patched["metadata"]["ownerReferences"] = refs
            self.replace(rtype, dep["metadata"].get("namespace"), dep["metadata"]["name"], patched)

    def _owners_gone(self, obj: dict[str, Any]) -> bool:
        refs = obj["metadata"].get("ownerReferences") or []
        return bool(refs) and all(self.by_uid(r.get("uid", "")) is None for r in refs)

    def _delete_quietly(self, rtype: ResourceType, obj: dict[str, Any], propagation: str | None = None) -> None:
        try:
            self.delete(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"], propagation=propagation)
        except ApiError:
            pass  # already gone: another path of the collection got there first

    def _collect(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        """Deletion in progress: foreground deletion takes dependents first; a namespace empties itself."""
        meta = obj["metadata"]
        if FOREGROUND in (meta.get("finalizers") or []):
            deps = self._dependents(obj)
            for dep_type, dep in deps:
                if not dep["metadata"].get("deletionTimestamp"):
                    self._delete_quietly(dep_type, dep, "Foreground")
            if not self._dependents(obj):
                current = self._bucket(rtype).get(self._okey(rtype, meta.get("namespace"), meta["name"]))
                if current is not None:
                    done = copy.deepcopy(current)
                    done["metadata"]["finalizers"] = [f for f in done["metadata"]["finalizers"] if f != FOREGROUND]
                    self.replace(rtype, meta.get("namespace"), meta["name"], done)
        if rtype.kind == "Namespace":
            name = meta["name"]
            for t in self.registry.all():
                if t.namespaced:
                    for dep in [o for (ns, _), o in list(self._bucket(t).items()) if ns == name]:
                        if not dep["metadata"].get("deletionTimestamp"):
                            self._delete_quietly(t, dep)
            empty = all(ns != name for t in self.registry.all() if t.namespaced for (ns, _) in self._bucket(t))
            current = self._bucket(rtype).get(("", name))
            if empty and current is not None:
                done = copy.deepcopy(current)
                done["metadata"]["finalizers"] = [f for f in done["metadata"].get("finalizers") or []
                                                  if f != "kubernetes"]
                self.replace(rtype, None, name, done)

    def _on_removed(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        # Background garbage collection: dependents whose owners are all gone follow their owner.
        for dep_type, dep in self._dependents(obj):
            if self._owners_gone(dep) and not dep["metadata"].get("deletionTimestamp"):
                self._delete_quietly(dep_type, dep)
        # Owners waiting in foreground deletion or namespaces waiting to empty may now finish.
        for ref in obj["metadata"].get("ownerReferences") or []:
            owner = self.by_uid(ref.get("uid", ""))
            if owner is not None and owner["metadata"].get("deletionTimestamp"):
                owner_type = self._by_uid[ref["uid"]][0]
                self._collect(owner_type, owner)
        if rtype.namespaced and obj["metadata"].get("namespace"):
            ns_type = self._type("", "namespaces")
            ns = self._bucket(ns_type).get(("", obj["metadata"]["namespace"]))
            if ns is not None and ns["metadata"].get("deletionTimestamp"):
                self._collect(ns_type, ns)
        if rtype.kind == "CustomResourceDefinition":
            for served in self.registry.unregister_crd(obj["metadata"]["name"]):
                for cr in list(self._bucket(served).values()):
                    self._remove(served, cr)

    def _on_create(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        if rtype.kind == "Namespace":
            obj["status"] = {"phase": "Active"}
            obj["spec"] = {"finalizers": ["kubernetes"]}
        elif rtype.kind == "Service":
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            if spec.get("clusterIP") != "None":
                spec["clusterIP"] = self._cluster_ip()
                spec["clusterIPs"] = [spec["clusterIP"]]
            for port in spec.get("ports") or []:
                port.setdefault("protocol", "TCP")
                port.setdefault("targetPort", port.get("port"))
            obj["status"] = {"loadBalancer": {}}
        elif rtype.kind == "CustomResourceDefinition":
            self._crd_status(obj)

    def _on_update(self, rtype: ResourceType, new: dict[str, Any], old: dict[str, Any]) -> None:
        if rtype.kind == "Service":
            new.setdefault("spec", {}).setdefault("clusterIP", old.get("spec", {}).get("clusterIP"))
            new["spec"].setdefault("clusterIPs", old.get("spec", {}).get("clusterIPs"))
        elif rtype.kind == "CustomResourceDefinition" and "status" not in new:
            self._crd_status(new)

    def _after_write(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        if rtype.kind == "CustomResourceDefinition" and not obj["metadata"].get("deletionTimestamp"):
            self.registry.register_crd(obj)
        if self._owners_gone(obj) and not obj["metadata"].get("deletionTimestamp"):
            # An object created with owners that no longer exist is collected, as the real GC would.
            asyncio.get_running_loop().call_soon(self._collect_orphan, rtype, obj["metadata"]["uid"])

    def _collect_orphan(self, rtype: ResourceType, uid: str) -> None:
        obj = self.by_uid(uid)
        if obj is not None and self._owners_gone(obj):
            self._delete_quietly(rtype, obj)

    def _crd_status(self, crd: dict[str, Any]) -> None:
        names = crd.get("spec", {}).get("names", {})
        stamp = now()
        crd["status"] = {
            "acceptedNames": names,
            "storedVersions": [v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("storage")],
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": stamp},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": stamp}]}

    def _cluster_ip(self) -> str:
        """The next free address after the last one given (scanning every Service per create was quadratic)."""
        for _ in range(10, 65000):
            n = self._next_cluster_ip
            self._next_cluster_ip = n + 1 if n + 1 < 65000 else 10
            ip = f"10.96.{n // 250}.{n % 250 + 1}"
            if ip not in self._cluster_ips:
                return ip
        raise ApiError(500, "InternalError", "service IP range exhausted")

    def all_objects(self, rtype: ResourceType) -> Iterable[dict[str, Any]]:
        return list(self._bucket(rtype).values())


def _fits_etcd(obj: dict[str, Any]) -> None:
    if len(json.dumps(obj, separators=(",", ":"))) > ETCD_MAX_OBJECT_BYTES:
        raise ApiError(500, "InternalError", "etcdserver: request is too large")
