"""Evaluate a CRD schema's `x-kubernetes-validations` with a real CEL implementation (cel-python).

The rules evaluated here are the ones shipped in the CRD, so a rule that passes these tests is the rule
the API server enforces. Each rule runs with `self` bound to the value at its schema node, once per
list item for rules under `items`, and only where that value is present (as in Kubernetes).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes

from specpilot_runtime.speculative import Problem

from .schema import join

Schema = dict[str, Any]


@lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    """One for every rule: building one builds a Lark parser, which costs far more than compiling a rule."""
    return celpy.Environment()


@lru_cache(maxsize=None)
def _program(rule: str) -> celpy.Runner:
    env = _environment()
    return env.program(env.compile(rule))


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
        try:
            ok = evaluate(rule["rule"], value)
            message = _message(rule, value)
        except ValueError as err:
            ok, message = False, str(err)
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
