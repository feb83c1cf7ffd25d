"""spec.tuning.measure switchback: what the pods start at, what they mount, the capture settings that keep
every live K in a CUDA graph, and what validation refuses; measure canary renders as before."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from specpilot.api.switchback import capture_plan, started_n
from specpilot.api.validate import load, validate_object
from specpilot.render import live_config_map, owner_reference, render, render_track
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.live import LIVE_DIR, Arm, LiveConfig, parse_live

OWNER = {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
         "metadata": {"name": "qwen", "uid": "0b6f"}}


def obj(vendor: str = "amd", measure: str | None = "switchback", args: list[str] | None = None,
        **tuning: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"enabled": True, **tuning}
    if measure is not None:
        t["measure"] = measure
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": "qwen", "namespace": "llm"},
            "spec": {"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": vendor},
                     "speculative": {"method": "eagle3", "draftModel": "RedHatAI/eagle3", "numSpeculativeTokens": 3},
                     "engine": {"args": args or []}, "tuning": t}}


def engine(objects: list[dict[str, Any]]) -> EngineConfig:
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap"]
    return EngineConfig.model_validate_json(cm["data"]["engine.json"])


def deployment(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (d,) = [o for o in objects if o["kind"] == "Deployment"]
    return d


def test_measure_canary_renders_exactly_what_a_spec_without_the_field_renders() -> None:
    for vendor in ("amd", "nvidia"):
        plain, canary = load(obj(vendor, measure=None)), load(obj(vendor, measure="canary"))
        assert canary.spec.tuning.measure == plain.spec.tuning.measure == "canary"
        assert render(canary, 3, 5, owner_reference(OWNER)) == render(plain, 3, 5, owner_reference(OWNER))
        config = engine(render_track(canary, n=5))
        assert config.live_file is None and config.args == []
        assert config.speculative.num_speculative_tokens_per_batch_size is None
        mounts = container(render_track(canary, n=5))["volumeMounts"]
        assert LIVE_DIR not in [m["mountPath"] for m in mounts]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return deployment(objects)["spec"]["template"]["spec"]["containers"][0]


def test_changing_the_k_in_force_neither_rolls_the_pods_nor_changes_engine_json() -> None:
    sd = load(obj())
    a = render_track(sd, "stable", n=2, owner=owner_reference(OWNER))
    b = render_track(sd, "stable", n=6, owner=owner_reference(OWNER), schedule=[[1, 8, 6], [9, 64, 2]])
    assert deployment(a)["spec"]["template"] == deployment(b)["spec"]["template"]
    assert [o["data"] for o in a if o["kind"] == "ConfigMap"] == [o["data"] for o in b if o["kind"] == "ConfigMap"]


def test_the_stable_track_starts_at_the_started_n_serving_the_spec_until_live_json_says_otherwise() -> None:
    config = engine(render_track(load(obj()), n=2))
    assert config.speculative.num_speculative_tokens == 8  # eagle3, no candidates: the default
    assert config.speculative.num_speculative_tokens_per_batch_size == [(1, 65536, 3)]  # spec N everywhere
    assert config.live_file == f"{LIVE_DIR}/live.json"
    with_schedule = obj()
    with_schedule["spec"]["speculative"]["schedule"] = [
        {"minBatchSize": 1, "maxBatchSize": 16, "numSpeculativeTokens": 3},
        {"minBatchSize": 17, "maxBatchSize": 512, "numSpeculativeTokens": 1}]
    config = engine(render_track(load(with_schedule), n=2))
    assert config.speculative.num_speculative_tokens_per_batch_size == [(1, 16, 3), (17, 512, 1)]


def test_a_higher_n_than_the_started_one_restarts_at_it() -> None:
    config = engine(render_track(load(obj(candidates=[1, 2, 4])), n=6))
    assert config.speculative.num_speculative_tokens == 6


def test_the_canary_measures_its_own_n_with_a_table_and_follows_no_live_json() -> None:
    sd = load(obj())
    objects = render_track(sd, "canary", n=5)
    config = engine(objects)
    assert config.speculative.num_speculative_tokens == 8
    assert config.speculative.num_speculative_tokens_per_batch_size == [(1, 65536, 5)]
    assert config.live_file is None
    assert LIVE_DIR not in [m["mountPath"] for m in container(objects)["volumeMounts"]]


def test_stable_pods_mount_the_live_config_map_optionally_and_read_only() -> None:
    spec = deployment(render_track(load(obj())))["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v.get("configMap", {}).get("name") == "qwen-live"]
    assert volume["configMap"]["optional"] is True
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": LIVE_DIR, "readOnly": True}


def test_live_config_map_carries_live_json_the_engine_accepts() -> None:
    sd = load(obj())
    config = LiveConfig((Arm.uniform(3), Arm(((1, 16, 5), (17, 65536, 2)))), (2.0, 4.0), seed=7)
    cm = live_config_map(sd, config, owner=owner_reference(OWNER))
    assert cm["metadata"]["name"] == "qwen-live" and cm["metadata"]["namespace"] == "llm"
    assert cm["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "specpilot", "specpilot.io/deployment": "qwen"}
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "0b6f"
    assert parse_live(cm["data"]["live.json"].encode(), started_n(sd), "eagle3") == config


@pytest.mark.parametrize(("tuning", "speculative", "expected"), [
    ({}, {}, 8),
    ({"candidates": [0, 2, 5]}, {}, 5),
    ({"candidates": [1, 2]}, {}, 3),  # never below spec N
    ({}, {"numSpeculativeTokens": 12}, 12),
    ({}, {"method": "dflash", "draftModel": "z-lab/dflash-b16", "numSpeculativeTokens": 3, "blockSize": 6}, 5),
])
def test_started_n(tuning: dict, speculative: dict, expected: int) -> None:
    o = obj(**tuning)
    o["spec"]["speculative"].update(speculative)
    assert started_n(load(o)) == expected


@pytest.mark.parametrize(("vendor", "tokens"), [("amd", 16384), ("nvidia", 9216)])
def test_gpu_pods_capture_every_decode_step_up_to_the_started_n(vendor: str, tokens: int) -> None:
    # vLLM's GPU default of 1024 sequences x (8 + 1) tokens each = 9216; AMD's batched-token default is larger.
    assert engine(render_track(load(obj(vendor)))).args == [
        f"--max-num-batched-tokens={tokens}", "--max-cudagraph-capture-size=9216"]
    args = ["--max-num-seqs", "100"]
    assert engine(render_track(load(obj(vendor, args=args)))).args[2:] == [
        f"--max-num-batched-tokens={max(900, tokens if vendor == 'amd' else 8192)}", "--max-cudagraph-capture-size=912"]


def test_no_capture_settings_on_cpu_or_eager_engines_and_none_overriding_the_users() -> None:
    assert capture_plan([], "cpu", 8) is None
    assert engine(render_track(load(obj(args=["--enforce-eager"])))).args == ["--enforce-eager"]
    assert engine(render_track(load(obj(args=["-cc", '{"cudagraph_mode": "NONE"}'])))).args[2:] == []
    user = ["--max-num-seqs=64", "--max_num_batched_tokens=4k", "-cc.max_cudagraph_capture_size=1024"]
    assert engine(render_track(load(obj(args=user)))).args == user


@pytest.mark.parametrize(("args", "index", "words"), [
    (["--max-num-seqs=256", "--max-num-batched-tokens=2048"], 1, "--max-num-batched-tokens 2048 is too small"),
    (["--max-num-seqs=256", "--max-cudagraph-capture-size=512"], 1, "max_cudagraph_capture_size 512"),
    (["--max-num-seqs=256", "--compilation-config", '{"max_cudagraph_capture_size": 600}'], 1, "600"),
])
def test_user_capture_settings_too_small_for_the_started_n_are_refused(args: list[str], index: int,
                                                                         words: str) -> None:
    (problem,) = validate_object(obj(args=args))
    assert problem.path == f"spec.engine.args[{index}]" and words in problem.message
    assert "2304" in problem.message and "spec.tuning.measure canary" in problem.message
    assert validate_object(obj(measure="canary", args=args)) == []


def test_switchback_is_refused_where_vllm_would_not_serve_the_table() -> None:
    suffix = obj()
    suffix["spec"]["speculative"] = {"method": "suffix", "numSpeculativeTokens": 4}
    suffix["spec"].update(image="me/vllm-arctic:1", imagePackages=["arctic-inference"])
    (problem,) = validate_object(suffix)
    assert problem.path == "spec.tuning.measure" and "suffix" in problem.message and "measure canary" in problem.message
    alternative = obj(alternatives=[{"method": "suffix", "numSpeculativeTokens": 4}])
    alternative["spec"].update(image="me/vllm-arctic:1", imagePackages=["arctic-inference"])
    assert [p.path for p in validate_object(alternative)] == ["spec.tuning.measure"]
    (problem,) = validate_object(obj(args=["--data-parallel-size", "2"]))
    assert problem.path == "spec.tuning.measure" and "data parallelism" in problem.message
    assert validate_object(obj(enabled=False, args=["--data-parallel-size", "2"])) == []


def test_an_invalid_measure_names_what_is_allowed() -> None:
    (problem,) = validate_object(obj(measure="inline"))
    assert problem.path == "spec.tuning.measure" and "canary" in problem.message and "switchback" in problem.message


def test_the_rendered_switchback_pod_is_still_a_valid_kubernetes_object() -> None:
    import kubernetes_validate

    for o in render(load(obj("nvidia")), 3, 5, owner_reference(OWNER)):
        kubernetes_validate.validate(copy.deepcopy(o), "1.37.0", strict=True)
    json.dumps(live_config_map(load(obj()), LiveConfig((Arm.uniform(3),))))
