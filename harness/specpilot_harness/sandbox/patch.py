"""The patch formats kubectl, Kopf and the Kubernetes client send: JSON merge (RFC 7386),
JSON patch (RFC 6902), strategic merge, and the field-set bookkeeping behind server-side apply."""

from __future__ import annotations

import copy
from typing import Any

# Strategic merge needs each list's merge key, which the real server reads from Go struct tags. The
# emulator keys them by field name: the same field name has the same strategy across the core types.
MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "imagePullSecrets": "name",
    "ownerReferences": "uid", "conditions": "type", "hostAliases": "ip", "topologySpreadConstraints": "topologyKey",
}
# Lists of scalars merged as sets (patchStrategy: merge on a []string).
MERGED_SCALAR_LISTS = {"finalizers"}
# Lists keyed by a field that differs per context: container ports by containerPort, service ports by port.
PORT_KEYS = ("containerPort", "port")


class PatchError(ValueError):
    """A patch that cannot be applied (the API answers 422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise PatchError(f"path /{'/'.join(parts)} does not exist")
    return node, parts[-1]


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, last = _parent(doc, parts)
    try:
        return parent[int(last)] if isinstance(parent, list) else parent[last]
    except (KeyError, IndexError, ValueError) as exc:
        raise PatchError(f"path {path} does not exist") from exc


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, _pointer(path))
    try:
        return parent.pop(int(last)) if isinstance(parent, list) else parent.pop(last)
    except (KeyError, IndexError, ValueError) as exc:
        raise PatchError(f"path {path} does not exist") from exc


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _parent(doc, parts)
    if isinstance(parent, list):
        if replace:
            parent[int(last)] = value
        elif last == "-":
            parent.append(value)
        else:
            parent.insert(int(last), value)
    elif isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"path {path} does not exist")
        parent[last] = value
    else:
        raise PatchError(f"path {path} does not point into an object or array")
    return doc


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"the test of {path} failed")
        elif kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "move":
            doc = _add(doc, path, _remove(doc, op["from"]))
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc


def _list_key(field: str, items: list[Any]) -> str | None:
    if field in MERGE_KEYS:
        return MERGE_KEYS[field]
    if field == "ports":
        for key in PORT_KEYS:
            if any(isinstance(i, dict) and key in i for i in items):
                return key
    return None


def _merge_list(field: str, target: list[Any], patch: list[Any]) -> list[Any]:
    if field in MERGED_SCALAR_LISTS:
        return list(target) + [v for v in patch if v not in target]
    key = _list_key(field, target + patch)
    if key is None:
        return [strategic_merge(None, v) for v in patch]
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [strategic_merge(None, i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    out = [copy.deepcopy(i) for i in target]
    for item in patch:
        if not isinstance(item, dict):
            continue
        idx = next((n for n, cur in enumerate(out) if isinstance(cur, dict) and cur.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append(strategic_merge(None, item))
        else:
            out[idx] = strategic_merge(out[idx], item)
    return out


def strategic_merge(target: Any, patch: Any) -> Any:
    """Strategic merge patch: a merge patch whose keyed lists merge by element and whose `$` directives
    ($patch, $retainKeys, $deleteFromPrimitiveList, $setElementOrder) act as kubectl means them."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: strategic_merge(None, v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            out[field] = [v for v in out.get(field, []) if v not in value]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_list(key, out[key], value)
        elif isinstance(value, list):
            out[key] = [strategic_merge(None, v) for v in value if not (isinstance(v, dict) and "$patch" in v)]
        else:
            out[key] = strategic_merge(out.get(key), value)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain or k in patch}
    return out


def remove_unapplied(obj: Any, previous: Any, current: Any) -> Any:
    """Server-side apply's removal rule, for one manager: a field it applied before and no longer
    applies is removed. (Shared ownership between several managers is not tracked; see docs/sandbox.md.)"""
    if not isinstance(obj, dict) or not isinstance(previous, dict):
        return obj
    current = current if isinstance(current, dict) else {}
    out = dict(obj)
    for key, old in previous.items():
        if key not in current:
            out.pop(key, None)
        elif isinstance(old, dict) and isinstance(out.get(key), dict):
            out[key] = remove_unapplied(out[key], old, current[key])
        elif isinstance(old, list) and isinstance(out.get(key), list) and isinstance(current[key], list):
            mk = _list_key(key, old + current[key])
            if mk is not None:
                keep = {i.get(mk): i for i in current[key] if isinstance(i, dict)}
                before = {i.get(mk): i for i in old if isinstance(i, dict)}
                # Items still applied lose the fields they no longer carry (a container's securityContext).
                out[key] = [remove_unapplied(i, before[i.get(mk)], keep[i.get(mk)])
                            if isinstance(i, dict) and i.get(mk) in keep and i.get(mk) in before else i
                            for i in out[key] if not (isinstance(i, dict) and i.get(mk) in before.keys() - keep.keys())]
    return out


def apply_config(live: dict[str, Any] | None, applied: dict[str, Any],
                 previous: dict[str, Any] | None) -> dict[str, Any]:
    """Server-side apply of `applied` by one manager whose last applied configuration was `previous`:
    applied lists replace keyless lists, keyed lists merge by key, fields it stopped applying go."""
    merged = strategic_merge(live or {}, applied)
    return remove_unapplied(merged, previous, applied) if previous else merged
