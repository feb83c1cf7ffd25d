"""What the API server does to a custom resource with its structural schema before validating it:
defaulting (`default`) and pruning of unknown fields (or refusing them under fieldValidation=Strict)."""

from __future__ import annotations

import copy
from typing import Any

_META_KEYS = ("apiVersion", "kind", "metadata")


def _preserves(schema: dict[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or schema.get("type") is None and \
        "properties" not in schema and "additionalProperties" not in schema


def _walk(value: Any, schema: dict[str, Any], path: str, unknown: list[str], default: bool) -> Any:
    if isinstance(value, dict) and schema.get("type") in (None, "object"):
        props: dict[str, Any] = schema.get("properties", {}) or {}
        extra = schema.get("additionalProperties")
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = props.get(key)
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None:
                if _preserves(schema) or extra is True:
                    out[key] = item
                else:
                    unknown.append(f"{path}.{key}" if path else key)
                continue
            out[key] = _walk(item, sub, f"{path}.{key}" if path else key, unknown, default)
        if default:
            for key, sub in props.items():
                if key not in out and "default" in sub:
                    out[key] = _walk(copy.deepcopy(sub["default"]), sub, f"{path}.{key}", unknown, default)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_walk(v, schema["items"], f"{path}[{n}]", unknown, default) for n, v in enumerate(value)]
    return value


def prune_and_default(obj: dict[str, Any], schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the object with schema defaults filled in and unknown fields removed, the unknown field paths).
    apiVersion, kind and metadata are the server's, never pruned here."""
    unknown: list[str] = []
    body = {k: v for k, v in obj.items() if k not in _META_KEYS}
    body_schema = dict(schema)
    body_schema["properties"] = {k: v for k, v in (schema.get("properties") or {}).items() if k not in _META_KEYS}
    out = _walk(body, body_schema, "", unknown, default=True)
    out.update({k: obj[k] for k in _META_KEYS if k in obj})
    return out, unknown
