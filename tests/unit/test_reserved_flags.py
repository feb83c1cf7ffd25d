"""Reserved vLLM flags in every spelling vLLM 0.33's parser accepts: the runtime's
check, the CRD's CEL rule and `specpilot validate` agree, and `model` / `servedModelName` are never flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from specpilot.api.admission import schema_of
from specpilot.api.cel import evaluate
from specpilot.api.validate import validate_object
from specpilot_runtime.engine_config import EngineConfig, option_name, reserved_flags_named

CRD = yaml.safe_load((Path(__file__).resolve().parents[2] / "crds" / "specpilot.io_speculativedeployments.yaml")
                     .read_text())
ENGINE_RULES = [r["rule"] for r in schema_of(CRD, "v1alpha1")["properties"]["spec"]["properties"]["engine"]
                ["x-kubernetes-validations"]]

# (argv item, the reserved flag vLLM would read it as): the smuggling the issue found, and more.
SMUGGLED = [
    ("--speculative-config.num_speculative_tokens=9", "--speculative-config"),
    ("--speculative_config.method=ngram", "--speculative-config"),
    ("-sc.method=ngram", "-sc"),
    ("--speculative.method=ngram", "--speculative-config"),
    ("--tensor_parallel_size=4", "--tensor-parallel-size"),
    ("--tensor-parallel=4", "--tensor-parallel-size"),
    ("--tensor-parallel", "--tensor-parallel-size"),
    ("-tp=4", "-tp"),
    ("-t", "-tp"),
    ("--served_model_name=x", "--served-model-name"),
    ("--served-model", "--served-model-name"),
    ("--hos=0.0.0.0", "--host"),
    ("--port", "--port"),
    ("--num_speculative_tokens=3", "--num-speculative-tokens"),
    ("--config", "--config"),
    ("--config=/models/evil.yaml", "--config"),
]

ALLOWED = ["--max-model-len=8192", "--max_model_len", "8192", "--seed=3", "--model-impl=vllm",
           "--config-format=hf", "--served-model-name-suffix", "--gpu-memory-utilization", "0.9", "-O3", "-",
           "--", "-1", "-0.5", "--enforce-eager", "--hostx", "-tpx"]


@pytest.mark.parametrize(("arg", "flag"), SMUGGLED)
def test_runtime_resolves_every_spelling_to_the_reserved_flag(arg: str, flag: str) -> None:
    assert flag in reserved_flags_named(arg)
    problems = EngineConfig(model="m", args=["--enforce-eager", arg]).problems()
    assert [p.path for p in problems] == ["args[1]"]
    assert flag in problems[0].message


@pytest.mark.parametrize("arg", ALLOWED)
def test_runtime_lets_other_flags_and_values_through(arg: str) -> None:
    assert reserved_flags_named(arg) == []
    assert EngineConfig(model="m", args=[arg]).problems() == []


def test_option_names_are_normalised_like_vllm() -> None:
    assert option_name("--tensor_parallel_size=4") == "--tensor-parallel-size"
    assert option_name("--speculative_config.num_speculative_tokens") == "--speculative-config"
    assert option_name("4") is None and option_name("-") is None and option_name("--") is None


def test_disable_log_stats_spellings_are_refused_only_with_tuning() -> None:
    from specpilot_runtime.engine_config import arg_problems

    for arg in ("--disable-log-stats", "--disable_log_stats", "--disable-log-stat"):
        assert arg_problems([arg], "args") == []
        assert "tuning reads" in arg_problems([arg], "args", tuning=True)[0].message


@pytest.mark.parametrize("arg", [a for a, _ in SMUGGLED] + ALLOWED)
def test_cel_rules_agree_with_the_runtime(arg: str) -> None:
    refused_by_cel = not all(evaluate(rule, {"args": [arg]}) for rule in ENGINE_RULES)
    assert refused_by_cel == bool(reserved_flags_named(arg))


def _sd(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "x"},
            "spec": {"model": "Qwen/Qwen3-8B", "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                     **spec}}


@pytest.mark.parametrize(("arg", "flag"), SMUGGLED)
def test_validate_names_the_argument_and_the_flag(arg: str, flag: str) -> None:
    problems = validate_object(_sd(engine={"args": ["--enforce-eager", arg]}))
    assert [p.path for p in problems] == ["spec.engine.args[1]"], [str(p) for p in problems]
    assert flag in problems[0].message


@pytest.mark.parametrize(("field", "value"), [("model", "--tensor_parallel_size=8"), ("model", "-m"),
                                              ("model", "Qwen/Qwen3-8B\x00"), ("servedModelName", "--host=1.2.3.4"),
                                              ("servedModelName", "name\nwith-newline")])
def test_model_and_served_name_that_vllm_would_misread_are_refused(field: str, value: str) -> None:
    problems = validate_object(_sd(**{field: value}))
    assert any(p.path == f"spec.{field}" and "start with '-'" in p.message for p in problems), \
        [str(p) for p in problems]
    key = "served_model_name" if field == "servedModelName" else "model"
    with pytest.raises(ValidationError):
        EngineConfig(**{"model": "m", key: value})
