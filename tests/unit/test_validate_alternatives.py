"""spec.tuning.alternatives: each is validated as spec.speculative is (its draft, block size, extra keys and
candidate limits), by the CRD's CEL rules (the checked-in file, as the API server runs them) and by
`validate_object` (`specpilot validate` and the operator), with the problem at the alternative's path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_validate_bad_inputs import with_changes

from specpilot.api.admission import admit, schema_of
from specpilot.api.models import MAX_ALTERNATIVES
from specpilot.api.validate import validate_object

CRD = yaml.safe_load((Path(__file__).resolve().parents[2] / "crds" / "specpilot.io_speculativedeployments.yaml")
                     .read_text())
SCHEMA = schema_of(CRD, "v1alpha1")

ALTERNATIVES = [
    {"method": "dflash", "draftModel": "z-lab/x", "blockSize": 16, "numSpeculativeTokens": 7},
    {"method": "eagle3", "draftModel": "some/head", "numSpeculativeTokens": 3},
    {"method": "off"},
]
WHERE = "spec.tuning.alternatives[1]"


def with_alternative(alternative: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The valid spec (tuning candidates [3, 7, 11, 15]) with `alternative` second among its alternatives."""
    return with_changes({"spec.tuning.alternatives": [ALTERNATIVES[1], alternative], **changes})


# (case id, alternative, path, words of validate_object's message, words of the CRD's CEL message)
BAD = [
    ("dflash-without-draft", {"method": "dflash", "numSpeculativeTokens": 7}, f"{WHERE}.draftModel",
     "method dflash needs a draft model", "draftModel is required for methods dflash"),
    ("dflash-n-at-block-size", {"method": "dflash", "draftModel": "z-lab/x", "blockSize": 16,
                                "numSpeculativeTokens": 16}, f"{WHERE}.numSpeculativeTokens",
     "16 is too large for dflash (block size 16): allowed 1..15", "dflash allows numSpeculativeTokens <= blockSize - 1"),
    ("off-with-n", {"method": "off", "numSpeculativeTokens": 2}, f"{WHERE}.numSpeculativeTokens",
     "must be 0 or omitted when method is off", "must be 0 or omitted when method is off"),
    ("candidate-above-limit", {"method": "dflash", "draftModel": "z-lab/x", "blockSize": 8,
                               "numSpeculativeTokens": 7, "candidates": [3, 8]}, f"{WHERE}.candidates",
     "8 is above dflash's limit at blockSize 8: allowed 0..7", "must lie in 0..7 for method dflash"),
    ("off-candidate", {"method": "off", "candidates": [0, 2]}, f"{WHERE}.candidates",
     "2 is above off's limit: allowed 0..0", "must lie in 0..0 for method off"),
    ("block-size-wrong-method", {"method": "ngram", "numSpeculativeTokens": 3, "blockSize": 4},
     f"{WHERE}.blockSize", "only dflash and dspark take a block size", "applies only to methods dflash, dspark"),
    ("schedule-above-n", {"method": "mtp", "numSpeculativeTokens": 2,
                          "schedule": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 3}]},
     f"{WHERE}.schedule", "N=3 must lie in 0..numSpeculativeTokens", "<= the started numSpeculativeTokens"),
    ("schedule-range", {"method": "mtp", "numSpeculativeTokens": 3,
                        "schedule": [{"minBatchSize": 3, "maxBatchSize": 2, "numSpeculativeTokens": 1}]},
     f"{WHERE}.schedule[0].maxBatchSize", "must be >= minBatchSize", "must be >= minBatchSize"),
    ("suffix-on-default-image", {"method": "suffix", "numSpeculativeTokens": 4}, "spec.imagePackages",
     "method suffix (in spec.tuning.alternatives) needs the arctic-inference package",
     "method suffix (in spec.tuning.alternatives) needs the arctic-inference package"),
]

# What only `validate_object` can check: free-form extra keys, duplicates, what vLLM refuses at start.
BAD_OFFLINE = [
    ("extra-unknown-key", {"method": "eagle3", "draftModel": "some/other", "numSpeculativeTokens": 3,
                           "extra": {"speculative_lookahead": 3}}, f"{WHERE}.extra.speculative_lookahead",
     "not a vLLM 0.33 speculative-config key"),
    ("extra-schedule-key", {"method": "mtp", "numSpeculativeTokens": 3,
                            "extra": {"num_speculative_tokens_per_batch_size": [[1, 8, 3]]}},
     f"{WHERE}.extra.num_speculative_tokens_per_batch_size", f"set {WHERE}.schedule instead"),
    ("duplicate-candidate", {"method": "mtp", "numSpeculativeTokens": 3, "candidates": [1, 3, 1]},
     f"{WHERE}.candidates", "1 is listed 2 times"),
    ("same-as-earlier-alternative", dict(ALTERNATIVES[1], numSpeculativeTokens=5), WHERE,
     "has the same method, draftModel, blockSize, extra and ngramDrafter as spec.tuning.alternatives[0]"),
    ("same-as-speculative", {"method": "dflash", "draftModel": "z-lab/Qwen3-8B-DFlash-b16", "blockSize": 16,
                             "numSpeculativeTokens": 3, "candidates": [1, 3]}, WHERE,
     "has the same method, draftModel, blockSize, extra and ngramDrafter as spec.speculative"),
    ("removed-method", {"method": "medusa", "numSpeculativeTokens": 3}, f"{WHERE}.method", "vLLM removed Medusa"),
]


def test_alternatives_valid_as_speculative_pass_everywhere() -> None:
    obj = with_changes({"spec.tuning.alternatives": ALTERNATIVES})
    assert validate_object(obj) == []
    assert admit(SCHEMA, obj) == []


def test_inherited_candidates_are_not_held_against_an_alternative() -> None:
    # off (limit 0) and a dflash with blockSize 8 (limit 7) inherit [3, 7, 11, 15]: the tuner skips the N
    # above their limits, so only the spec's own method answers for spec.tuning.candidates.
    small = {"method": "dflash", "draftModel": "z-lab/b8", "blockSize": 8, "numSpeculativeTokens": 7}
    obj = with_changes({"spec.tuning.alternatives": [{"method": "off"}, small]})
    assert validate_object(obj) == []
    assert admit(SCHEMA, obj) == []


@pytest.mark.parametrize(("alternative", "path", "words", "_cel"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_validate_refuses_a_bad_alternative_at_its_path(alternative: dict[str, Any], path: str, words: str,
                                                        _cel: str) -> None:
    problems = validate_object(with_alternative(alternative))
    matching = [p for p in problems if p.path == path or p.path.startswith(path + "[")]
    assert any(words in p.message for p in matching), [str(p) for p in problems]
    # One message per field: where validate re-checks a CEL rule, its message replaces the CEL one.
    assert len(matching) == 1, [str(p) for p in problems]


@pytest.mark.parametrize(("alternative", "path", "_words", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_the_crd_refuses_a_bad_alternative_at_its_path(alternative: dict[str, Any], path: str, _words: str,
                                                       words: str) -> None:
    refusals = admit(SCHEMA, with_alternative(alternative))
    assert any(r.startswith(f"{path}: ") and words in r for r in refusals), refusals


@pytest.mark.parametrize(("alternative", "path", "words"), [b[1:] for b in BAD_OFFLINE],
                         ids=[b[0] for b in BAD_OFFLINE])
def test_validate_refuses_what_only_it_can_check(alternative: dict[str, Any], path: str, words: str) -> None:
    problems = validate_object(with_alternative(alternative))
    assert any(p.path == path and words in p.message for p in problems), [str(p) for p in problems]


def test_an_extra_key_too_long_for_vllm_is_refused_by_validate() -> None:
    # Not by the CRD: CEL cannot range over a free-form object's keys (rules.py), so validate.py checks it.
    alternative = {"method": "mtp", "numSpeculativeTokens": 3, "extra": {"k" * 65: 1}}
    problems = validate_object(with_alternative(alternative))
    assert any(p.path == f"{WHERE}.extra" and "at most 64 characters" in p.message for p in problems), problems


def test_an_off_alternative_duplicates_another_off() -> None:
    obj = with_changes({"spec.tuning.alternatives": [{"method": "off"}, {"method": "off"}]})
    assert [str(p) for p in validate_object(obj)] == [
        "spec.tuning.alternatives[1]: has the same method, draftModel, blockSize, extra and ngramDrafter as "
        "spec.tuning.alternatives[0]: the tuner already tries N for it; remove this alternative or change one of "
        "those fields"]


def test_more_alternatives_than_the_limit_are_refused() -> None:
    many = [{"method": "eagle3", "draftModel": f"org/head-{i}", "numSpeculativeTokens": 3}
            for i in range(MAX_ALTERNATIVES + 1)]
    obj = with_changes({"spec.tuning.alternatives": many})
    message = f"must have at most {MAX_ALTERNATIVES} items, got {MAX_ALTERNATIVES + 1}"
    assert [str(p) for p in validate_object(obj)] == [f"spec.tuning.alternatives: {message}"]
    assert admit(SCHEMA, obj) == [f"spec.tuning.alternatives: {message}"]
    assert validate_object(with_changes({"spec.tuning.alternatives": many[:MAX_ALTERNATIVES]})) == []
