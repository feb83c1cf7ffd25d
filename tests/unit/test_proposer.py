"""The confidence n-gram drafter (proposer.py) and how the runtime selects it (engine.json's ngram_drafter)."""

from __future__ import annotations

import json
import random
import sys
import types
from typing import Any

import numpy as np
import pytest

from specpilot_runtime import engine, proposer
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.speculative import CONFIDENCE_DRAFTER, LOOKUP_MAX_ENV, LOOKUP_MIN_ENV, served_method


def brute_longest(tokens: list[int], lo: int, hi: int) -> tuple[int, int]:
    """The definition: the longest suffix (at most hi tokens) that also ends earlier, earliest on ties."""
    best, end = 0, -1
    for j in range(len(tokens) - 1):
        v = 0
        while v < hi and v <= j and tokens[j - v] == tokens[len(tokens) - 1 - v]:
            v += 1
        if v > best:
            best, end = v, j
    return (best, end) if best >= lo else (0, -1)


def test_longest_match_is_the_definition_on_random_contexts() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        tokens = [rng.randrange(rng.choice([2, 3, 8])) for _ in range(rng.randint(0, 40))]
        lo = rng.randint(1, 4)
        hi = rng.randint(lo, 7)
        assert proposer.longest_match(np.array(tokens, dtype=np.int32), lo, hi) == brute_longest(tokens, lo, hi), \
            (tokens, lo, hi)


@pytest.mark.parametrize(("match", "cap", "length"), [(0, 4, 0), (1, 4, 0), (2, 4, 1), (3, 4, 2), (5, 4, 4),
                                                      (9, 4, 4), (5, 1, 1), (5, 0, 0)])
def test_draft_length_grows_with_the_match_up_to_k(match: int, cap: int, length: int) -> None:
    assert proposer.draft_length(match, 2, cap) == length


def test_a_draft_is_the_continuation_after_the_earliest_longest_match() -> None:
    # "7 1 2 3 9" then "1 2 3": the 3-token match ends at index 3; "0 1 2 3 8" is a later, equal match.
    tokens = np.array([7, 1, 2, 3, 9, 5, 0, 1, 2, 3, 8, 6, 1, 2, 3], dtype=np.int32)
    assert proposer.longest_match(tokens, 2, 5) == (3, 3)
    assert proposer.propose_one(tokens, 2, 5, cap=4, max_model_len=100) == [9, 5]  # match 3 earns 2
    assert proposer.propose_one(tokens, 2, 5, cap=1, max_model_len=100) == [9]
    assert proposer.propose_one(tokens, 2, 5, cap=4, max_model_len=16) == [9]  # one position left
    assert proposer.propose_one(tokens, 4, 5, cap=4, max_model_len=100) == []  # no match of 4


def test_lookup_bounds_follow_vllms_rule_with_a_spanning_default() -> None:
    assert proposer.lookup_bounds({}, 4) == (2, 5)
    assert proposer.lookup_bounds({LOOKUP_MIN_ENV: "3"}, 4) == (3, 3)
    assert proposer.lookup_bounds({LOOKUP_MAX_ENV: "6"}, 4) == (6, 6)
    assert proposer.lookup_bounds({LOOKUP_MIN_ENV: "1", LOOKUP_MAX_ENV: "8"}, 4) == (1, 8)
    with pytest.raises(ValueError, match="min <= max"):
        proposer.lookup_bounds({LOOKUP_MIN_ENV: "4", LOOKUP_MAX_ENV: "2"}, 4)


class FakeRunner:
    """What vLLM's model runner does: it calls the drafter's `propose` without the step's K."""

    def __init__(self, drafter: Any):
        self.drafter = drafter

    def propose_draft_token_ids(self, scheduler_output: Any, sampled: list[list[int]], counts: np.ndarray,
                                tokens: np.ndarray) -> list[list[int]]:
        return self.drafter.propose(sampled, counts, tokens, slot_mappings=None)  # type: ignore[no-any-return]


@pytest.fixture
def drafter(monkeypatch: pytest.MonkeyPatch) -> Any:
    runner_cls = type("GPUModelRunner", (FakeRunner,), {})
    module = types.ModuleType("vllm.v1.worker.gpu_model_runner")
    module.GPUModelRunner = runner_cls  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.v1", "vllm.v1.worker"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.delenv(LOOKUP_MIN_ENV, raising=False)
    monkeypatch.delenv(LOOKUP_MAX_ENV, raising=False)
    config = types.SimpleNamespace(speculative_config=types.SimpleNamespace(num_speculative_tokens=4),
                                   model_config=types.SimpleNamespace(max_model_len=64))
    made = proposer.ConfidenceNgramProposer(config)
    proposer.ConfidenceNgramProposer(config)  # a second drafter does not wrap the runner twice
    return runner_cls(made)


def step(k: int | None) -> Any:
    return types.SimpleNamespace(num_spec_tokens_to_schedule=k)


def test_the_runner_hands_the_drafter_the_steps_k(drafter: Any) -> None:
    # Request 0 repeats a 6-token phrase (match 5: 4 tokens earned), request 1 matches 2 tokens (1 earned),
    # request 2 sampled nothing this step (a partial prefill).
    rows = [[1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5], [9, 8, 7, 6, 9, 8], [1, 2, 1, 2]]
    tokens = np.zeros((3, 64), dtype=np.int32)
    for i, row in enumerate(rows):
        tokens[i, :len(row)] = row
    counts = np.array([len(r) for r in rows], dtype=np.int32)
    sampled = [[5], [8], []]
    assert drafter.propose_draft_token_ids(step(4), sampled, counts, tokens) == [[6, 1, 2, 3], [7], []]
    assert drafter.propose_draft_token_ids(step(2), sampled, counts, tokens) == [[6, 1], [7], []]
    assert drafter.propose_draft_token_ids(step(0), sampled, counts, tokens) == [[], [], []]
    # No K from the runner: the started N; a K above it: N.
    assert drafter.propose_draft_token_ids(step(None), sampled, counts, tokens)[0] == [6, 1, 2, 3]
    assert drafter.propose_draft_token_ids(step(9), sampled, counts, tokens)[0] == [6, 1, 2, 3]
    assert proposer.step_k(4) == 4  # outside a runner call


def confidence(**over: Any) -> EngineConfig:
    return EngineConfig.model_validate({
        "model": "m", "accelerator": {"vendor": "cpu"}, "ngram_drafter": "confidence",
        "speculative": {"method": "ngram", "num_speculative_tokens": 4,
                        "extra": {"prompt_lookup_min": 2, "prompt_lookup_max": 6}},
        **over})


def test_engine_renders_custom_class_and_hands_the_lookup_bounds_over() -> None:
    cfg = confidence()
    assert cfg.problems() == []
    argv = engine.argv(cfg)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "custom_class", "model": CONFIDENCE_DRAFTER, "num_speculative_tokens": 4}
    env = engine.env(cfg, {})
    assert env[LOOKUP_MIN_ENV] == "2" and env[LOOKUP_MAX_ENV] == "6"
    assert CONFIDENCE_DRAFTER == f"{proposer.__name__}.{proposer.ConfidenceNgramProposer.__name__}"


def test_vllms_drafter_is_the_default_and_renders_ngram() -> None:
    cfg = EngineConfig.model_validate({"model": "m", "speculative": {"method": "ngram", "num_speculative_tokens": 3}})
    argv = engine.argv(cfg)
    assert json.loads(argv[argv.index("--speculative-config") + 1])["method"] == "ngram"
    assert LOOKUP_MIN_ENV not in engine.env(cfg, {})


def test_the_confidence_drafter_drafts_for_ngram_only_and_a_table_only_on_cpu() -> None:
    cfg = confidence(speculative={"method": "draft_model", "model": "d", "num_speculative_tokens": 4})
    assert [p.path for p in cfg.problems()] == ["ngram_drafter"]
    table = {"method": "ngram", "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 256, 4]]}
    on_cpu = confidence(speculative=table, live_file="/etc/specpilot/live/live.json")
    assert on_cpu.problems() == [] and engine.live_problems(on_cpu) == []
    on_gpu = confidence(speculative=table, accelerator={"vendor": "nvidia"})
    (problem,) = on_gpu.problems()
    assert problem.path == "ngram_drafter" and "V1 model runner" in problem.message
    assert "speculative.num_speculative_tokens_per_batch_size" in problem.message


def test_vllms_custom_class_naming_the_drafter_is_served_as_ngram() -> None:
    assert served_method("custom_class", CONFIDENCE_DRAFTER) == "ngram"
    assert served_method("custom_class", "other.Proposer") == "custom_class"
    assert served_method("ngram", "ngram") == "ngram"
