"""Discovery documents (legacy and aggregated v2) and the OpenAPI v3 documents `kubectl explain` and
kubectl's field-validation check read. Built from the registry on every request, so a CRD is
discoverable the moment it is created."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from specpilot_harness.sandbox.resources import ALL_VERBS, Registry, ResourceType

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
SUB_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"]}


def _resource_entries(rtype: ResourceType) -> list[dict[str, Any]]:
    main = {"name": rtype.plural, "singularName": rtype.singular, "namespaced": rtype.namespaced,
            "kind": rtype.kind, "verbs": list(ALL_VERBS)}
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        main["categories"] = list(rtype.categories)
    subs = [{"name": f"{rtype.plural}/{s}", "singularName": "", "namespaced": rtype.namespaced,
             "kind": "Scale" if s == "scale" else rtype.kind, "verbs": SUB_VERBS[s]}
            for s in sorted(rtype.subresources) if s in SUB_VERBS]
    return [main] + subs


def api_versions(address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = []
    for group, types in registry.groups().items():
        if not group:
            continue
        versions = sorted({t.version for t in types})
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [t for t in registry.groups().get(group, []) if t.version == version]
    if not types:
        return None
    resources = [e for t in types for e in _resource_entries(t)]
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


def _aggregated_resource(rtype: ResourceType) -> dict[str, Any]:
    kind = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    out: dict[str, Any] = {"resource": rtype.plural, "responseKind": kind, "singularResource": rtype.singular,
                           "scope": "Namespaced" if rtype.namespaced else "Cluster", "verbs": list(ALL_VERBS)}
    if rtype.short_names:
        out["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        out["categories"] = list(rtype.categories)
    subs = [{"subresource": s, "verbs": SUB_VERBS[s],
             "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"} if s == "scale" else kind}
            for s in sorted(rtype.subresources) if s in SUB_VERBS]
    if subs:
        out["subresources"] = subs
    return out


def aggregated(registry: Registry, core: bool) -> dict[str, Any]:
    """/api (core only) or /apis (every other group) as an APIGroupDiscoveryList."""
    items = []
    for group, types in registry.groups().items():
        if bool(group) == core:
            continue
        versions = []
        for version in sorted({t.version for t in types}):
            versions.append({"version": version, "freshness": "Current",
                             "resources": [_aggregated_resource(t) for t in types if t.version == version]})
        item: dict[str, Any] = {"metadata": {"name": group} if group else {}, "versions": versions}
        items.append(item)
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": items}


# ---- OpenAPI v3 --------------------------------------------------------------------------------------

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_META_SCHEMA: dict[str, Any] = {
    "description": "ObjectMeta is metadata that all persisted resources must have.",
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Name must be unique within a namespace."},
        "generateName": {"type": "string", "description": "Prefix the server uses to generate a unique name."},
        "namespace": {"type": "string", "description": "Namespace of the object."},
        "labels": {"type": "object", "additionalProperties": {"type": "string"},
                   "description": "Map of string keys and values used to organize and select objects."},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "Unstructured key value map stored with a resource."},
        "uid": {"type": "string", "description": "Unique in time and space value for this object."},
        "resourceVersion": {"type": "string", "description": "Version of this object, for concurrency control."},
        "generation": {"type": "integer", "format": "int64", "description": "Sequence number of spec changes."},
        "creationTimestamp": {"type": "string", "format": "date-time", "description": "When it was created."},
        "deletionTimestamp": {"type": "string", "format": "date-time", "description": "When it will be deleted."},
        "finalizers": {"type": "array", "items": {"type": "string"},
                       "description": "Must be empty before the object is deleted from the registry."},
        "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "description": "Objects this object depends on; garbage collected with them."},
    },
}


def _schema_name(rtype: ResourceType) -> str:
    return ".".join(reversed(rtype.group.split("."))) + f".{rtype.version}.{rtype.kind}"


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_root(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group, types in registry.groups().items():
        for version in sorted({t.version for t in types}):
            doc = json.dumps(openapi_group_version(registry, group, version), sort_keys=True)
            digest = hashlib.sha512(doc.encode()).hexdigest()[:32].upper()
            path = _gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def openapi_group_version(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group-version. Custom resources carry their CRD's schema; built-in
    kinds carry only their paths (which tell kubectl the server validates fields itself), no schema."""
    types = [t for t in registry.groups().get(group, []) if t.version == version]
    if not types:
        return None
    schemas: dict[str, Any] = {OBJECT_META: _META_SCHEMA}
    paths: dict[str, Any] = {}
    params = [{"name": n, "in": "query", "schema": {"type": "string"}}
              for n in ("dryRun", "fieldManager", "fieldValidation")]
    for rtype in types:
        name = _schema_name(rtype)
        gvk = {"group": group, "version": version, "kind": rtype.kind}
        item_path = "/" + _gv_path(group, version) + (
            "/namespaces/{namespace}" if rtype.namespaced else "") + f"/{rtype.plural}/{{name}}"
        ref = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}
        paths[item_path] = {
            op: {"parameters": params, "responses": {"200": ref}, "x-kubernetes-group-version-kind": gvk,
                 "x-kubernetes-action": action}
            for op, action in (("get", "get"), ("put", "put"), ("patch", "patch"), ("delete", "delete"))}
        paths[item_path[: item_path.rindex("/")]] = {
            "post": {"parameters": params, "responses": {"201": ref}, "x-kubernetes-group-version-kind": gvk,
                     "x-kubernetes-action": "post"}}
        if rtype.schema is None:
            continue
        schema = json.loads(json.dumps(rtype.schema))
        props = schema.setdefault("properties", {})
        props["metadata"] = {"allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}],
                             "description": "Standard object's metadata."}
        props.setdefault("apiVersion", {"type": "string", "description": "APIVersion of this representation."})
        props.setdefault("kind", {"type": "string", "description": "Kind of this representation."})
        schema["x-kubernetes-group-version-kind"] = [{"group": group, "version": version, "kind": rtype.kind}]
        schemas[name] = schema
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths, "components": {"schemas": schemas}}
