"""What vLLM 0.33 checks only at startup and what the cluster would refuse or never schedule, refused at
apply time with the field named: batch-size schedules, suffix's package, `extra` cross-constraints, GPU
resource names, Pod Security profiles, canary modes. Rules CEL can express give the same message from the
CRD, `specpilot validate` and the operator (all three run the CRD's rules)."""

from __future__ import annotations

from typing import Any

import pytest
from test_validate_bad_inputs import with_changes

from specpilot.api import admission
from specpilot.api.rules import REPLACE_MODE_MESSAGE
from specpilot.api.validate import crd_schema, validate_object
from specpilot_runtime.engine_config import Accelerator, EngineConfig
from specpilot_runtime.speculative import SCHEDULE_START_MESSAGE, SpeculativeConfig

SUFFIX = {"method": "suffix", "numSpeculativeTokens": 4}
ARCTIC = {"spec.image": "me/vllm-arctic:1", "spec.imagePackages": ["arctic-inference"]}


def schedule(*rows: tuple[int, int, int]) -> list[dict[str, int]]:
    return [{"minBatchSize": lo, "maxBatchSize": hi, "numSpeculativeTokens": k} for lo, hi, k in rows]


# (case id, changes, field path the message must name, words the message must contain)
BAD_INPUTS = [
    ("schedule-starts-above-1", {"spec.speculative.schedule": schedule((2, 16, 7))},
     "spec.speculative.schedule[0]", "must start at minBatchSize 1"),
    ("schedule-second-range-only", {"spec.speculative.schedule": schedule((9, 64, 5), (65, 256, 3))},
     "spec.speculative.schedule[0]", "vLLM 0.33 refuses to start"),
    ("suffix-on-default-image", {"spec.speculative": SUFFIX, "spec.tuning": {}},
     "spec.imagePackages", "pip install arctic-inference"),
    ("suffix-on-undeclared-image", {"spec.speculative": SUFFIX, "spec.tuning": {}, "spec.image": "me/vllm:1"},
     "spec.imagePackages", "list arctic-inference in spec.imagePackages"),
    ("suffix-packages-on-default-image", {"spec.speculative": SUFFIX, "spec.tuning": {},
                                          "spec.imagePackages": ["arctic-inference"]},
     "spec.imagePackages", "set spec.image"),
    ("image-package-not-a-name", {"spec.imagePackages": ["arctic inference"]}, "spec.imagePackages[0]",
     "must match"),
    ("draft-tp-neither-1-nor-tp", {"spec.accelerator": {"count": 4},
                                   "spec.speculative.extra": {"draft_tensor_parallel_size": 2}},
     "spec.speculative.extra.draft_tensor_parallel_size", "use 1 or 4"),
    ("draft-tp-above-tp-1", {"spec.speculative.extra": {"draft_tensor_parallel_size": 2}},
     "spec.speculative.extra.draft_tensor_parallel_size", "tensor-parallel size (1"),
    ("adaptive-verification-dflash", {"spec.speculative.extra": {"enable_adaptive_verification": True}},
     "spec.speculative.extra.enable_adaptive_verification", "only to method dspark"),
    ("adaptive-verification-eagle3", {"spec.speculative": {"method": "eagle3", "draftModel": "RedHatAI/x",
                                                            "numSpeculativeTokens": 3,
                                                            "extra": {"enable_adaptive_verification": True}},
                                      "spec.tuning": {}},
     "spec.speculative.extra.enable_adaptive_verification", "not eagle3"),
    ("synthetic-rates-standard-sampler", {"spec.speculative.extra": {
        "rejection_sample_method": "standard", "synthetic_acceptance_rates": [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]}},
     "spec.speculative.extra.synthetic_acceptance_rates", "needs rejection_sample_method: synthetic"),
    ("synthetic-length-without-sampler", {"spec.speculative.extra": {"synthetic_acceptance_length": 3.5}},
     "spec.speculative.extra.synthetic_acceptance_length", "needs rejection_sample_method: synthetic"),
    ("synthetic-length-above-n-plus-1", {"spec.speculative.extra": {
        "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 9}},
     "spec.speculative.extra.synthetic_acceptance_length", "[1, 8]"),
    ("synthetic-length-below-1", {"spec.speculative.extra": {
        "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 0.5}},
     "spec.speculative.extra.synthetic_acceptance_length", "[1, 8]"),
    ("resource-name-without-domain", {"spec.accelerator": {"resourceName": "gpu"}},
     "spec.accelerator.resourceName", "must match"),
    ("resource-name-uppercase-domain", {"spec.accelerator": {"resourceName": "AMD.com/gpu"}},
     "spec.accelerator.resourceName", "must match"),
    ("resource-name-also-in-resources", {"spec.accelerator": {"resourceName": "amd.com/gpu-cpx"},
                                         "spec.engine": {"resources": {"requests": {"amd.com/gpu-cpx": 1}}}},
     "spec.engine.resources.requests.amd.com/gpu-cpx", "accelerator.count"),
    ("security-profile-unknown", {"spec.accelerator": {"securityProfile": "privileged"}},
     "spec.accelerator.securityProfile", "recommended, baseline, restricted"),
    ("host-path-under-baseline", {"spec.accelerator": {"securityProfile": "baseline"},
                                  "spec.engine": {"modelCache": {"hostPath": "/data/hf"}}},
     "spec.engine.modelCache.hostPath", "forbidden by Pod Security baseline"),
    ("host-path-under-restricted", {"spec.accelerator": {"securityProfile": "restricted"},
                                    "spec.engine": {"modelCache": {"hostPath": "/data/hf"}}},
     "spec.engine.modelCache.hostPath", "use claimName"),
    ("replace-mode-one-replica", {"spec.tuning.canary": {"mode": "replace"}},
     "spec.tuning.canary.mode", "replicas >= canary.replicas + 1"),
    ("replace-mode-canary-as-large-as-stable", {"spec.replicas": 2,
                                                "spec.tuning.canary": {"mode": "replace", "replicas": 2}},
     "spec.tuning.canary.mode", "raise replicas or use mode surge"),
    ("replace-mode-no-replicas", {"spec.replicas": 0, "spec.tuning.canary": {"mode": "replace"}},
     "spec.tuning.canary.mode", "at least 2"),
    ("canary-mode-unknown", {"spec.tuning.canary": {"mode": "blue-green"}}, "spec.tuning.canary.mode",
     "surge, replace"),
]

GOOD_INPUTS = [
    ("schedule-from-1", {"spec.speculative.schedule": schedule((1, 16, 7), (17, 256, 3))}),
    ("suffix-on-declared-image", {"spec.speculative": SUFFIX, "spec.tuning": {}, **ARCTIC}),
    ("draft-tp-1", {"spec.accelerator": {"count": 4}, "spec.speculative.extra": {"draft_tensor_parallel_size": 1}}),
    ("draft-tp-equals-tp", {"spec.accelerator": {"count": 4},
                            "spec.speculative.extra": {"draft_tensor_parallel_size": 4}}),
    ("adaptive-verification-dspark", {"spec.speculative": {"method": "dspark", "numSpeculativeTokens": 7,
                                                            "extra": {"enable_adaptive_verification": True}},
                                      "spec.tuning": {}}),
    ("synthetic-length", {"spec.speculative.extra": {"rejection_sample_method": "synthetic",
                                                     "synthetic_acceptance_length": 8}}),
    ("partitioned-gpus", {"spec.accelerator": {"resourceName": "amd.com/gpu-cpx"}}),
    ("baseline-with-claim", {"spec.accelerator": {"securityProfile": "baseline"},
                             "spec.engine": {"modelCache": {"claimName": "hf-cache"}}}),
    ("replace-mode-two-replicas", {"spec.replicas": 2, "spec.tuning.canary": {"mode": "replace"}}),
    ("replace-mode-without-tuning", {"spec.tuning": {"enabled": False, "canary": {"mode": "replace"}}}),
]


@pytest.mark.parametrize(("changes", "path", "words"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_refused_naming_the_field(changes: dict[str, Any], path: str, words: str) -> None:
    problems = validate_object(with_changes(changes))
    matching = [p for p in problems if p.path == path]
    assert matching, f"no problem names {path}: {[str(p) for p in problems]}"
    assert any(words in p.message for p in matching), [str(p) for p in matching]


@pytest.mark.parametrize("changes", [c[1] for c in GOOD_INPUTS], ids=[c[0] for c in GOOD_INPUTS])
def test_what_vllm_and_the_cluster_accept_validates(changes: dict[str, Any]) -> None:
    assert validate_object(with_changes(changes)) == []


def test_there_are_at_least_20_new_bad_inputs() -> None:
    assert len({c[0] for c in BAD_INPUTS}) >= 20


@pytest.mark.parametrize(("changes", "message"), [
    ({"spec.speculative.schedule": schedule((2, 16, 7))}, SCHEDULE_START_MESSAGE),
    ({"spec.tuning.canary": {"mode": "replace"}}, REPLACE_MODE_MESSAGE),
], ids=["schedule-start", "replace-mode"])
def test_the_crd_and_validate_say_the_same(changes: dict[str, Any], message: str) -> None:
    obj = with_changes(changes)
    assert message in [p.message for p in admission.problems(crd_schema(), obj)]
    assert message in [p.message for p in validate_object(obj)]


def test_the_runtime_refuses_the_same_in_the_pod() -> None:
    """engine.json reaching a pod is checked again by `specpilot-runtime serve` with the same rules."""
    cfg = SpeculativeConfig(method="dflash", model="d", num_speculative_tokens=7,
                            num_speculative_tokens_per_batch_size=[(4, 16, 7)],
                            extra={"draft_tensor_parallel_size": 3})
    messages = [p.message for p in cfg.problems("speculative", tensor_parallel_size=2)]
    assert SCHEDULE_START_MESSAGE in messages
    assert any("neither 1 nor" in m for m in messages)
    engine = EngineConfig(model="m", accelerator=Accelerator(count=2), speculative=cfg)
    assert {"speculative.schedule[0]", "speculative.extra.draft_tensor_parallel_size"} <= {
        p.path for p in engine.problems()}
