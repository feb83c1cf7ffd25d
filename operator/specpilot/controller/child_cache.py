"""Each SpeculativeDeployment's children as the operator's own watches of them last reported, so that a
reconcile reads them from memory instead of three lists (about half of its API requests; controller-runtime's
informer cache does the same for Go operators).

Children are keyed by their controller owner reference (the SpeculativeDeployment's uid), never by label: a
label is anyone's to edit, so a child whose label was removed is still known as ours, and its deletion is
still noticed. An object whose owner reference stops naming a parent leaves that parent's children (its
parent is reconciled, and finds its name taken). A re-created SpeculativeDeployment of the same name has a
new uid, so nothing of its predecessor is taken for its own.

Kopf already watches the children's kinds to trigger reconciles (handlers.py); every event it delivers is
kept here, and so is what a reconcile applied or deleted. Per parent and kind, nothing known means "ask the
API": a reconcile then lists that kind and seeds the cache, so an operator that just started, or a kind
whose watch has not reported this parent yet, reads live state. An object never goes back to an older
resourceVersion: a watch event that was already in flight when a reconcile applied a newer version would
otherwise make the next reconcile see the child as edited by hand.
"""

from __future__ import annotations

import threading
from typing import Any

from specpilot.api.models import GROUP, KIND

Parent = tuple[str, str]             # (namespace, SpeculativeDeployment uid)
Named = tuple[str, str]              # (namespace, SpeculativeDeployment name): what a reconcile is asked for
Children = dict[str, dict[str, Any]]  # child name -> object, for one kind
MAX_VERSION_DIGITS = 20  # etcd's revision is an int64


def controller_of(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the SpeculativeDeployment that controls `obj`, from its ownerReferences; None if none."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, dict) or ref.get("kind") != KIND or ref.get("controller") is not True:
            continue
        if str(ref.get("apiVersion", "")).split("/")[0] != GROUP:
            continue
        name, uid = ref.get("name"), ref.get("uid")
        if isinstance(name, str) and isinstance(uid, str) and name and uid:
            return name, uid
    return None


def _version(obj: dict[str, Any]) -> int | None:
    """The resourceVersion as a number, None when it is not one (the API calls it opaque; every real API
    server's is etcd's revision, a number). Without numbers the newest delivery wins."""
    rv = obj.get("metadata", {}).get("resourceVersion")
    return int(rv) if isinstance(rv, str) and rv.isascii() and rv.isdigit() and len(rv) <= MAX_VERSION_DIGITS else None


# A Deployment's status fields a reconcile reads (controller/status.py rollout_of, with its Progressing reason and
# its ReplicaFailure message); kube-controller-manager
# rewrites the rest (conditions' timestamps, availability counts) several times per rollout.
DEPLOYMENT_STATUS_READ = ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas")


def _relevant(obj: dict[str, Any]) -> dict[str, Any]:
    """What a reconcile of the parent could act on: everything but bookkeeping (resourceVersion,
    managedFields) and, of a Deployment's status, only what it reads. An event that changes nothing of this
    asks for no reconcile (the object is still kept: the tuning loop reads the newest)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    read: dict[str, Any] = {}
    if obj.get("kind") == "Deployment" and status:
        read = {k: status.get(k) for k in DEPLOYMENT_STATUS_READ}
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        read["progressing"] = next((c.get("reason") for c in conditions if c.get("type") == "Progressing"), None)
        read["refused"] = next((c.get("message") for c in conditions
                                if c.get("type") == "ReplicaFailure" and c.get("status") == "True"), None)
    return {**{k: v for k, v in obj.items() if k not in ("metadata", "status")}, "metadata": meta, "status": read}


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without metadata.managedFields, which nothing kept in memory reads and which is often most of an
    object's size (a Deployment's field sets): a thousand objects' children cost tens of MiB less."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def newer(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether `new` is at least as new as `old` (by resourceVersion; the newest delivery where not a number)."""
    if old is None:
        return True
    old_v, new_v = _version(old), _version(new)
    return old_v is None or new_v is None or new_v >= old_v


class ChildCache:
    """Children by parent uid and kind; written by the event loop (watch events) and by reconcile threads.
    A deleted child leaves its last resourceVersion behind, so that an older event still in flight does not
    bring it back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by: dict[Parent, dict[str, Children]] = {}
        self._names: dict[Parent, str] = {}  # parent uid -> its name, to ask for its reconcile
        self._where: dict[tuple[str, str, str], Parent] = {}  # (namespace, kind, name) -> the parent holding it
        self._born: set[Parent] = set()  # created while this operator watched: no child predates it
        self._gone: dict[Parent, dict[tuple[str, str], dict[str, Any]]] = {}  # (kind, name) -> last seen
        # (namespace, kind, name) of objects that hold a child's name, and the parent waiting for it to go
        self._blocking: dict[tuple[str, str, str], Named] = {}

    def observe(self, event_type: str | None, obj: dict[str, Any]) -> list[Named]:
        """A watch event of an object of a child kind (type None: Kopf's initial listing). Returns the
        parents to reconcile: none when it tells nothing new (the echo of a reconcile's own apply, older than
        what is known, or an object no parent owns or owned)."""
        meta = obj.get("metadata") or {}
        kind, namespace, name = obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")
        if not kind or not name:
            return []
        owner = controller_of(obj)
        parent = (namespace, owner[1]) if owner else None
        with self._lock:
            affected: list[Named] = []
            waiting = self._blocking.get((namespace, kind, name))
            if waiting is not None and (event_type == "DELETED" or parent is not None):
                del self._blocking[(namespace, kind, name)]  # the name is free, or the object became a child
                affected.append(waiting)
            held_by = self._where.get((namespace, kind, name))
            if held_by is not None and held_by != parent:
                # No longer this parent's (its owner reference was edited away): the parent must see it gone.
                self._put(held_by, kind, obj, gone=True)
                affected.append((namespace, self._names.get(held_by, "")))
            if parent is not None and owner is not None:
                self._names.setdefault(parent, owner[0])
                if self._put(parent, kind, obj, gone=event_type == "DELETED"):
                    affected.append((namespace, owner[0]))
            return [a for a in dict.fromkeys(affected) if a[1]]

    def _put(self, parent: Parent, kind: str, obj: dict[str, Any], gone: bool) -> bool:
        obj = slim(obj)
        meta = obj["metadata"]
        name = meta["name"]
        children = self._by.setdefault(parent, {}).setdefault(kind, {})
        tombstones = self._gone.setdefault(parent, {})
        held = children.get(name)
        if not newer(held or tombstones.get((kind, name)), obj):
            return False
        where = (parent[0], kind, name)
        if gone:
            children.pop(name, None)
            tombstones[(kind, name)] = obj
            if self._where.get(where) == parent:
                del self._where[where]
            return True
        children[name] = obj
        self._where[where] = parent
        tombstones.pop((kind, name), None)
        return held is None or _relevant(held) != _relevant(obj)

    def blocked(self, taken: tuple[str, str, str], parent: Named) -> None:
        """`parent` cannot create its child (namespace, kind, name): another object holds the name. Its
        deletion asks for the parent's reconcile (the resync would, later)."""
        with self._lock:
            self._blocking[taken] = parent

    def get(self, parent: Parent, kind: str) -> Children | None:
        """A copy of what is known of this parent's children of `kind`; None when nothing is."""
        with self._lock:
            children = self._by.get(parent, {}).get(kind)
            return dict(children) if children is not None else None

    def seed(self, parent: Parent, kind: str, listed: list[dict[str, Any]]) -> None:
        """What a live list returned (only this parent's own children), unless a watch event got here first
        (it is at least as new)."""
        with self._lock:
            kinds = self._by.setdefault(parent, {})
            if kind not in kinds:
                kinds[kind] = {obj["metadata"]["name"]: slim(obj) for obj in listed}
                for obj in listed:
                    self._where[(parent[0], kind, obj["metadata"]["name"])] = parent

    def born(self, parent: Parent, name: str, kinds: tuple[str, ...]) -> None:
        """The parent was created while the operator watched (an ADDED event, not the initial listing):
        nothing can be its child yet (its uid is new), so its first reconcile need not list what is not there."""
        with self._lock:
            self._born.add(parent)
            self._names[parent] = name
            kinds_known = self._by.setdefault(parent, {})
            for kind in kinds:
                kinds_known.setdefault(kind, {})

    def is_born(self, parent: Parent) -> bool:
        with self._lock:
            return parent in self._born

    def applied(self, parent: Parent, obj: dict[str, Any]) -> None:
        """What the API answered to a reconcile's apply."""
        with self._lock:
            self._put(parent, obj["kind"], obj, gone=False)

    def deleted(self, parent: Parent, obj: dict[str, Any]) -> None:
        """A child a reconcile deleted (`obj` as it was last known)."""
        with self._lock:
            self._put(parent, obj["kind"], obj, gone=True)

    def forget(self, parent: Parent) -> None:
        with self._lock:
            for kind, children in self._by.pop(parent, {}).items():
                for name in children:
                    if self._where.get((parent[0], kind, name)) == parent:
                        del self._where[(parent[0], kind, name)]
            self._gone.pop(parent, None)
            self._names.pop(parent, None)
            self._born.discard(parent)
