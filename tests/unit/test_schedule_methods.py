"""A batch-size schedule only with a method whose vLLM model runner serves it: suffix runs on vLLM's V1 model
runner, which ignores num_speculative_tokens_per_batch_size, so a schedule (or tuning mode schedule) with it is
refused by the runtime, `validate`, the CRD's CEL and the operator, naming the method and what is allowed."""

from __future__ import annotations

import json
from typing import Any

from specpilot.api.rules import RULES
from specpilot.api.validate import validate_object
from specpilot_runtime.speculative import METHODS, OFF, SCHEDULE_METHODS, SpeculativeConfig

from test_api_cel_rules import CRD, SUFFIX_IMAGE
from test_reconcile_child_cache import FakeApi, _reconciler, _sd

ROWS = [(1, 8, 4), (9, 256, 2)]
ALLOWED = ", ".join(SCHEDULE_METHODS)


def sd(speculative: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "x"},
            "spec": {"model": "Qwen/Qwen3-8B", "speculative": speculative, **SUFFIX_IMAGE, **spec}}


def problems(obj: dict[str, Any]) -> dict[str, str]:
    return {p.path: p.message for p in validate_object(obj)}


def test_the_methods_that_honour_a_schedule_come_from_the_method_table() -> None:
    assert "suffix" not in SCHEDULE_METHODS and OFF not in SCHEDULE_METHODS
    assert set(SCHEDULE_METHODS) == {m for m, r in METHODS.items() if r.schedule and m != OFF}
    assert {"mtp", "eagle3", "draft_model", "dflash", "dspark", "ngram"} <= set(SCHEDULE_METHODS)


def test_the_runtime_refuses_a_schedule_for_suffix_naming_the_method_and_the_allowed_ones() -> None:
    (problem,) = SpeculativeConfig(method="suffix", num_speculative_tokens=4,
                                   num_speculative_tokens_per_batch_size=ROWS).problems()
    assert problem.path == "speculative.schedule"
    assert "method suffix" in problem.message and "V1 model runner" in problem.message
    assert f"use one of {ALLOWED}" in problem.message
    assert SpeculativeConfig(method="ngram", num_speculative_tokens=4,
                             num_speculative_tokens_per_batch_size=ROWS).problems() == []


def test_validate_refuses_a_suffix_schedule_with_the_runtimes_words() -> None:
    found = problems(sd({"method": "suffix", "numSpeculativeTokens": 4,
                         "schedule": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4}]}))
    assert list(found) == ["spec.speculative.schedule"]
    assert "method suffix runs on vLLM's V1 model runner" in found["spec.speculative.schedule"]


def test_tuning_mode_schedule_names_the_contender_that_cannot_serve_it() -> None:
    tuning = {"enabled": True, "mode": "schedule"}
    found = problems(sd({"method": "suffix", "numSpeculativeTokens": 4}, tuning=tuning))
    assert list(found) == ["spec.tuning.mode"]
    assert "method suffix (spec.speculative.method)" in found["spec.tuning.mode"]
    assert "use tuning mode single" in found["spec.tuning.mode"] and ALLOWED in found["spec.tuning.mode"]
    found = problems(sd({"method": "ngram", "numSpeculativeTokens": 4},
                        tuning={**tuning, "alternatives": [{"method": "suffix", "numSpeculativeTokens": 4}]}))
    assert list(found) == ["spec.tuning.mode"]
    assert "method suffix (spec.tuning.alternatives[0].method)" in found["spec.tuning.mode"]
    # Mode single tunes one N, which suffix serves; a disabled tuner tunes nothing.
    assert problems(sd({"method": "suffix", "numSpeculativeTokens": 4}, tuning={"enabled": True})) == {}
    assert problems(sd({"method": "suffix", "numSpeculativeTokens": 4},
                       tuning={"enabled": False, "mode": "schedule"})) == {}


def test_the_crds_rules_list_the_same_methods() -> None:
    rules = {r["fieldPath"]: r for r in RULES["spec.speculative"] if "V1 model runner" in r.get("message", "")}
    assert set(rules) == {".schedule", ".ngramDrafter"}  # the drafter's own: tests/unit/test_ngram_drafter.py
    for method in SCHEDULE_METHODS:
        assert f"'{method}'" in rules[".schedule"]["rule"]
    assert "'suffix'" not in rules[".schedule"]["rule"]
    shipped = json.dumps(CRD)
    assert "method suffix runs on vLLM's V1 model runner" in shipped


def test_the_operator_marks_the_spec_invalid_naming_the_method() -> None:
    obj = _sd()
    obj["spec"].update(SUFFIX_IMAGE, speculative={"method": "suffix", "numSpeculativeTokens": 4},
                       tuning={"enabled": True, "mode": "schedule"})
    api = FakeApi(obj)
    assert _reconciler(api).reconcile("team", "chat") == "invalid" and api.children == {}
    valid = {c["type"]: c for c in api.sd["status"]["conditions"]}["SpecValid"]
    assert valid["status"] == "False" and "spec.tuning.mode" in valid["message"]
    assert "method suffix" in valid["message"]
