"""`validate_object`: every bad input is refused with a message that names the field and what is allowed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specpilot.api.validate import InvalidSpeculativeDeployment, load, validate_object

DELETE = object()


def good() -> dict[str, Any]:
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": "qwen3-8b", "namespace": "llm"},
            "spec": {"model": "Qwen/Qwen3-8B",
                     "speculative": {"method": "dflash", "draftModel": "z-lab/Qwen3-8B-DFlash-b16",
                                     "numSpeculativeTokens": 7, "blockSize": 16},
                     "tuning": {"enabled": True, "candidates": [3, 7, 11, 15]}}}


def with_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """`good()` with dotted paths set (or deleted with DELETE)."""
    obj = good()
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = obj
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = copy.deepcopy(value)
    return obj


# (case id, changes, field path the message must name, words the message must contain)
BAD_INPUTS = [
    ("missing-model", {"spec.model": DELETE}, "spec.model", "required"),
    ("empty-model", {"spec.model": ""}, "spec.model", "at least 1"),
    ("negative-replicas", {"spec.replicas": -1}, "spec.replicas", ">= 0"),
    ("replicas-string", {"spec.replicas": "two"}, "spec.replicas", "integer"),
    ("bad-vendor", {"spec.accelerator": {"vendor": "intel"}}, "spec.accelerator.vendor", "amd, nvidia"),
    ("zero-gpus", {"spec.accelerator": {"count": 0}}, "spec.accelerator.count", ">= 1"),
    ("unknown-method", {"spec.speculative.method": "lookahead"}, "spec.speculative.method", "dflash"),
    ("removed-medusa", {"spec.speculative.method": "medusa"}, "spec.speculative.method", "removed Medusa"),
    ("removed-mlp-speculator", {"spec.speculative.method": "mlp_speculator"}, "spec.speculative.method",
     "removed MLP"),
    ("eagle3-without-draft", {"spec.speculative": {"method": "eagle3", "numSpeculativeTokens": 3},
                              "spec.tuning": {}}, "spec.speculative.draftModel", "needs a draft model"),
    ("dflash-without-draft", {"spec.speculative.draftModel": DELETE}, "spec.speculative.draftModel",
     "needs a draft model"),
    # The draft reaches vLLM inside --speculative-config's JSON, but a hub id or path is never a flag.
    ("draft-like-a-flag", {"spec.speculative.draftModel": "--trust-remote-code"}, "spec.speculative.draftModel",
     "does not start with '-'"),
    ("ngram-with-draft", {"spec.speculative": {"method": "ngram", "draftModel": "x/y", "numSpeculativeTokens": 3},
                          "spec.tuning": {}}, "spec.speculative.draftModel", "takes no draft model"),
    ("n-zero-for-mtp", {"spec.speculative": {"method": "mtp", "numSpeculativeTokens": 0}, "spec.tuning": {}},
     "spec.speculative.numSpeculativeTokens", ">= 1"),
    ("n-omitted-for-eagle3", {"spec.speculative": {"method": "eagle3", "draftModel": "RedHatAI/x"},
                              "spec.tuning": {}}, "spec.speculative.numSpeculativeTokens", ">= 1"),
    ("n-above-dflash-block", {"spec.speculative.numSpeculativeTokens": 16}, "spec.speculative.numSpeculativeTokens",
     "allowed 1..15"),
    ("n-above-small-dflash-block", {"spec.speculative.blockSize": 8, "spec.speculative.numSpeculativeTokens": 8,
                                    "spec.tuning": {}}, "spec.speculative.numSpeculativeTokens", "allowed 1..7"),
    ("n-above-dspark-block", {"spec.speculative": {"method": "dspark", "numSpeculativeTokens": 9, "blockSize": 8},
                              "spec.tuning": {}}, "spec.speculative.numSpeculativeTokens", "allowed 1..8"),
    ("n-above-global-max", {"spec.speculative": {"method": "mtp", "numSpeculativeTokens": 40}, "spec.tuning": {}},
     "spec.speculative.numSpeculativeTokens", "<= 32"),
    ("off-with-n", {"spec.speculative": {"method": "off", "numSpeculativeTokens": 3}, "spec.tuning": {}},
     "spec.speculative.numSpeculativeTokens", "method is off"),
    ("block-size-for-eagle3", {"spec.speculative": {"method": "eagle3", "draftModel": "RedHatAI/x",
                                                     "numSpeculativeTokens": 3, "blockSize": 16}, "spec.tuning": {}},
     "spec.speculative.blockSize", "dflash and dspark"),
    ("extra-unknown-key", {"spec.speculative.extra": {"speculative_lookahead": 3}},
     "spec.speculative.extra.speculative_lookahead", "not a vLLM 0.33 speculative-config key"),
    ("extra-overrides-n", {"spec.speculative.extra": {"num_speculative_tokens": 3}},
     "spec.speculative.extra.num_speculative_tokens", "numSpeculativeTokens"),
    ("extra-overrides-method", {"spec.speculative.extra": {"method": "eagle3"}},
     "spec.speculative.extra.method", "set those fields instead"),
    ("extra-overrides-model", {"spec.speculative.extra": {"model": "other/draft"}},
     "spec.speculative.extra.model", "set those fields instead"),
    ("extra-misleading-key", {"spec.speculative.extra": {"enable_adaptive_k": True}},
     "spec.speculative.extra.enable_adaptive_k", "num_speculative_tokens_per_batch_size"),
    ("extra-schedule-key", {"spec.speculative.extra": {"num_speculative_tokens_per_batch_size": [[1, 8, 3]]}},
     "spec.speculative.extra.num_speculative_tokens_per_batch_size", "spec.speculative.schedule"),
    ("extra-bad-enum", {"spec.speculative.extra": {"rejection_sample_method": "magic"}},
     "spec.speculative.extra.rejection_sample_method", "standard"),
    ("ngram-lookup-inverted", {"spec.speculative": {"method": "ngram", "numSpeculativeTokens": 4,
                                                     "extra": {"prompt_lookup_min": 6, "prompt_lookup_max": 3}},
                               "spec.tuning": {}}, "spec.speculative.extra.prompt_lookup_min", "<= prompt_lookup_max"),
    ("schedule-n-above-n", {"spec.speculative.schedule": [{"minBatchSize": 1, "maxBatchSize": 8,
                                                           "numSpeculativeTokens": 9}]},
     "spec.speculative.schedule[0]", "cannot exceed the started N"),
    ("schedule-range-inverted", {"spec.speculative.schedule": [{"minBatchSize": 9, "maxBatchSize": 4,
                                                                "numSpeculativeTokens": 3}]},
     "spec.speculative.schedule[0].maxBatchSize", ">= minBatchSize"),
    ("schedule-overlap", {"spec.speculative.schedule": [
        {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 7},
        {"minBatchSize": 8, "maxBatchSize": 64, "numSpeculativeTokens": 3}]},
     "spec.speculative.schedule[1]", "not overlap"),
    ("reserved-speculative-flag", {"spec.engine": {"args": ["--speculative-config", "{}"]}},
     "spec.engine.args[0]", "set spec.speculative instead"),
    ("reserved-shortcut-flag", {"spec.engine": {"args": ["--num-speculative-tokens=5"]}},
     "spec.engine.args[0]", "reserved"),
    ("reserved-port-flag", {"spec.engine": {"args": ["--port=9000"]}}, "spec.engine.args[0]", "set by specpilot"),
    ("disable-log-stats-with-tuning", {"spec.engine": {"args": ["--max-model-len=8192", "--disable-log-stats"]}},
     "spec.engine.args[1]", "tuning reads"),
    ("candidate-above-limit", {"spec.tuning.candidates": [3, 7, 16]}, "spec.tuning.candidates[2]",
     "allowed 0..15"),
    ("candidate-negative", {"spec.tuning.candidates": [-1, 3]}, "spec.tuning.candidates[0]", ">= 0"),
    ("candidate-duplicate", {"spec.tuning.candidates": [3, 7, 7]}, "spec.tuning.candidates", "listed 2 times"),
    ("tuning-with-method-off", {"spec.speculative": {"method": "off"}, "spec.tuning": {"enabled": True}},
     "spec.tuning.enabled", "no N to tune"),
    ("bad-objective", {"spec.tuning.objective": "cost"}, "spec.tuning.objective", "throughput, latency"),
    ("bad-duration", {"spec.tuning.canary": {"analysisWindow": "5 minutes"}}, "spec.tuning.canary.analysisWindow",
     "duration like 30s"),
    ("confidence-one", {"spec.tuning.confidence": 1.0}, "spec.tuning.confidence", "< 1.0"),
    ("margin-above-one", {"spec.tuning.promotionMargin": 1.5}, "spec.tuning.promotionMargin", "<= 1.0"),
    ("zero-canaries-per-round", {"spec.tuning.maxCanariesPerRound": 0}, "spec.tuning.maxCanariesPerRound", ">= 1"),
    ("canaries-per-round-string", {"spec.tuning.maxCanariesPerRound": "eight"}, "spec.tuning.maxCanariesPerRound",
     "integer"),
    ("windows-per-round-above-max", {"spec.tuning.maxWindowsPerRound": 20000}, "spec.tuning.maxWindowsPerRound",
     "<= 10000"),
    ("negative-error-gate", {"spec.tuning.errorGate": -1}, "spec.tuning.errorGate", ">= 0"),
    ("zero-drift-threshold", {"spec.tuning.driftThreshold": 0}, "spec.tuning.driftThreshold", "> 0"),
    ("drift-threshold-above-one", {"spec.tuning.driftThreshold": 2}, "spec.tuning.driftThreshold", "<= 1"),
    ("gateway-without-route", {"spec.tuning.canary": {"trafficRouting": "gateway"}},
     "spec.tuning.canary.httpRoute", "required when trafficRouting is gateway"),
    ("model-cache-both-sources", {"spec.engine": {"modelCache": {"claimName": "hf", "hostPath": "/data"}}},
     "spec.engine.modelCache", "exactly one of claimName or hostPath"),
    ("gpu-in-resources", {"spec.engine": {"resources": {"limits": {"amd.com/gpu": 2}}}},
     "spec.engine.resources.limits.amd.com/gpu", "accelerator.count"),
    ("unknown-spec-field", {"spec.numSpeculativeTokens": 3}, "spec.numSpeculativeTokens", "unknown field"),
    ("env-bad-name", {"spec.engine": {"env": [{"name": "1BAD", "value": "x"}]}}, "spec.engine.env[0].name",
     "must match"),
    ("name-not-dns-label", {"metadata.name": "Qwen3.8B"}, "metadata.name", "DNS-1035 label"),
    ("wrong-api-version", {"apiVersion": "specpilot.io/v1"}, "apiVersion", "specpilot.io/v1alpha1"),
    ("schedule-mode-data-parallel", {"spec.tuning.mode": "schedule",
                                     "spec.engine": {"args": ["--data_parallel_size=2"]}},
     "spec.tuning.mode", "no batch-size schedule under data parallelism > 1 (spec.engine.args asks for 2)"),
    ("schedule-data-parallel-abbreviated", {"spec.speculative.schedule": [
        {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 7},
        {"minBatchSize": 9, "maxBatchSize": 4096, "numSpeculativeTokens": 3}],
        "spec.engine": {"args": ["-dp", "4"]}}, "spec.speculative.schedule", "data parallelism > 1"),
    # vLLM's argparse reads "٢" (an Arabic-Indic 2) as 2, as int() does; "²" is no number to either (it
    # raised out of `specpilot validate` and the operator's admission before).
    ("schedule-data-parallel-other-digits", {"spec.tuning.mode": "schedule",
                                             "spec.engine": {"args": ["--data-parallel-size=\u0662"]}},
     "spec.tuning.mode", "data parallelism > 1 (spec.engine.args asks for 2)"),
]


def test_the_good_object_is_valid() -> None:
    assert validate_object(good()) == []


@pytest.mark.parametrize(("changes", "path", "words"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_refused_naming_the_field(changes: dict[str, Any], path: str, words: str) -> None:
    problems = validate_object(with_changes(changes))
    assert problems, "accepted a bad input"
    matching = [p for p in problems if p.path == path]
    assert matching, f"no problem names {path}: {[str(p) for p in problems]}"
    assert any(words in p.message for p in matching), [str(p) for p in matching]


def test_data_parallelism_of_one_or_single_mode_leaves_a_schedule_alone() -> None:
    assert validate_object(with_changes({"spec.tuning.mode": "schedule",
                                         "spec.engine": {"args": ["--data-parallel-size", "1"]}})) == []
    assert validate_object(with_changes({"spec.engine": {"args": ["--data-parallel-size", "2"]}})) == []
    assert validate_object(with_changes({"spec.tuning.mode": "schedule",
                                         "spec.engine": {"args": ["--data-parallel-size=\u00b2"]}})) == []


def test_there_are_at_least_25_distinct_bad_inputs() -> None:
    assert len({c[0] for c in BAD_INPUTS}) >= 25


def test_several_problems_are_all_reported() -> None:
    obj = with_changes({"spec.replicas": -2, "spec.tuning.objective": "cost",
                        "spec.speculative.extra": {"nope": 1}})
    paths = {p.path for p in validate_object(obj)}
    assert {"spec.replicas", "spec.tuning.objective"} <= paths


def test_load_raises_with_every_problem_and_returns_the_defaulted_model() -> None:
    with pytest.raises(InvalidSpeculativeDeployment) as err:
        load(with_changes({"spec.speculative.draftModel": DELETE}))
    assert err.value.problems[0].path == "spec.speculative.draftModel"
    sd = load(good())
    assert sd.spec.tuning.canary.analysis_window == "5m"


def test_status_written_by_the_operator_does_not_affect_validation() -> None:
    obj = good()
    obj["status"] = {"phase": "Running", "someFieldFromANewerOperator": 1}
    assert validate_object(obj) == []
    assert load(obj).status is None
