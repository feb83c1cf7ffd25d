"""The operator compiles every CEL rule of its CRD once, at start: none is left for a reconcile to compile."""

from __future__ import annotations

from specpilot.api import cel
from specpilot.api.validate import crd_schema


def _rules(schema: dict) -> list[str]:
    found = [text for rule in schema.get("x-kubernetes-validations", ())
             for text in (rule["rule"], rule.get("messageExpression")) if text]
    for sub in (*schema.get("properties", {}).values(), schema.get("items"), schema.get("additionalProperties")):
        if isinstance(sub, dict):
            found += _rules(sub)
    return found


def test_every_rule_of_the_crd_is_compiled_once_up_front() -> None:
    rules = _rules(crd_schema())
    assert cel.compile_all(crd_schema()) == len(rules) > 10
    assert set(rules) <= set(cel._PROGRAMS)
    before = dict(cel._PROGRAMS)
    cel.compile_all(crd_schema())
    assert all(cel._PROGRAMS[rule] is before[rule] for rule in rules)  # compiled once, not again
