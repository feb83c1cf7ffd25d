"""The resource types the emulated API server serves: built-ins plus whatever CRDs register."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Column:
    """One printer column, as a CRD's additionalPrinterColumns entry describes it."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    columns: tuple[Column, ...] = ()
    # openAPIV3Schema of a CRD version; None for built-ins (not validated beyond metadata).
    schema: dict[str, Any] | None = None
    # The whole CRD a custom resource came from, for the admission check.
    crd: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Identity of the stored collection (one served version per resource here)."""
        return (self.group, self.plural)

    @property
    def has_generation(self) -> bool:
        # Kubernetes bumps metadata.generation on spec changes of objects with a status subresource;
        # pods are the notable exception.
        return "status" in self.subresources and self.kind != "Pod"


def _age() -> Column:
    return Column("Age", "date", ".metadata.creationTimestamp")


def _builtin(group: str, version: str, plural: str, kind: str, namespaced: bool = True, *,
             short: tuple[str, ...] = (), cats: tuple[str, ...] = (), subs: frozenset[str] = frozenset(),
             cols: tuple[Column, ...] = ()) -> ResourceType:
    return ResourceType(group, version, plural, kind, namespaced, singular=kind.lower(), short_names=short,
                        categories=cats, subresources=subs, columns=cols + (_age(),))


STATUS = frozenset({"status"})
SCALABLE = frozenset({"status", "scale"})

BUILTINS: tuple[ResourceType, ...] = (
    _builtin("", "v1", "namespaces", "Namespace", False, short=("ns",), subs=STATUS,
             cols=(Column("Status", "string", ".status.phase"),)),
    _builtin("", "v1", "pods", "Pod", short=("po",), cats=("all",), subs=STATUS, cols=(
        Column("Status", "string", ".status.phase"),
        Column("IP", "string", ".status.podIP"),
        Column("Node", "string", ".spec.nodeName", priority=1))),
    _builtin("", "v1", "services", "Service", short=("svc",), cats=("all",), subs=STATUS, cols=(
        Column("Type", "string", ".spec.type"),
        Column("Cluster-IP", "string", ".spec.clusterIP"),
        Column("Selector", "string", ".spec.selector", priority=1))),
    _builtin("", "v1", "nodes", "Node", False, short=("no",), subs=STATUS, cols=(
        Column("Status", "string", '.status.conditions[?(@.type=="Ready")].type'),
        Column("Version", "string", ".status.nodeInfo.kubeletVersion"))),
    _builtin("", "v1", "endpoints", "Endpoints", short=("ep",)),
    _builtin("", "v1", "configmaps", "ConfigMap", short=("cm",)),
    _builtin("", "v1", "secrets", "Secret"),
    # Stored only (nothing binds them): the operator reads a model cache claim's access modes.
    _builtin("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short=("pvc",), subs=STATUS, cols=(
        Column("Status", "string", ".status.phase"),
        Column("Access Modes", "string", ".spec.accessModes"),
        Column("StorageClass", "string", ".spec.storageClassName"))),
    _builtin("", "v1", "serviceaccounts", "ServiceAccount", short=("sa",)),
    _builtin("", "v1", "events", "Event", short=("ev",), cols=(
        Column("Type", "string", ".type"),
        Column("Reason", "string", ".reason"),
        Column("Object", "string", ".involvedObject.name"),
        Column("Message", "string", ".message"))),
    _builtin("apps", "v1", "deployments", "Deployment", short=("deploy",), cats=("all",), subs=SCALABLE, cols=(
        Column("Replicas", "integer", ".spec.replicas"),
        Column("Ready", "integer", ".status.readyReplicas"),
        Column("Up-to-date", "integer", ".status.updatedReplicas"),
        Column("Available", "integer", ".status.availableReplicas"))),
    _builtin("apps", "v1", "replicasets", "ReplicaSet", short=("rs",), cats=("all",), subs=SCALABLE, cols=(
        Column("Desired", "integer", ".spec.replicas"),
        Column("Current", "integer", ".status.replicas"),
        Column("Ready", "integer", ".status.readyReplicas"))),
    _builtin("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
    # Stored and served so that manifests (the Helm chart's RBAC, PDBs) apply; nothing enforces them.
    _builtin("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    _builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    _builtin("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    _builtin("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    _builtin("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", short=("pdb",), subs=STATUS),
    _builtin("coordination.k8s.io", "v1", "leases", "Lease", cols=(
        Column("Holder", "string", ".spec.holderIdentity"),)),
    _builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
             short=("crd", "crds"), subs=STATUS, cols=(Column("Created At", "date", ".metadata.creationTimestamp"),)),
)


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The served versions of a CustomResourceDefinition, as resource types."""
    spec = crd["spec"]
    names = spec["names"]
    out = []
    for version in spec.get("versions", []):
        if not version.get("served", True):
            continue
        subs = frozenset(version.get("subresources", {}) or {})
        cols = tuple(Column(c["name"], c.get("type", "string"), c["jsonPath"], c.get("description", ""),
                            c.get("priority", 0)) for c in version.get("additionalPrinterColumns", []) or [])
        if not cols or all(c.name != "Age" for c in cols):
            cols = cols + (_age(),)
        out.append(ResourceType(
            spec["group"], version["name"], names["plural"], names["kind"], spec.get("scope") == "Namespaced",
            singular=names.get("singular", names["kind"].lower()), short_names=tuple(names.get("shortNames", [])),
            categories=tuple(names.get("categories", [])), subresources=subs, columns=cols,
            schema=(version.get("schema") or {}).get("openAPIV3Schema"), crd=crd))
    return out


class Registry:
    """Lookup of served resource types by URL parts, by kind, and by name as kubectl spells them."""

    def __init__(self) -> None:
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        self._by_crd: dict[str, list[ResourceType]] = {}
        for rtype in BUILTINS:
            self._add(rtype)

    def _add(self, rtype: ResourceType) -> None:
        self._by_path[(rtype.group, rtype.version, rtype.plural)] = rtype

    def register_crd(self, crd: dict[str, Any]) -> list[ResourceType]:
        self.unregister_crd(crd["metadata"]["name"])
        types = types_from_crd(crd)
        for rtype in types:
            self._add(rtype)
        self._by_crd[crd["metadata"]["name"]] = types
        return types

    def unregister_crd(self, name: str) -> list[ResourceType]:
        types = self._by_crd.pop(name, [])
        for rtype in types:
            self._by_path.pop((rtype.group, rtype.version, rtype.plural), None)
        return types

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for rtype in self._by_path.values():
            if rtype.api_version == api_version and rtype.kind == kind:
                return rtype
        return None

    def all(self) -> list[ResourceType]:
        return list(self._by_path.values())

    def groups(self) -> dict[str, list[ResourceType]]:
        """Resource types per API group, core ("") included, in registration order."""
        out: dict[str, list[ResourceType]] = {}
        for rtype in self._by_path.values():
            out.setdefault(rtype.group, []).append(rtype)
        return out
