"""DSpark's adaptive verification (api/adaptive.py): refused up front where vLLM would not run it, with the
key's path and the setting in the way named, by `validate_object` (`specpilot validate` and the operator);
and, for a tuned dspark deployment where it would run, one more tournament contender that renders and
competes like any alternative."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specpilot import render
from specpilot.api.adaptive import contender_alternatives, implicit_alternative
from specpilot.api.models import MAX_ALTERNATIVES
from specpilot.api.validate import load, validate_object
from specpilot.tuning import ActionKind, TunerState, tournament
from specpilot.tuning.observations import Observations, TrackWindow, WindowRecord
from specpilot.tuning.rules import method_pick
from specpilot.tuning.step_model import Pair
from specpilot.tuning.tournament_state import Tournament, contenders_of
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.vllm_metrics import Snapshot

KEY = "enable_adaptive_verification"
SD: dict[str, Any] = {
    "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "ds", "namespace": "llm"},
    "spec": {"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "nvidia"},
             "speculative": {"method": "dspark", "draftModel": "deepseek/dspark-qwen3-8b", "numSpeculativeTokens": 7},
             "tuning": {"enabled": True, "candidates": [3, 7]}}}


def sd_with(args: list[str] | None = None, vendor: str = "nvidia", extra: dict[str, Any] | None = None,
            **tuning: Any) -> dict[str, Any]:
    obj = copy.deepcopy(SD)
    obj["spec"]["accelerator"]["vendor"] = vendor
    obj["spec"]["engine"] = {"args": args or []}
    if extra is not None:
        obj["spec"]["speculative"]["extra"] = extra
    obj["spec"]["tuning"].update(tuning)
    return obj


# (case id, engine args, vendor, the path of the setting in the way, words of the message)
BLOCKED = [
    ("enforce-eager", ["--enforce-eager"], "nvidia", "spec.engine.args[0]", "runs without CUDA graphs"),
    ("enforce-eager-underscore", ["--max-num-seqs=8", "--enforce_eager"], "nvidia", "spec.engine.args[1]",
     "runs without CUDA graphs"),
    ("cudagraph-none", ["-cc", '{"cudagraph_mode": "NONE"}'], "nvidia", "spec.engine.args[0]",
     "runs without CUDA graphs"),
    ("cudagraph-piecewise", ["--compilation-config={\"cudagraph_mode\": \"PIECEWISE\"}"], "nvidia",
     "spec.engine.args[0]", "cudagraph_mode 'PIECEWISE' captures no full graphs: use one of FULL"),
    ("cudagraph-dotted", ["-cc.cudagraph_mode=piecewise"], "amd", "spec.engine.args[0]", "captures no full graphs"),
    ("lora", ["--enable-lora"], "nvidia", "spec.engine.args[0]", "enables LoRA"),
    ("pipeline", ["--pipeline-parallel-size", "2"], "nvidia", "spec.engine.args[0]", "pipeline-parallel size of 1"),
    ("pipeline-short", ["-pp=4"], "nvidia", "spec.engine.args[0]", "pipeline-parallel size of 1"),
]


@pytest.mark.parametrize("case,args,vendor,where,words", BLOCKED, ids=[b[0] for b in BLOCKED])
def test_adaptive_verification_is_refused_where_vllm_would_not_run_it(case: str, args: list[str], vendor: str,
                                                                      where: str, words: str) -> None:
    problems = validate_object(sd_with(args, vendor, extra={KEY: True}))
    mine = [p for p in problems if p.path == f"spec.speculative.extra.{KEY}"]
    assert len(mine) == 1, problems
    assert where in mine[0].message and words in mine[0].message
    assert "full CUDA graphs, without LoRA or pipeline parallelism" in mine[0].message
    # The same on an alternative, at its own path.
    alt = sd_with(args, vendor, alternatives=[{"method": "dspark", "numSpeculativeTokens": 7, "extra": {KEY: True}}])
    assert any(p.path == f"spec.tuning.alternatives[0].extra.{KEY}" and where in p.message
               for p in validate_object(alt)), validate_object(alt)


@pytest.mark.parametrize("args", [[], ["-cc", '{"cudagraph_mode": "FULL"}'], ["-cc.cudagraph_mode=FULL_AND_PIECEWISE"],
                                  ["--no-enforce-eager"], ["--enforce-eager", "--no-enforce-eager"],
                                  ["--enable-lora", "--no-enable-lora"], ["-pp", "1"], ["--enable-lora-bias"]])
def test_adaptive_verification_is_allowed_where_vllm_runs_it(args: list[str]) -> None:
    assert validate_object(sd_with(args, extra={KEY: True})) == []


def test_the_cpu_vendor_is_refused_by_the_api_itself() -> None:
    # spec.accelerator.vendor admits GPUs only, so no deployment asks vLLM's CPU build for adaptive verification.
    problems = validate_object(sd_with(vendor="cpu", extra={KEY: True}))
    assert [p.path for p in problems] == ["spec.accelerator.vendor"] and "amd, nvidia" in problems[0].message


def test_a_non_boolean_value_and_a_non_dspark_method_are_refused() -> None:
    problems = validate_object(sd_with(extra={KEY: "yes"}))
    assert [p.path for p in problems] == [f"spec.speculative.extra.{KEY}"] and "true or false" in problems[0].message
    mtp = sd_with(extra={KEY: True})
    mtp["spec"]["speculative"] = {"method": "mtp", "numSpeculativeTokens": 3, "extra": {KEY: True}}
    assert any(p.path == f"spec.speculative.extra.{KEY}" and "applies only to method dspark" in p.message
               for p in validate_object(mtp))


def test_the_operator_refuses_it_too() -> None:
    from specpilot.api.validate import InvalidSpeculativeDeployment
    with pytest.raises(InvalidSpeculativeDeployment, match="enables LoRA"):
        load(sd_with(["--enable-lora"], extra={KEY: True}))


def implicit(obj: dict[str, Any]) -> bool:
    return implicit_alternative(load(obj).spec) is not None


def test_a_tuned_dspark_deployment_gets_the_adaptive_contender() -> None:
    sd = load(sd_with())
    (alt,) = contender_alternatives(sd.spec)
    assert alt.method == "dspark" and alt.draft_model == "deepseek/dspark-qwen3-8b" and alt.extra == {KEY: True}
    assert alt.candidates is None and alt.num_speculative_tokens == 7
    cs = contenders_of(sd.spec)
    assert [(c.method, c.adaptive, c.candidates, c.draft) for c in cs] == [
        ("dspark", False, (3, 7), "deepseek/dspark-qwen3-8b"), ("dspark", True, (3, 7), "deepseek/dspark-qwen3-8b")]
    assert cs[0].key() != cs[1].key() and cs[1].label == "dspark+adaptive"
    assert sd.for_contender(1).spec.tuning.candidates == [3, 7]


def test_it_comes_after_the_user_s_alternatives() -> None:
    sd = load(sd_with(alternatives=[{"method": "off"}]))
    assert [a.method for a in contender_alternatives(sd.spec)] == ["off", "dspark"]
    assert sd.for_contender(2).spec.speculative.extra == {KEY: True}


@pytest.mark.parametrize("obj", [
    pytest.param(sd_with(adaptiveVerification="off"), id="opted-out"),
    pytest.param(sd_with(enabled=False), id="tuning-disabled"),
    pytest.param(sd_with(extra={KEY: True}), id="spec-already-runs-it"),
    pytest.param(sd_with(alternatives=[{"method": "dspark", "draftModel": "deepseek/dspark-qwen3-8b",
                                        "numSpeculativeTokens": 3, "extra": {KEY: True}}]), id="already-listed"),
    pytest.param(sd_with(["--enforce-eager"]), id="eager"),
    pytest.param(sd_with(["--enable-lora"]), id="lora"),
    pytest.param(sd_with(["-pp", "2"]), id="pipeline"),
    pytest.param(sd_with(["-cc", '{"cudagraph_mode": "PIECEWISE"}']), id="piecewise"),
    pytest.param(sd_with(alternatives=[{"method": "off"}] + [
        {"method": "dspark", "draftModel": f"d/{i}", "numSpeculativeTokens": 7} for i in range(MAX_ALTERNATIVES - 1)]),
        id="alternatives-full"),
])
def test_no_adaptive_contender(obj: dict[str, Any]) -> None:
    assert validate_object(obj) == []  # not asked for: never an error
    assert not implicit(obj)


def test_no_adaptive_contender_for_another_method() -> None:
    obj = sd_with()
    obj["spec"]["speculative"] = {"method": "mtp", "numSpeculativeTokens": 3}
    assert not implicit(obj) and len(contenders_of(load(obj).spec)) == 1


def test_the_adaptive_contender_renders_with_the_key() -> None:
    sd = load(sd_with(extra={"draft_sample_method": "greedy"}))
    objects = render.render(sd, 7, 3, canary_contender=1)

    def engine(track: str) -> dict[str, Any]:
        cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["labels"]["specpilot.io/track"] == track)
        config = EngineConfig.model_validate_json(cm["data"]["engine.json"]).speculative
        assert config is not None
        return config.to_vllm() or {}

    assert engine("canary") == {"method": "dspark", "model": "deepseek/dspark-qwen3-8b",
                                               "num_speculative_tokens": 3, "draft_sample_method": "greedy", KEY: True}
    assert KEY not in engine("stable")


def test_the_adaptive_contender_competes_in_the_tournament() -> None:
    sd = load(sd_with())
    cs = contenders_of(sd.spec)
    inner = TunerState.new("dspark", 7, None)
    inner.records = [WindowRecord(i, "stable", 7, 100.0, (70.0, 50.0, 30.0), 2.5, 0.02, 8.0) for i in range(2)]
    inner.pairs = [Pair(0, 7, 8.0, -0.2)]  # the step cost is anchored: contenders come next
    stable = TrackWindow(7, Snapshot(), ready_pods=3, desired_pods=3)
    pick = method_pick.untried_first(method_pick.Idle(Tournament.new(cs), inner, sd.spec.tuning, cs,
                                                      Observations(300.0, stable)))
    assert pick is not None and pick[:2] == (1, 7) and "dspark+adaptive untried" in pick[2]
    tour, _, action = tournament.step(Tournament.new(cs), inner, sd.spec.tuning, cs, Observations(300.0, stable), 60.0)
    assert (action.kind, action.n, action.contender) == (ActionKind.START_CANARY, 7, 1)
    assert tournament.standings(tour, inner, cs)[1]["adaptiveVerification"] is True
