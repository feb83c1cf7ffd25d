"""Pruning: what the API server does to unknown fields of a custom resource before admission (drops
them with a warning, or refuses them under fieldValidation=Strict). Defaulting and validation are
api/admission.py's, shared with `specpilot validate`."""

from __future__ import annotations

from typing import Any

_META_KEYS = ("apiVersion", "kind", "metadata")


def _preserves(schema: dict[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or schema.get("type") is None and \
        "properties" not in schema and "additionalProperties" not in schema


def _walk(value: Any, schema: dict[str, Any], path: str, unknown: list[str]) -> Any:
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
            out[key] = _walk(item, sub, f"{path}.{key}" if path else key, unknown)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_walk(v, schema["items"], f"{path}[{n}]", unknown) for n, v in enumerate(value)]
    return value


def prune(obj: dict[str, Any], schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the object with unknown fields removed, their paths).
    apiVersion, kind and metadata are the server's, never pruned here."""
    unknown: list[str] = []
    body = {k: v for k, v in obj.items() if k not in _META_KEYS}
    body_schema = dict(schema)
    body_schema["properties"] = {k: v for k, v in (schema.get("properties") or {}).items() if k not in _META_KEYS}
    out = _walk(body, body_schema, "", unknown)
    out.update({k: obj[k] for k in _META_KEYS if k in obj})
    return out, unknown
