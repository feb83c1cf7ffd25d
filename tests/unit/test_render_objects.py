"""Rendering: per vendor and method, tracks, labels, engine.json, and Kubernetes schema validity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from specpilot.api.author_policy import AuthorPolicy
from specpilot.api.validate import Policy, load
from specpilot.cli import main
from specpilot.render import owner_reference, render, render_service, render_track
from specpilot_runtime.engine_config import EngineConfig

K8S_VERSION = "1.37.0"
EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "deploy" / "examples").glob("*.yaml"))


def sd(vendor: str = "amd", **speculative: Any) -> Any:
    spec = speculative or {"method": "dflash", "draftModel": "z-lab/Qwen3-8B-DFlash-b16",
                           "numSpeculativeTokens": 7, "blockSize": 16}
    # suffix runs only on an image declared to ship arctic-inference.
    image = {"image": "me/vllm-arctic:1", "imagePackages": ["arctic-inference"]} if spec["method"] == "suffix" else {}
    return load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "qwen", "namespace": "llm"},
                 "spec": {"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": vendor, "count": 2}, **image,
                          "speculative": spec, "tuning": {"canary": {"replicas": 2}}}})


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def engine(objects: list[dict[str, Any]]) -> EngineConfig:
    return EngineConfig.model_validate_json(by_kind(objects)["ConfigMap"]["data"]["engine.json"])


METHODS = [
    {"method": "mtp", "numSpeculativeTokens": 3},
    {"method": "mtp", "draftModel": "google/gemma-4-26B-A4B-it-assistant", "numSpeculativeTokens": 4},
    {"method": "eagle3", "draftModel": "RedHatAI/Qwen3-8B-speculator.eagle3", "numSpeculativeTokens": 3},
    {"method": "dflash", "draftModel": "z-lab/Qwen3-8B-DFlash-b16", "numSpeculativeTokens": 15},
    {"method": "dspark", "numSpeculativeTokens": 7, "blockSize": 16},
    {"method": "ngram", "numSpeculativeTokens": 4, "extra": {"prompt_lookup_min": 2}},
    {"method": "suffix", "numSpeculativeTokens": 4},
    {"method": "draft_model", "draftModel": "Qwen/Qwen3-0.6B", "numSpeculativeTokens": 4},
    {"method": "off"},
]


@pytest.mark.parametrize("vendor", ["amd", "nvidia"])
@pytest.mark.parametrize("speculative", METHODS, ids=[f"{m['method']}-{i}" for i, m in enumerate(METHODS)])
def test_every_rendered_object_passes_kubernetes_strict_validation(vendor: str, speculative: dict) -> None:
    obj = sd(vendor, **speculative)
    n = obj.spec.speculative.num_speculative_tokens
    for rendered in render(obj, canary_n=n, owner={"apiVersion": "specpilot.io/v1alpha1",
                                                   "kind": "SpeculativeDeployment", "name": "qwen",
                                                   "uid": "0b6f", "controller": True,
                                                   "blockOwnerDeletion": True}):
        kubernetes_validate.validate(rendered, K8S_VERSION, strict=True)


def test_engine_json_carries_vllm_speculative_keys() -> None:
    config = engine(render_track(sd()))
    assert config.speculative.to_vllm() == {"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16",
                                            "num_speculative_tokens": 7}
    assert (config.model, config.accelerator.vendor, config.accelerator.count) == ("Qwen/Qwen3-8B", "amd", 2)


def test_method_off_renders_no_speculative_config() -> None:
    objects = render_track(sd(method="off"))
    text = by_kind(objects)["ConfigMap"]["data"]["engine.json"]
    assert "speculative" not in json.loads(text)
    assert engine(objects).speculative.to_vllm() is None
    assert by_kind(objects)["Deployment"]["spec"]["template"]["metadata"]["labels"][
        "specpilot.io/num-speculative-tokens"] == "0"


def test_extra_keys_and_schedule_reach_vllm() -> None:
    obj = sd(method="eagle3", draftModel="d", numSpeculativeTokens=5, extra={"draft_tensor_parallel_size": 1},
             schedule=[{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 5},
                       {"minBatchSize": 9, "maxBatchSize": 256, "numSpeculativeTokens": 2}])
    assert engine(render_track(obj)).speculative.to_vllm() == {
        "method": "eagle3", "model": "d", "num_speculative_tokens": 5, "draft_tensor_parallel_size": 1,
        "num_speculative_tokens_per_batch_size": [[1, 8, 5], [9, 256, 2]]}
    # A canary at N=3 cannot draft 5 in any batch range.
    canary = engine(render_track(obj, "canary", 3)).speculative.to_vllm()
    assert canary["num_speculative_tokens_per_batch_size"] == [[1, 8, 3], [9, 256, 2]]


def test_amd_pods_follow_amd_guidance() -> None:
    obj = {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "qwen"},
           "spec": {"model": "Qwen/Qwen3-8B", "accelerator": {"count": 2, "securityProfile": "recommended"},
                    "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}}
    deployment = by_kind(render_track(load(obj, Policy(author=AuthorPolicy(allow_unconfined=True)))))["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    c = container(deployment)
    assert c["image"] == "vllm/vllm-openai-rocm:v0.33.0"
    assert c["resources"]["limits"] == {"amd.com/gpu": "2"}
    assert pod["securityContext"] == {"seccompProfile": {"type": "Unconfined"}, "supplementalGroups": [44]}
    assert c["securityContext"] == {"capabilities": {"add": ["SYS_PTRACE"]}}
    assert {"name": "VLLM_ROCM_USE_AITER", "value": "1"} in c["env"]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]


def test_nvidia_pods_take_nvidia_gpus_and_image() -> None:
    deployment = by_kind(render_track(sd("nvidia")))["Deployment"]
    c = container(deployment)
    assert c["image"] == "vllm/vllm-openai:v0.33.0"
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert "securityContext" not in c and "securityContext" not in deployment["spec"]["template"]["spec"]


def test_container_runs_the_runtime_with_probes_and_a_named_port() -> None:
    c = container(by_kind(render_track(sd()))["Deployment"])
    assert c["command"] == ["python3", "-m", "specpilot_runtime.cli", "serve", "--config", "/etc/specpilot/engine.json"]
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert c["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    budget = c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"]
    assert budget >= 1200
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


def test_pods_get_no_service_env_and_no_api_token() -> None:
    pod = by_kind(render_track(sd()))["Deployment"]["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False  # a Service named `vllm` would inject VLLM_PORT
    assert pod["automountServiceAccountToken"] is False


def test_scheduling_and_resources_pass_through_and_stay_valid() -> None:
    obj = load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "q"},
                "spec": {"model": "m", "accelerator": {"vendor": "nvidia", "count": 8, "securityProfile": "recommended"},
                         "speculative": {"method": "mtp", "numSpeculativeTokens": 2},
                         "engine": {"resources": {"requests": {"cpu": "16", "memory": "128Gi"},
                                                  "limits": {"memory": "256Gi"}},
                                    "nodeSelector": {"gpu.product": "H200"},
                                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                     "effect": "NoSchedule"}],
                                    "modelCache": {"hostPath": "/data/hf", "mountPath": "/models"}}}},
               Policy(host_path_prefixes=("/data",)))
    deployment = by_kind(render_track(obj))["Deployment"]
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    pod = deployment["spec"]["template"]["spec"]
    assert container(deployment)["resources"] == {"requests": {"cpu": "16", "memory": "128Gi"},
                                                  "limits": {"memory": "256Gi", "nvidia.com/gpu": "8"}}
    assert pod["nodeSelector"] == {"gpu.product": "H200"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert {"name": "HF_HOME", "value": "/models"} in container(deployment)["env"]
    # vLLM's own cache lives on the same volume, so a canary or a restarted pod starts with it warm.
    assert {"name": "VLLM_CACHE_ROOT", "value": "/models/vllm"} in container(deployment)["env"]
    assert obj.spec.engine.resources["limits"] == {"memory": "256Gi"}  # render does not mutate the spec


def test_labels_selectors_and_names_per_track() -> None:
    obj = sd()
    stable = by_kind(render_track(obj, "stable"))
    canary = by_kind(render_track(obj, "canary", 11))
    assert stable["Deployment"]["metadata"]["name"] == "qwen"
    assert canary["Deployment"]["metadata"]["name"] == "qwen-canary"
    assert stable["ConfigMap"]["metadata"]["name"] != canary["ConfigMap"]["metadata"]["name"]
    assert canary["Deployment"]["spec"]["replicas"] == 2
    labels = canary["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/managed-by": "specpilot", "specpilot.io/deployment": "qwen",
                      "specpilot.io/track": "canary", "specpilot.io/num-speculative-tokens": "11"}
    assert canary["Deployment"]["spec"]["selector"]["matchLabels"] == {
        "specpilot.io/deployment": "qwen", "specpilot.io/track": "canary"}
    volumes = canary["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["configMap"]["name"] == canary["ConfigMap"]["metadata"]["name"]
    service = render_service(obj)
    assert service["spec"]["selector"] == {"app.kubernetes.io/managed-by": "specpilot",
                                           "specpilot.io/deployment": "qwen"}
    assert all(o["metadata"]["namespace"] == "llm" for o in [*stable.values(), *canary.values(), service])


def test_a_new_n_changes_the_config_hash_so_pods_roll() -> None:
    obj = sd()
    first = by_kind(render_track(obj, "stable", 7))["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    second = by_kind(render_track(obj, "stable", 11))["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert first["specpilot.io/engine-config-hash"] != second["specpilot.io/engine-config-hash"]


def test_n_outside_the_method_limits_is_refused() -> None:
    with pytest.raises(ValueError, match="allowed 1..15"):
        render_track(sd(), "canary", 16)


def test_owner_reference_is_set_only_when_given() -> None:
    owner = owner_reference({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                             "metadata": {"name": "qwen", "uid": "u-1"}})
    objects = render(sd(), owner=owner)
    assert [o["kind"] for o in objects] == ["ConfigMap", "Deployment", "Service", "ConfigMap"]  # drain.json last
    assert all(o["metadata"]["ownerReferences"] == [owner] for o in objects)
    assert all("ownerReferences" not in o["metadata"] for o in render(sd()))


def test_model_cache_and_token_secret() -> None:
    obj = load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "q"},
                "spec": {"model": "m", "speculative": {"method": "mtp", "numSpeculativeTokens": 2},
                         "engine": {"modelCache": {"claimName": "hf"}, "hfTokenSecretRef": {"name": "tok"},
                                    "env": [{"name": "A", "value": "1"}]}}})
    deployment = by_kind(render_track(obj))["Deployment"]
    c = container(deployment)
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf"}} in \
        deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "token"}}} in c["env"]
    assert engine(render_track(obj)).env == {"A": "1"}


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_render_command_prints_valid_objects_for_every_example(example: Path, capsys) -> None:
    assert main(["render", "-f", str(example)]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    # The examples leave drainSeconds out: automatic, with its <name>-drain ConfigMap.
    assert [o["kind"] for o in objects] == ["ConfigMap", "Deployment", "Service", "ConfigMap"]
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_render_command_canary_track_and_bad_n(capsys) -> None:
    dflash = next(e for e in EXAMPLES if e.stem == "dflash")
    assert main(["render", "-f", str(dflash), "--track", "canary", "--n", "11"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [o["metadata"]["name"] for o in objects] == ["qwen3-8b-dflash-canary-engine", "qwen3-8b-dflash-canary"]
    assert main(["render", "-f", str(dflash), "--n", "16"]) == 1
    assert "allowed 1..15" in capsys.readouterr().err


def test_render_command_refuses_invalid_objects_and_empty_input(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: specpilot.io/v1alpha1\nkind: SpeculativeDeployment\nmetadata: {name: b}\n"
                   "spec: {model: m, speculative: {method: eagle3, numSpeculativeTokens: 3}}\n")
    assert main(["render", "-f", str(bad)]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert f"{bad}: b: spec.speculative.draftModel: method eagle3 needs a draft model" in out.err
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: llm}\n")
    assert main(["render", "-f", str(empty)]) == 1
    assert "no SpeculativeDeployment found" in capsys.readouterr().err
