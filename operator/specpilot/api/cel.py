"""Evaluate a CRD schema's `x-kubernetes-validations` with a real CEL implementation (cel-python).

The rules evaluated here are the ones shipped in the CRD, so a rule that passes these tests is the rule
the API server enforces. Each rule runs with `self` bound to the value at its schema node, once per
list item for rules under `items`, and only where that value is present (as in Kubernetes).
"""

from __future__ import annotations

import json
import re
import threading
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes

from specpilot_runtime.speculative import Problem

from .schema import join

Schema = dict[str, Any]

# `self.field` not followed by a call: a rule that reads `self` only this way depends on those fields only.
_SELF = re.compile(r"(?<![\w.])self\b")
_FIELD = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()")
# Outcomes remembered, by rule and the JSON of what it reads: cel-python interprets a rule in milliseconds
# (a real API server's cel-go in microseconds), and every reconcile and admission would pay it again.
MEMO_SIZE = 16384


_COMPILING = threading.Lock()
_PROGRAMS: dict[str, celpy.Runner] = {}


@lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    """One for every rule: building one builds a Lark parser, which costs far more than compiling a rule."""
    return celpy.Environment()


def _program(rule: str) -> celpy.Runner:
    """Compiled once per rule. Under a lock: the operator's reconcile threads meet the same rules at the
    same moment after a start, and each would otherwise build its own parser (seconds of CPU each)."""
    program = _PROGRAMS.get(rule)
    if program is None:
        with _COMPILING:
            program = _PROGRAMS.get(rule)
            if program is None:
                env = _environment()
                program = _PROGRAMS[rule] = env.program(env.compile(rule))
    return program


def compile_all(schema: Schema) -> int:
    """Compile every rule under `schema` now (the operator does at start, before its first reconcile waits
    for the parser); returns how many."""
    count = 0
    for rule in schema.get("x-kubernetes-validations", ()):
        for text in (rule["rule"], rule.get("messageExpression")):
            if text:
                _program(text)
                count += 1
    for sub in (*schema.get("properties", {}).values(), schema.get("items"), schema.get("additionalProperties")):
        if isinstance(sub, dict):
            count += compile_all(sub)
    return count


def evaluate(rule: str, value: Any) -> bool:
    """True when `rule` holds for `self = value`; raises ValueError when it cannot be evaluated."""
    try:
        result = _program(rule).evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELEvalError as err:
        raise ValueError(f"rule {rule!r} failed to evaluate: {err.args[0]}") from err
    if isinstance(result, celpy.CELEvalError):
        raise ValueError(f"rule {rule!r} failed to evaluate: {result.args[0]}")
    if not isinstance(result, celtypes.BoolType):
        raise ValueError(f"rule {rule!r} returned {result!r}, not a boolean")
    return bool(result)


@lru_cache(maxsize=None)
def _fields(rule: str) -> frozenset[str] | None:
    """The fields of `self` a rule reads, or None when it uses `self` any other way (whole, indexed, a
    macro on it). A string literal can only make this conservative: an extra field, or None."""
    fields = set()
    for match in _SELF.finditer(rule):
        field = _FIELD.match(rule, match.end())
        if field is None:
            return None
        fields.add(field.group(1))
    return frozenset(fields)


def _reads(rules: tuple[str, ...], value: Any) -> Any:
    """The part of `value` that `rules` can see: the same outcome as `value`, a smaller memo key."""
    fields: set[str] = set()
    for rule in rules:
        used = _fields(rule)
        if used is None or not isinstance(value, dict):
            return value
        fields |= used
    return {k: v for k, v in value.items() if k in fields}


def _outcome(rule: dict[str, str], value: Any) -> tuple[bool, str]:
    """(holds, message when it does not) for `self = value`, remembered by what the rule reads."""
    rules = (rule["rule"], rule.get("messageExpression", ""))
    try:
        key = json.dumps(_reads(rules, value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):  # not plain JSON: evaluate it as it is
        return _evaluated(rule, value)
    return _memo(tuple(sorted(rule.items())), key)


@lru_cache(maxsize=MEMO_SIZE)
def _memo(rule: tuple[tuple[str, str], ...], key: str) -> tuple[bool, str]:
    return _evaluated(dict(rule), json.loads(key))


def _evaluated(rule: dict[str, str], value: Any) -> tuple[bool, str]:
    try:
        if evaluate(rule["rule"], value):
            return True, ""
        return False, _message(rule, value)
    except ValueError as err:
        return False, str(err)


def _message(rule: dict[str, str], value: Any) -> str:
    """messageExpression's text when it evaluates to a string, else message (as the API server does)."""
    fallback = rule.get("message") or f"failed rule: {rule['rule']}"
    expression = rule.get("messageExpression")
    if not expression:
        return fallback
    try:
        text = _program(expression).evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELEvalError:
        return fallback
    return str(text) if isinstance(text, str) and text else fallback


def _field_path(path: str, field_path: str) -> str:
    """Kubernetes' `fieldPath` (".a.b") is relative to the rule's node."""
    return join(path, field_path.lstrip(".")) if field_path else path


def check(schema: Schema, value: Any, path: str) -> list[Problem]:
    """Every CEL rule under `schema` that `value` breaks, reported at the rule's fieldPath."""
    problems: list[Problem] = []
    for rule in schema.get("x-kubernetes-validations", ()):
        ok, message = _outcome(rule, value)
        if not ok:
            problems.append(Problem(_field_path(path, rule.get("fieldPath", "")), message))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            sub = props.get(name) or (extra if isinstance(extra, dict) else None)
            if sub is not None:
                problems += check(sub, item, join(path, name))
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += check(schema["items"], item, f"{path}[{i}]")
    return problems
