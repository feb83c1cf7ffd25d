"""The operator compiles every CEL rule of its CRD once, at start: none is left for a reconcile to compile."""

from __future__ import annotations

from specpilot.api import cel
from specpilot.api.validate import crd_schema, validate_object


def test_every_rule_of_the_crd_is_compiled_once_up_front() -> None:
    count = cel.compile_all(crd_schema())
    assert count > 10
    compiled = dict(cel._PROGRAMS)
    # Admission of a spec touching every part of the schema compiles nothing more.
    validate_object({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                     "metadata": {"name": "chat"},
                     "spec": {"model": "org/m", "speculative": {"method": "eagle3", "draftModel": "org/d",
                                                                 "numSpeculativeTokens": 3},
                              "tuning": {"enabled": True}}})
    assert cel._PROGRAMS == compiled
    assert cel.compile_all(crd_schema()) == count
    assert all(cel._PROGRAMS[rule] is program for rule, program in compiled.items())  # not compiled again
