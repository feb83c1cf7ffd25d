"""Structural-schema checks and defaulting, as the Kubernetes API server applies them to a custom resource.

Covers the OpenAPI v3 subset a structural CRD schema uses: type, properties, required,
additionalProperties, items, enum, minimum/maximum (and their exclusive forms), minLength/maxLength,
pattern, minItems/maxItems, minProperties/maxProperties, default and x-kubernetes-preserve-unknown-fields. Unknown fields are
reported rather than silently pruned, like `kubectl apply` with strict field validation.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from specpilot_runtime.engine_config import NO_NUL_PATTERN
from specpilot_runtime.speculative import MODEL_PATTERN, Problem

from .models import ABSOLUTE_PATH_PATTERN, DURATION_PATTERN, IMAGE_PATTERN, NAME_PATTERN

Schema = dict[str, Any]

# Patterns explained in words, so a message says what is allowed rather than quoting a regex.
_PATTERN_HINTS = {
    DURATION_PATTERN: "a duration like 30s, 5m or 1h30m",
    NAME_PATTERN: "a DNS-1035 label: lower-case letters, digits and '-', starting with a letter",
    MODEL_PATTERN: "a hub id or path that does not start with '-' (vLLM would read it as a flag) "
                   "and has no control characters and no bidirectional-text overrides",
    IMAGE_PATTERN: "an image reference like registry.example.com:5000/team/vllm:v0.33.0 or name@sha256:<hex> "
                   "(lower-case path, ASCII only, no whitespace)",
    NO_NUL_PATTERN: "text without NUL characters",
    ABSOLUTE_PATH_PATTERN: "an absolute path like /data/hf-cache (no empty segments, no trailing '/')",
}

# ObjectMeta is validated by the API server itself; a CRD schema may only restrict its name, so the
# other metadata fields are not unknown.
_METADATA = "metadata"

_TYPE_NAMES = {"object": "an object", "array": "a list", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false"}


def shown(value: Any, limit: int = 80) -> str:
    """A value as a message quotes it: repr, cut short so a huge value cannot flood the output."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def join(path: str, key: str) -> str:
    """Extend a dotted field path (`spec.engine` + `args` -> `spec.engine.args`)."""
    return f"{path}.{key}" if path else key


def prune_nulls(value: Any) -> Any:
    """Drop null fields: the API server treats `field: null` on a non-nullable field as absent."""
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value]
    return value


def apply_defaults(schema: Schema, value: Any) -> Any:
    """A copy of `value` with the schema's defaults filled in, top-down like the API server."""
    if isinstance(value, dict):
        out = dict(value)
        props = schema.get("properties", {})
        for name, sub in props.items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
        for name, item in out.items():
            sub = props.get(name) or (schema.get("additionalProperties")
                                      if isinstance(schema.get("additionalProperties"), dict) else None)
            if sub is not None:
                out[name] = apply_defaults(sub, item)
        return out
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], v) for v in value]
    return value


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _describe(value: Any) -> str:
    for kind in ("boolean", "integer", "number", "string", "array", "object"):
        if _type_ok(kind, value):
            return _TYPE_NAMES[kind]
    return type(value).__name__


def check(schema: Schema, value: Any, path: str) -> list[Problem]:
    """Every way `value` breaks the structural schema, one Problem per field."""
    kind = schema.get("type")
    if kind and not _type_ok(kind, value):
        return [Problem(path, f"must be {_TYPE_NAMES[kind]}, got {_describe(value)} {shown(value)}")]
    problems = _scalar_problems(schema, value, path)
    if isinstance(value, dict):
        problems += _object_problems(schema, value, path)
    elif isinstance(value, list):
        problems += _list_problems(schema, value, path)
    return problems


def _scalar_problems(schema: Schema, value: Any, path: str) -> list[Problem]:
    p: list[Problem] = []
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(str(v) for v in schema["enum"])
        p.append(Problem(path, f"{shown(value)} is not allowed, use one of: {allowed}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None:
            if schema.get("exclusiveMinimum") and value <= low:
                p.append(Problem(path, f"must be > {low}, got {value}"))
            elif value < low:
                p.append(Problem(path, f"must be >= {low}, got {value}"))
        if high is not None:
            if schema.get("exclusiveMaximum") and value >= high:
                p.append(Problem(path, f"must be < {high}, got {value}"))
            elif value > high:
                p.append(Problem(path, f"must be <= {high}, got {value}"))
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            p.append(Problem(path, f"must have at least {schema['minLength']} character(s)"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            p.append(Problem(path, f"must have at most {schema['maxLength']} characters, got {len(value)}"))
        pattern = schema.get("pattern")
        if pattern and not re.search(pattern, value):
            hint = _PATTERN_HINTS.get(pattern)
            p.append(Problem(path, f"{shown(value)} must be {hint}" if hint else
                             f"{shown(value)} must match {pattern}"))
    return p


def _object_problems(schema: Schema, value: dict[str, Any], path: str) -> list[Problem]:
    p: list[Problem] = []
    props: dict[str, Schema] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for name in schema.get("required", ()):
        if name not in value:
            p.append(Problem(join(path, name), "is required"))
    if len(value) < schema.get("minProperties", 0):
        p.append(Problem(path, f"must have at least {schema['minProperties']} key(s)"))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        p.append(Problem(path, f"must have at most {schema['maxProperties']} keys, got {len(value)}"))
    for name, item in value.items():
        where = join(path, name)
        if name in props:
            p += check(props[name], item, where)
        elif isinstance(extra, dict):
            p += check(extra, item, where)
        elif props and not schema.get("x-kubernetes-preserve-unknown-fields") and path != _METADATA:
            p.append(Problem(where, f"unknown field, allowed: {', '.join(props)}"))
    return p


def _list_problems(schema: Schema, value: list[Any], path: str) -> list[Problem]:
    p: list[Problem] = []
    if len(value) < schema.get("minItems", 0):
        p.append(Problem(path, f"must have at least {schema['minItems']} item(s)"))
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        p.append(Problem(path, f"must have at most {schema['maxItems']} items, got {len(value)}"))
    if "items" in schema:
        for i, item in enumerate(value):
            p += check(schema["items"], item, f"{path}[{i}]")
    return p
