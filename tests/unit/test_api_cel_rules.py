"""The CEL rules shipped in crds/, evaluated by cel-python through `admission.admit`.

These tests read the checked-in CRD file, so the rules tested are the rules the API server receives.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.api.admission import admit, defaulted, schema_of
from specpilot.api.cel import evaluate
from specpilot.api.validate import validate_object

CRD = yaml.safe_load((Path(__file__).resolve().parents[2] / "crds" / "specpilot.io_speculativedeployments.yaml")
                     .read_text())
SCHEMA = schema_of(CRD, "v1alpha1")


def sd(speculative: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "x"},
            "spec": {"model": "Qwen/Qwen3-8B", "speculative": speculative, **spec}}


GOOD = [
    sd({"method": "mtp", "numSpeculativeTokens": 3}),
    sd({"method": "mtp", "draftModel": "google/gemma-4-26B-A4B-it-assistant", "numSpeculativeTokens": 4}),
    sd({"method": "eagle3", "draftModel": "RedHatAI/Qwen3-8B-speculator.eagle3", "numSpeculativeTokens": 3}),
    sd({"method": "dflash", "draftModel": "z-lab/Qwen3-8B-DFlash-b16", "numSpeculativeTokens": 15}),
    sd({"method": "dflash", "draftModel": "d", "numSpeculativeTokens": 7, "blockSize": 8}),
    sd({"method": "dspark", "numSpeculativeTokens": 16}),
    sd({"method": "ngram", "numSpeculativeTokens": 4}, tuning={"enabled": True, "candidates": [0, 2, 4, 32]}),
    sd({"method": "off"}),
    sd({"method": "off", "numSpeculativeTokens": 0}, tuning={"candidates": [0]}),
    sd({"method": "dflash", "draftModel": "d", "numSpeculativeTokens": 7},
       tuning={"enabled": True, "candidates": [3, 7, 11, 15]}),
    sd({"method": "eagle3", "draftModel": "d", "numSpeculativeTokens": 5,
        "schedule": [{"minBatchSize": 1, "maxBatchSize": 4, "numSpeculativeTokens": 5},
                     {"minBatchSize": 5, "maxBatchSize": 64, "numSpeculativeTokens": 0}]}),
    sd({"method": "mtp", "numSpeculativeTokens": 3},
       engine={"args": ["--max-model-len=8192", "--gpu-memory-utilization", "0.9", "--disable-log-stats"]}),
    sd({"method": "mtp", "numSpeculativeTokens": 3}, engine={"modelCache": {"hostPath": "/data/hf"}},
       accelerator={"securityProfile": "recommended"}, tuning={"canary": {"trafficRouting": "gateway", "httpRoute": "qwen"}}),
]

# suffix needs an image declared to carry arctic-inference (rules._package_rules).
SUFFIX_IMAGE: dict[str, Any] = {"image": "registry.example/vllm-arctic:0.33", "imagePackages": ["arctic-inference"]}

# (id, object, path of the refusal, words of its message)
BAD = [
    ("draft-required", sd({"method": "eagle3", "numSpeculativeTokens": 3}), "spec.speculative.draftModel",
     "draftModel is required for methods dflash, draft_model, eagle3"),
    ("draft-forbidden", sd({"method": "suffix", "draftModel": "d", "numSpeculativeTokens": 3}),
     "spec.speculative.draftModel", "must not be set"),
    ("n-below-one", sd({"method": "dspark", "numSpeculativeTokens": 0}), "spec.speculative.numSpeculativeTokens",
     "must be >= 1"),
    ("n-with-off", sd({"method": "off", "numSpeculativeTokens": 2}), "spec.speculative.numSpeculativeTokens",
     "must be 0 or omitted"),
    ("dflash-block", sd({"method": "dflash", "draftModel": "d", "numSpeculativeTokens": 8, "blockSize": 8}),
     "spec.speculative.numSpeculativeTokens", "blockSize - 1"),
    ("dflash-default-block", sd({"method": "dflash", "draftModel": "d", "numSpeculativeTokens": 16}),
     "spec.speculative.numSpeculativeTokens", "blockSize defaults to 16"),
    ("dspark-block", sd({"method": "dspark", "numSpeculativeTokens": 5, "blockSize": 4}),
     "spec.speculative.numSpeculativeTokens", "dspark allows numSpeculativeTokens <= blockSize"),
    ("block-size-wrong-method", sd({"method": "ngram", "numSpeculativeTokens": 3, "blockSize": 4}),
     "spec.speculative.blockSize", "applies only to methods dflash, dspark"),
    ("schedule-above-n", sd({"method": "mtp", "numSpeculativeTokens": 2,
                             "schedule": [{"minBatchSize": 1, "maxBatchSize": 2, "numSpeculativeTokens": 3}]}),
     "spec.speculative.schedule", "<= the started numSpeculativeTokens"),
    ("schedule-with-off", sd({"method": "off", "schedule": [{"minBatchSize": 1, "maxBatchSize": 2,
                                                              "numSpeculativeTokens": 0}]}),
     "spec.speculative.schedule", "omitted when method is off"),
    ("schedule-range", sd({"method": "mtp", "numSpeculativeTokens": 3,
                           "schedule": [{"minBatchSize": 3, "maxBatchSize": 2, "numSpeculativeTokens": 1}]}),
     "spec.speculative.schedule[0].maxBatchSize", ">= minBatchSize"),
    ("schedule-suffix", sd({"method": "suffix", "numSpeculativeTokens": 4,
                            "schedule": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4}]},
                           **SUFFIX_IMAGE),
     "spec.speculative.schedule", "method suffix runs on vLLM's V1 model runner, which ignores"),
    ("schedule-mode-suffix", sd({"method": "suffix", "numSpeculativeTokens": 4}, **SUFFIX_IMAGE,
                                tuning={"enabled": True, "mode": "schedule"}),
     "spec.tuning.mode", "but method suffix"),
    ("schedule-mode-alternative-suffix", sd({"method": "ngram", "numSpeculativeTokens": 4}, **SUFFIX_IMAGE,
                                            tuning={"enabled": True, "mode": "schedule",
                                                    "alternatives": [{"method": "suffix", "numSpeculativeTokens": 4}]}),
     "spec.tuning.mode", "but method suffix"),
    ("candidate-dflash", sd({"method": "dflash", "draftModel": "d", "numSpeculativeTokens": 7, "blockSize": 8},
                            tuning={"candidates": [3, 8]}), "spec.tuning.candidates", "must lie in 0..7 for method dflash"),
    ("candidate-off", sd({"method": "off"}, tuning={"candidates": [0, 1]}), "spec.tuning.candidates",
     "must lie in 0..0 for method off"),
    ("candidate-mtp", sd({"method": "mtp", "numSpeculativeTokens": 3}, tuning={"candidates": [33]}),
     "spec.tuning.candidates[0]", "<= 32"),
    ("tuning-off", sd({"method": "off"}, tuning={"enabled": True}), "spec.tuning.enabled", "no N to tune"),
    ("speculative-flag", sd({"method": "mtp", "numSpeculativeTokens": 3}, engine={"args": ["-sc={}"]}),
     "spec.engine.args", "must not carry speculative flags"),
    ("speculative-flag-bare", sd({"method": "mtp", "numSpeculativeTokens": 3},
                                 engine={"args": ["--speculative-config", "{}"]}),
     "spec.engine.args", "set spec.speculative instead"),
    ("owned-flag", sd({"method": "mtp", "numSpeculativeTokens": 3}, engine={"args": ["--tensor-parallel-size=2"]}),
     "spec.engine.args", "spec.accelerator"),
    ("log-stats", sd({"method": "mtp", "numSpeculativeTokens": 3}, engine={"args": ["--disable-log-stats"]},
                     tuning={"enabled": True}), "spec.engine.args", "--disable-log-stats"),
    ("cache-none", sd({"method": "mtp", "numSpeculativeTokens": 3}, engine={"modelCache": {}}),
     "spec.engine.modelCache", "exactly one"),
    ("gateway", sd({"method": "mtp", "numSpeculativeTokens": 3}, tuning={"canary": {"trafficRouting": "gateway"}}),
     "spec.tuning.canary.httpRoute", "required"),
]


@pytest.mark.parametrize("obj", GOOD, ids=[f"good-{i}" for i in range(len(GOOD))])
def test_good_samples_are_admitted(obj: dict[str, Any]) -> None:
    assert admit(SCHEMA, obj) == []


@pytest.mark.parametrize(("obj", "path", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_samples_are_refused_at_the_field(obj: dict[str, Any], path: str, words: str) -> None:
    refusals = admit(SCHEMA, obj)
    assert any(r.startswith(f"{path}: ") and words in r for r in refusals), refusals


def test_rules_are_skipped_where_the_schema_already_failed() -> None:
    # A string N would make the block-size rule fail to evaluate; only the type error is reported.
    refusals = admit(SCHEMA, sd({"method": "dflash", "draftModel": "d", "numSpeculativeTokens": "7"}))
    assert refusals == ["spec.speculative.numSpeculativeTokens: must be an integer, got a string '7'"]


def test_defaults_are_applied_before_the_rules_run() -> None:
    obj = defaulted(SCHEMA, sd({"method": "mtp", "numSpeculativeTokens": 3}, status=None))
    assert obj["spec"]["tuning"]["enabled"] is False
    assert obj["spec"]["tuning"]["canary"]["progressDeadline"] == "20m"
    assert obj["spec"]["accelerator"] == {"vendor": "amd", "count": 1, "securityProfile": "baseline"}
    assert "status" not in obj


def test_admit_works_for_any_crd_schema() -> None:
    schema = {"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"min": {"type": "integer"}, "max": {"type": "integer", "default": 10}},
        "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min must be <= max"}]}}}
    assert admit(schema, {"spec": {"min": 3}}) == []
    assert admit(schema, {"spec": {"min": 11}}) == ["spec: min must be <= max"]


def test_evaluate_reports_rules_that_cannot_run() -> None:
    with pytest.raises(ValueError, match="failed to evaluate"):
        evaluate("self.missing > 1", {})
    assert evaluate("self.a.all(x, x > 0)", {"a": [1, 2]}) is True


def test_admission_does_not_modify_the_object() -> None:
    # The samples above must not be mutated by admission (the emulator reuses stored objects).
    obj = sd({"method": "mtp", "numSpeculativeTokens": 3})
    before = copy.deepcopy(obj)
    admit(SCHEMA, obj)
    assert obj == before


def test_message_falls_back_when_the_message_expression_cannot_run() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "x-kubernetes-validations": [
        {"rule": "self.n < 3", "message": "n must be < 3", "messageExpression": "'n is ' + self.missing"}]}
    assert admit(schema, {"n": 5}) == ["(object): n must be < 3"]


def test_extra_key_length_is_validates_rule_not_the_crds() -> None:
    # CEL cannot range over extra's keys (a free-form object): the CRD admits a long key, validate refuses it.
    obj = sd({"method": "mtp", "numSpeculativeTokens": 3, "extra": {"k" * 65: 1}})
    assert admit(SCHEMA, obj) == []
    assert any(p.path == "spec.speculative.extra" and "at most 64 characters" in p.message
               for p in validate_object(obj))
