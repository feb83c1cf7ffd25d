"""Specs the API server used to accept that broke later: a busy tuning loop, child names
that are not DNS labels, NUL bytes, GPU variables the runtime refuses, image names with whitespace, and
unbounded strings. Each is refused by `validate_object`, naming the field and what is allowed."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from specpilot.api.models import NAME_MAX_LENGTH, NAME_PATTERN
from specpilot.api.validate import validate_object
from specpilot.api import names

from test_validate_bad_inputs import with_changes

DNS_LABEL_MAX = 63

# (case id, changes, field path the message must name, words the message must contain)
LIMITS = [
    ("analysis-window-zero", {"spec.tuning.canary": {"analysisWindow": "0s"}}, "spec.tuning.canary.analysisWindow",
     "at least 2s"),
    ("analysis-window-1ms", {"spec.tuning.canary": {"analysisWindow": "1ms"}}, "spec.tuning.canary.analysisWindow",
     "at least 2s"),
    ("name-too-long-for-children", {"metadata.name": "a" * 57}, "metadata.name", f"at most {NAME_MAX_LENGTH}"),
    ("nul-in-model", {"spec.model": "Qwen/Qwen3-8B\x00"}, "spec.model", "no control characters"),
    ("control-char-in-draft", {"spec.speculative.draftModel": "z-lab/x\x07"}, "spec.speculative.draftModel",
     "no control characters"),
    ("c1-control-in-model", {"spec.model": "Qwen/Qwen3-8B\x85"}, "spec.model", "no control characters"),
    # U+202E shows "z-lab/Qwen-DFlash" as it reads right to left from there: a name that hides what loads.
    ("bidi-override-in-draft", {"spec.speculative.draftModel": "z-lab/Qwen\u202e-DFlash"},
     "spec.speculative.draftModel", "bidirectional-text overrides"),
    ("bidi-isolate-in-alternative", {"spec.tuning": {"enabled": True, "alternatives": [
        {"method": "draft_model", "draftModel": "org/small\u2067", "numSpeculativeTokens": 3}]}},
     "spec.tuning.alternatives[0].draftModel", "bidirectional-text overrides"),
    ("nul-in-arg", {"spec.engine": {"args": ["--max-model-len=8\x00"]}}, "spec.engine.args[0]", "without NUL"),
    ("nul-in-env", {"spec.engine": {"env": [{"name": "A", "value": "x\x00"}]}}, "spec.engine.env[0].value",
     "without NUL"),
    ("hip-cuda-mismatch", {"spec.engine": {"env": [{"name": "HIP_VISIBLE_DEVICES", "value": "0,1"},
                                                   {"name": "CUDA_VISIBLE_DEVICES", "value": "2,3"}]}},
     "spec.engine.env[1].value", "name different GPUs"),
    ("image-trailing-space", {"spec.image": "rocm/vllm:latest "}, "spec.image", "no whitespace"),
    ("image-newline", {"spec.image": "rocm/vllm\n:latest"}, "spec.image", "no whitespace"),
    # Container runtimes refuse these (InvalidImageName): docker.io paths are lower-case, a digest is hex.
    ("image-upper-case-path", {"spec.image": "ROCm/vllm:latest"}, "spec.image", "lower-case path"),
    ("image-bad-digest", {"spec.image": "rocm/vllm@sha256:latest"}, "spec.image", "name@sha256:<hex>"),
    ("image-bidi-override", {"spec.image": "rocm/vllm:\u202elatest"}, "spec.image", "ASCII only"),
    ("model-too-long", {"spec.model": "m" * 1025}, "spec.model", "at most 1024"),
    ("env-value-too-long", {"spec.engine": {"env": [{"name": "A", "value": "x" * 4097}]}},
     "spec.engine.env[0].value", "at most 4096"),
    ("arg-too-long", {"spec.engine": {"args": ["--chat-template=" + "x" * 1024]}}, "spec.engine.args[0]",
     "at most 1024"),
    ("too-many-extra-keys", {"spec.speculative.extra": {f"k{i}": 1 for i in range(65)}}, "spec.speculative.extra",
     "at most 64 keys"),
    ("extra-key-too-long", {"spec.speculative.extra": {"k" * 65: 1}}, "spec.speculative.extra", "at most 64"),
    ("extra-value-too-big", {"spec.speculative.extra": {"draft_load_config": {"x": "y" * 5000}}},
     "spec.speculative.extra.draft_load_config", "at most 4096"),
    ("node-selector-too-many", {"spec.engine": {"nodeSelector": {f"k{i}": "v" for i in range(65)}}},
     "spec.engine.nodeSelector", "at most 64 keys"),
    ("megabyte-spec", {"spec.engine": {"resources": {"requests": {"memory": "1" * (1 << 20)}}}}, "spec",
     "at most 262144"),
]


@pytest.mark.parametrize(("changes", "path", "words"), [c[1:] for c in LIMITS], ids=[c[0] for c in LIMITS])
def test_limit_is_enforced_naming_the_field(changes: dict[str, Any], path: str, words: str) -> None:
    problems = validate_object(with_changes(changes))
    matching = [p for p in problems if p.path == path]
    assert matching, f"no problem names {path}: {[str(p)[:200] for p in problems]}"
    assert any(words in p.message for p in matching), [str(p)[:200] for p in matching]


def test_a_window_at_the_floor_and_a_name_at_the_cap_are_valid() -> None:
    assert validate_object(with_changes({"spec.tuning.canary": {"analysisWindow": "2s"},
                                         "metadata.name": "a" * NAME_MAX_LENGTH})) == []


def test_a_megabyte_spec_is_refused_before_field_checks_with_one_problem() -> None:
    problems = validate_object(with_changes({"spec.model": "m" * (1 << 20)}))
    assert [p.path for p in problems] == ["spec"]


def test_huge_values_are_not_repeated_in_messages() -> None:
    problems = validate_object(with_changes({"spec.image": "x " * 100}))
    assert all(len(p.message) < 300 for p in problems)


NAME_FUNCTIONS = [f for n, f in inspect.getmembers(names, inspect.isfunction)
                  if n.endswith("_name") and f.__module__ == names.__name__]


@pytest.mark.parametrize("function", NAME_FUNCTIONS, ids=[f.__name__ for f in NAME_FUNCTIONS])
def test_every_child_name_is_a_dns_label_for_the_longest_allowed_name(function: Any) -> None:
    longest = "a" * (NAME_MAX_LENGTH - 1) + "z"
    params = inspect.signature(function).parameters
    outputs = [function(longest, track) for track in names.TRACKS] if "track" in params else [function(longest)]
    for child in outputs:
        assert len(child) <= DNS_LABEL_MAX and re.fullmatch(NAME_PATTERN, child), child


def test_the_name_functions_are_all_found() -> None:
    assert {f.__name__ for f in NAME_FUNCTIONS} >= {"deployment_name", "config_map_name", "service_name",
                                                    "track_service_name"}
