"""Label and field selectors as the API server parses them from query strings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

_SET_RE = re.compile(r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_./-]*)\s*$")


class SelectorError(ValueError):
    pass


def _split(text: str) -> list[str]:
    """Split on commas that are not inside a set's parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


@dataclass(frozen=True)
class _Req:
    key: str
    op: str  # = != in notin exists !exists
    values: frozenset[str]

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # != and notin


def parse_label_selector(text: str | None) -> Callable[[dict[str, str]], bool]:
    reqs: list[_Req] = []
    for part in _split(text or ""):
        eq = _EQ_RE.match(part)
        if eq:
            key, op, value = eq.groups()
            reqs.append(_Req(key, "!=" if op == "!=" else "=", frozenset({value})))
            continue
        st = _SET_RE.match(part)
        if not st:
            raise SelectorError(f"unable to parse requirement: {part!r}")
        neg, key, op, values = st.groups()
        if op:
            reqs.append(_Req(key, op, frozenset(v.strip() for v in values.split(",") if v.strip())))
        else:
            reqs.append(_Req(key, "!exists" if neg else "exists", frozenset()))
    return lambda labels: all(r.matches(labels or {}) for r in reqs)


def required_labels(text: str | None) -> list[tuple[str, str]]:
    """The label=value pairs every object a selector matches must carry (its `=`, `==` and one-value `in`
    requirements): what a label index can narrow a list by."""
    out = []
    for part in _split(text or ""):
        eq = _EQ_RE.match(part)
        if eq and eq.group(2) != "!=":
            out.append((eq.group(1), eq.group(3)))
            continue
        st = _SET_RE.match(part)
        if st and not st.group(1) and st.group(3) == "in":
            values = [v.strip() for v in st.group(4).split(",") if v.strip()]
            if len(values) == 1:
                out.append((st.group(2), values[0]))
    return out


def selector_from_match(spec: dict[str, Any] | None) -> Callable[[dict[str, str]], bool]:
    """A LabelSelector object (matchLabels + matchExpressions) as a predicate. Empty matches all."""
    spec = spec or {}
    reqs = [_Req(k, "=", frozenset({v})) for k, v in (spec.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in spec.get("matchExpressions") or []:
        reqs.append(_Req(expr["key"], ops[expr["operator"]], frozenset(expr.get("values") or [])))
    return lambda labels: all(r.matches(labels or {}) for r in reqs)


def _field(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def parse_field_selector(text: str | None) -> Callable[[dict[str, Any]], bool]:
    """Field selectors on any dotted path (the real server allows a per-type subset)."""
    reqs: list[tuple[str, bool, str]] = []
    for part in _split(text or ""):
        eq = _EQ_RE.match(part)
        if not eq:
            raise SelectorError(f"invalid field selector: {part!r}")
        key, op, value = eq.groups()
        reqs.append((key, op != "!=", value))
    return lambda obj: all((_field(obj, k) == v) == want for k, want, v in reqs)
