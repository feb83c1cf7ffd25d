"""The memo of CEL outcomes (api/cel.py): keyed by the fields of `self` a rule reads, so it must give what
evaluating the rule afresh gives, for any value."""

from __future__ import annotations

import pytest

from specpilot.api import cel


@pytest.mark.parametrize(("rule", "fields"), [
    ("self.method != 'off' || !has(self.schedule)", {"method", "schedule"}),
    ("!has(self.tuning) || self.tuning.candidates.all(c, c <= 15)", {"tuning"}),
    ("self.method in ['a', 'b'] || self.numSpeculativeTokens >= 1", {"method", "numSpeculativeTokens"}),
    ("duration(self.analysisWindow) >= duration('2s')", {"analysisWindow"}),
])
def test_fields_a_rule_reads(rule: str, fields: set[str]) -> None:
    assert cel._fields(rule) == frozenset(fields)


@pytest.mark.parametrize("rule", [
    "self.all(k, size(k) <= 64)",          # a macro on self itself
    "size(self) <= 3",                     # self as a whole
    "self[0] == 1",                        # indexed
    "self.x == 1 || self == {}",           # one field, then the whole
    "self.?x.orValue(1) == 1",             # optional field syntax
])
def test_any_other_use_of_self_reads_it_whole(rule: str) -> None:
    assert cel._fields(rule) is None


def _fresh(rule: dict[str, str], value: object) -> tuple[bool, str]:
    return cel._evaluated(rule, value)


@pytest.mark.parametrize("value", [
    {"method": "off", "schedule": [1]},
    {"method": "off"},
    {"method": "mtp", "schedule": [1], "other": "ignored"},
    {"method": "off", "schedule": [1], "other": "changes nothing"},
])
def test_memo_matches_a_fresh_evaluation(value: dict[str, object]) -> None:
    rule = {"rule": "self.method != 'off' || !has(self.schedule)",
            "messageExpression": "'method ' + self.method + ' takes no schedule'"}
    assert cel._outcome(rule, value) == _fresh(rule, value)


def test_a_field_the_message_reads_is_part_of_the_key() -> None:
    rule = {"rule": "self.a > 1", "messageExpression": "'b is ' + self.b"}
    assert cel._outcome(rule, {"a": 0, "b": "x"}) == (False, "b is x")
    assert cel._outcome(rule, {"a": 0, "b": "y"}) == (False, "b is y")


def test_int_and_double_are_kept_apart() -> None:
    rule = {"rule": "self.a == 1", "message": "not int 1"}
    assert cel._outcome(rule, {"a": 1}) == (True, "")
    assert cel._outcome(rule, {"a": 1.0}) == _fresh(rule, {"a": 1.0})


def test_evaluation_errors_are_failures_with_the_reason() -> None:
    ok, message = cel._outcome({"rule": "self.missing == 1"}, {"other": 1})
    assert not ok and "failed to evaluate" in message
