"""What the pod runner looks at in a pass, kept up to date from the store's change events: controlled objects
by owner, pods by label, Services by selector, and what changed since the last pass. A pass then costs what changed, not everything
stored: with 1000 Deployments a pass over all of them after every change made the sandbox the bottleneck
of `specpilot bench operator`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, TypeVar

# The pod runner's names for the kinds it controls.
KEYS = {"Deployment": "deploy", "ReplicaSet": "rs", "Pod": "pod", "Service": "svc"}

Pair = tuple[str, str, str]  # (namespace, label, value)
ServiceKey = tuple[str, str]  # (namespace, name)
K = TypeVar("K")  # an index's key and member types (`PodIndex._discard` serves every index)
M = TypeVar("M")


def _controller(obj: dict[str, Any]) -> str | None:
    return next((r.get("uid") for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


class PodIndex:
    """ReplicaSets and pods by controller uid; pods by (namespace, label, value); Services by one pair of their
    selector, the one fewest other Services share when it was indexed, so that finding the Services that may
    select a pod costs what could match it, not every Service in its namespace."""

    def __init__(self) -> None:
        self._owned: dict[tuple[str, str], set[str]] = {}  # (child key, controller uid) -> child uids
        self._owner: dict[str, tuple[str, str]] = {}       # child uid -> (child key, controller uid)
        self._by_pair: dict[Pair, set[str]] = {}           # -> pod uids
        self._pairs: dict[str, list[Pair]] = {}            # pod uid -> its pairs
        self._svc_by_pair: dict[Pair, set[ServiceKey]] = {}
        self._svc_pairs: dict[ServiceKey, tuple[Pair, list[Pair]]] = {}  # -> (indexed under, its selector)
        self._svc_pair_count: Counter[Pair] = Counter()  # Services whose selector holds the pair

    def update(self, key: str, event_type: str, obj: dict[str, Any]) -> None:
        if key == "svc":
            self._update_service(event_type, obj)
            return
        uid = obj["metadata"]["uid"]
        self._forget(uid)
        if event_type == "DELETED":
            return
        owner = _controller(obj)
        if key in ("rs", "pod") and owner:
            self._owner[uid] = (key, owner)
            self._owned.setdefault((key, owner), set()).add(uid)
        if key == "pod":
            ns = obj["metadata"]["namespace"]
            pairs = [(ns, k, v) for k, v in (obj["metadata"].get("labels") or {}).items()]
            self._pairs[uid] = pairs
            for pair in pairs:
                self._by_pair.setdefault(pair, set()).add(uid)

    def _forget(self, uid: str) -> None:
        held = self._owner.pop(uid, None)
        if held is not None:
            self._discard(self._owned, held, uid)
        for pair in self._pairs.pop(uid, ()):
            self._discard(self._by_pair, pair, uid)

    @staticmethod
    def _discard(index: dict[K, set[M]], key: K, member: M) -> None:
        members = index.get(key)
        if members is not None:
            members.discard(member)
            if not members:
                del index[key]

    def _update_service(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        held = self._svc_pairs.pop(key, None)
        if held is not None:
            self._discard(self._svc_by_pair, held[0], key)
            self._svc_pair_count.subtract(held[1])
        selector = (obj.get("spec") or {}).get("selector") or {}
        if event_type == "DELETED" or not selector:
            return
        pairs = [(key[0], k, v) for k, v in selector.items()]
        chosen = min(pairs, key=lambda pair: (self._svc_pair_count[pair], -len(pair[2]), pair))
        self._svc_pair_count.update(pairs)
        self._svc_pairs[key] = (chosen, pairs)
        self._svc_by_pair.setdefault(chosen, set()).add(key)

    def services_for(self, pod: dict[str, Any]) -> set[ServiceKey]:
        """Services that may select `pod` (a superset: the caller matches)."""
        ns = pod["metadata"].get("namespace", "")
        found: set[ServiceKey] = set()
        for k, v in (pod["metadata"].get("labels") or {}).items():
            found |= self._svc_by_pair.get((ns, k, v), set())
        return found

    def owned(self, key: str, owner_uid: str) -> set[str]:
        return self._owned.get((key, owner_uid), set())

    def candidates(self, namespace: str, selector: dict[str, str]) -> set[str]:
        """Pods that may match `selector` (a superset: the caller matches): the rarest of its labels."""
        buckets = [self._by_pair.get((namespace, k, v), set()) for k, v in selector.items()]
        return min(buckets, key=len, default=set())


@dataclass
class Dirty:
    """What changed since it was last taken: uids per key, Services and pods whose Endpoints may be stale,
    Services deleted; `full` asks for a pass over everything."""

    uids: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in KEYS.values()})
    services: set[ServiceKey] = field(default_factory=set)
    pods: set[str] = field(default_factory=set)
    gone_services: set[ServiceKey] = field(default_factory=set)
    full: bool = True

    def mark(self, key: str, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if event_type != "DELETED":
            self.uids[key].add(meta["uid"])
        owner = _controller(obj)
        if owner and key in ("rs", "pod"):
            self.uids["deploy" if key == "rs" else "rs"].add(owner)
        if key == "pod":
            self.pods.add(meta["uid"])
        if key == "svc":
            self.services.add((meta.get("namespace", ""), meta["name"]))
        if key == "svc" and event_type == "DELETED":
            self.gone_services.add((meta["namespace"], meta["name"]))

    def take(self, key: str) -> set[str]:
        taken, self.uids[key] = self.uids[key], set()
        return taken

    def take_endpoints(self) -> tuple[set[ServiceKey], set[str]]:
        """Services changed, and pods changed (their Services, before and after, are to be looked at)."""
        taken = self.services, self.pods
        self.services, self.pods = set(), set()
        return taken

    def take_gone_services(self) -> Iterable[ServiceKey]:
        taken, self.gone_services = self.gone_services, set()
        return taken
