"""What the Kubernetes API server does with a custom resource before storing it: prune nulls, apply
defaults, check the structural schema, then evaluate the CEL rules.

`specpilot validate` runs this first; the sandbox API server calls `admit` to refuse bad objects the
way a real API server would. It works for any CRD's openAPIV3Schema, not only specpilot's.
"""

from __future__ import annotations

from typing import Any

from specpilot_runtime.speculative import Problem

from . import cel, schema

Schema = dict[str, Any]


def schema_of(crd: dict[str, Any], version: str) -> Schema:
    """The openAPIV3Schema of one version of a CustomResourceDefinition object."""
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")


def defaulted(open_api_schema: Schema, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server would store it: nulls pruned, schema defaults filled in."""
    return schema.apply_defaults(open_api_schema, schema.prune_nulls(obj))


def _covers(node: str, path: str) -> bool:
    """True when `path` is `node` or lies under it."""
    return not node or path == node or path.startswith((node + ".", node + "["))


def problems(open_api_schema: Schema, obj: dict[str, Any]) -> list[Problem]:
    """Schema problems, then the CEL rule failures of every part of the object that has none.

    A rule is skipped where its subtree already broke the schema: a CEL rule over a value of the
    wrong type only says the same thing again, less clearly.
    """
    obj = defaulted(open_api_schema, obj)
    found = schema.check(open_api_schema, obj, "")
    if not found:
        return cel.check(open_api_schema, obj, "")
    broken = [p.path for p in found]
    return found + [p for p in _cel_where_clean(open_api_schema, obj, "", broken)]


def _cel_where_clean(node: Schema, value: Any, path: str, broken: list[str]) -> list[Problem]:
    if not any(_covers(path, b) for b in broken):
        return cel.check(node, value, path)
    found: list[Problem] = []
    if isinstance(value, dict):
        props = node.get("properties", {})
        for name, item in value.items():
            if name in props:
                found += _cel_where_clean(props[name], item, schema.join(path, name), broken)
    elif isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            found += _cel_where_clean(node["items"], item, f"{path}[{i}]", broken)
    return found


def admit(open_api_schema: Schema, obj: dict[str, Any]) -> list[str]:
    """Why the API server would refuse `obj` ("spec.x: message" lines); empty when it would accept it."""
    return [f"{p.path or '(object)'}: {p.message}" for p in problems(open_api_schema, obj)]
