"""spec.speculative.ngramDrafter: the confidence n-gram drafter (runtime proposer.py) selected from a
SpeculativeDeployment. The field reaches the CRD, is refused with a message naming it wherever vLLM would not
serve it (validate, and the API server's CEL), renders engine.json's ngram_drafter, and an alternative that
selects it is a contender of its own (ngram+confidence). The runtime's side: tests/unit/test_proposer.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from specpilot import render
from specpilot.api import admission
from specpilot.api.models import Speculative
from specpilot.api.validate import crd_schema, load, validate_object
from specpilot.tuning import TunerState, tournament
from specpilot.tuning.tournament_state import Tournament, contenders_of
from specpilot_runtime import engine
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.speculative import (CONFIDENCE_DRAFTER, DEFAULT_NGRAM_DRAFTER, NGRAM_DRAFTERS, drafter_problems,
                                          table_blind)

NGRAM = {"method": "ngram", "numSpeculativeTokens": 4, "ngramDrafter": "confidence",
         "extra": {"prompt_lookup_min": 2, "prompt_lookup_max": 5}}
SD: dict[str, Any] = {
    "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "ng", "namespace": "llm"},
    "spec": {"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "nvidia"}, "speculative": NGRAM,
             "tuning": {"enabled": True, "candidates": [0, 2, 4]}}}


def sd_with(speculative: dict[str, Any] | None = None, vendor: str = "nvidia", **tuning: Any) -> dict[str, Any]:
    obj = copy.deepcopy(SD)
    obj["spec"]["accelerator"]["vendor"] = vendor
    obj["spec"]["speculative"].update(speculative or {})
    obj["spec"]["tuning"].update(tuning)
    return obj


def engine_json(objects: list[dict[str, Any]], track: str = "stable") -> EngineConfig:
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["labels"]["specpilot.io/track"] == track)
    return EngineConfig.model_validate_json(cm["data"]["engine.json"])


def test_the_field_reaches_the_crd_with_its_default_and_values() -> None:
    field = crd_schema()["properties"]["spec"]["properties"]["speculative"]["properties"]["ngramDrafter"]
    assert field["enum"] == list(NGRAM_DRAFTERS) and field["default"] == DEFAULT_NGRAM_DRAFTER == "vllm"
    assert "ngramDrafter" in crd_schema()["properties"]["spec"]["properties"]["tuning"]["properties"][
        "alternatives"]["items"]["properties"]
    assert validate_object(sd_with()) == []
    assert load(sd_with()).spec.speculative.ngram_drafter == "confidence"
    left_out = sd_with()
    del left_out["spec"]["speculative"]["ngramDrafter"]
    assert load(left_out).spec.speculative.ngram_drafter == "vllm"
    assert Speculative.model_validate(NGRAM).model_dump(by_alias=True)["ngramDrafter"] == "confidence"


SCHEDULE = [{"minBatchSize": 1, "maxBatchSize": 256, "numSpeculativeTokens": 4}]
ALTERNATIVE = {"method": "ngram", "numSpeculativeTokens": 3, "ngramDrafter": "confidence"}
# (case, object, the path of the problem, words its message holds)
REFUSED = [
    ("other-method", sd_with({"method": "mtp", "extra": {}}), "spec.speculative.ngramDrafter",
     "confidence drafts for method ngram only, not mtp"),
    ("schedule", sd_with({"schedule": SCHEDULE}), "spec.speculative.ngramDrafter",
     "the schedule (spec.speculative.schedule) is never served: spec.speculative.ngramDrafter confidence"),
    ("mode-schedule", sd_with(mode="schedule"), "spec.tuning.mode",
     "use tuning mode single, or set spec.speculative.ngramDrafter vllm"),
    ("switchback", sd_with(measure="switchback"), "spec.tuning.measure",
     "use tuning measure canary, or set spec.speculative.ngramDrafter vllm"),
    ("alternative-switchback", sd_with({"ngramDrafter": "vllm"}, measure="switchback", alternatives=[ALTERNATIVE]),
     "spec.tuning.measure", "spec.tuning.alternatives[0].ngramDrafter confidence runs as vLLM's custom_class"),
    ("alternative-other-method",
     sd_with(alternatives=[{"method": "eagle3", "draftModel": "o/e", "numSpeculativeTokens": 3,
                            "ngramDrafter": "confidence"}]),
     "spec.tuning.alternatives[0].ngramDrafter", "confidence drafts for method ngram only, not eagle3"),
    ("unknown", sd_with({"ngramDrafter": "eager"}), "spec.speculative.ngramDrafter", "vllm, confidence"),
]


@pytest.mark.parametrize("case,obj,path,words", REFUSED, ids=[r[0] for r in REFUSED])
def test_each_refused_combination_names_the_field(case: str, obj: dict[str, Any], path: str, words: str) -> None:
    problems = validate_object(obj)
    assert [p.path for p in problems] == [path], problems
    assert words in problems[0].message and "ngramDrafter" in problems[0].path + problems[0].message
    # The API server refuses it too (schema + CEL), naming the same field.
    assert any(p.path == path and "ngramDrafter" in p.path + p.message
               for p in admission.problems(crd_schema(), obj))


@pytest.mark.parametrize("obj", [
    pytest.param(sd_with({"ngramDrafter": "vllm", "schedule": SCHEDULE}, mode="schedule"), id="vllm-with-table"),
    pytest.param(sd_with({"ngramDrafter": "vllm"}, measure="switchback"), id="vllm-switchback"),
    pytest.param(sd_with(enabled=False, measure="switchback"), id="switchback-untuned"),
])
def test_vllms_drafter_keeps_every_table_setting(obj: dict[str, Any]) -> None:
    assert validate_object(obj) == []
    assert admission.problems(crd_schema(), obj) == []


def test_the_table_rule_is_the_runtimes_one() -> None:
    # One rule: the runtime refuses engine.json's ngram_drafter with a table on GPUs, never on the CPU build.
    assert table_blind("confidence", "nvidia") and table_blind("confidence", "amd")
    assert not table_blind("confidence", "cpu") and not table_blind("vllm", "amd")
    assert drafter_problems("confidence", "ngram", True, "cpu", "f", "t") == []
    (problem,) = drafter_problems("confidence", "ngram", True, "amd", "f", "t")
    assert problem.path == "f" and "V1 model runner" in problem.message


def test_render_puts_the_drafter_into_engine_json_and_rolls_the_pods() -> None:
    sd = load(sd_with())
    objects = render.render(sd, 4, 0)
    stable = engine_json(objects)
    assert stable.ngram_drafter == "confidence" and stable.problems() == []
    argv = engine.argv(stable)
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "custom_class", "model": CONFIDENCE_DRAFTER, "num_speculative_tokens": 4}
    # N=0 runs method off: no drafter to choose.
    assert engine_json(objects, "canary").ngram_drafter == "vllm"

    def config_hash(obj: dict[str, Any]) -> str:
        deployment = next(o for o in render.render_track(load(obj), "stable", 4) if o["kind"] == "Deployment")
        return deployment["spec"]["template"]["metadata"]["annotations"]["specpilot.io/engine-config-hash"]

    assert config_hash(sd_with()) != config_hash(sd_with({"ngramDrafter": "vllm"}))


def test_an_alternative_selecting_it_is_a_contender_of_its_own() -> None:
    obj = sd_with({"ngramDrafter": "vllm"}, alternatives=[ALTERNATIVE])
    assert validate_object(obj) == []  # the same method, draft and extra, another drafter: no duplicate
    sd = load(obj)
    cs = contenders_of(sd.spec)
    assert [c.label for c in cs] == ["ngram", "ngram+confidence"] and cs[0].key() != cs[1].key()
    assert engine_json(render.render(sd, 4, 3, canary_contender=1), "canary").ngram_drafter == "confidence"
    rows = tournament.standings(Tournament.new(cs), TunerState.new("ngram", 4), cs)
    assert "ngramDrafter" not in rows[0] and rows[1]["ngramDrafter"] == "confidence"
    twice = sd_with({"ngramDrafter": "vllm"}, alternatives=[ALTERNATIVE, ALTERNATIVE])
    assert [p.path for p in validate_object(twice)] == ["spec.tuning.alternatives[1]"]
