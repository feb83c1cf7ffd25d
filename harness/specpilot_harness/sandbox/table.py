"""Server-side printing: the meta.k8s.io/v1 Table kubectl asks for, with a CRD's printer columns."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from specpilot_harness.sandbox.resources import Column, ResourceType

_STEP = re.compile(r'\.([A-Za-z0-9_-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_.]+)\s*==\s*["\']([^"\']*)["\']\)\]')


def jsonpath(obj: Any, path: str) -> Any:
    """The JSONPath subset printer columns use: .a.b, [0] and [?(@.field=="value")] steps."""
    path = path.strip().strip("{}")
    nodes = [obj]
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            return None
        pos = m.end()
        key, index, fkey, fval = m.groups()
        nxt = []
        for node in nodes:
            if key is not None and isinstance(node, dict) and key in node:
                nxt.append(node[key])
            elif index is not None and isinstance(node, list) and int(index) < len(node):
                nxt.append(node[int(index)])
            elif fkey is not None and isinstance(node, list):
                nxt.extend(i for i in node if isinstance(i, dict) and str(jsonpath(i, "." + fkey)) == fval)
        nodes = nxt
    if not nodes:
        return None
    return nodes[0] if len(nodes) == 1 else nodes


def age(stamp: str | None) -> str:
    if not stamp:
        return "<unknown>"
    seconds = int((datetime.now(timezone.utc) - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds())
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60}s" if seconds < 600 else f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{(seconds % 3600) // 60}m" if seconds < 36000 else f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _cell(column: Column, obj: dict[str, Any]) -> Any:
    value = jsonpath(obj, column.json_path)
    if value is None:
        return "<none>" if column.type == "string" else None
    if column.type == "date":
        return age(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return value


def to_table(rtype: ResourceType, items: list[dict[str, Any]], resource_version: str,
             include_object: str) -> dict[str, Any]:
    columns = [{"name": "Name", "type": "string", "format": "name", "description": "Name of the object",
                "priority": 0}]
    columns += [{"name": c.name, "type": c.type, "format": "", "description": c.description,
                 "priority": c.priority} for c in rtype.columns]
    rows = []
    for obj in items:
        row: dict[str, Any] = {"cells": [obj["metadata"]["name"]] + [_cell(c, obj) for c in rtype.columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": columns, "rows": rows}
