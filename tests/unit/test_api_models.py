"""The pydantic models: contract field names, defaults, duration parsing."""

from __future__ import annotations

import pytest

from specpilot.api.models import SpeculativeDeployment, duration_seconds


def _minimal() -> dict:
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": "q"},
            "spec": {"model": "Qwen/Qwen3-8B",
                     "speculative": {"method": "dflash", "draftModel": "z-lab/Qwen3-8B-DFlash-b16",
                                     "numSpeculativeTokens": 7}}}


def test_defaults_fill_every_optional_section() -> None:
    spec = SpeculativeDeployment.model_validate(_minimal()).spec
    assert spec.replicas == 1
    assert (spec.accelerator.vendor, spec.accelerator.count) == ("amd", 1)
    assert spec.image is None and spec.served_model_name is None
    assert spec.engine.args == [] and spec.engine.env == [] and spec.engine.resources == {}
    assert spec.tuning.enabled is False and spec.tuning.objective == "throughput"
    assert spec.tuning.candidates is None
    canary = spec.tuning.canary
    assert (canary.replicas, canary.analysis_window, canary.windows, canary.progress_deadline) == (1, "5m", 6, "20m")
    assert (spec.tuning.canary_margin, spec.tuning.confidence, spec.tuning.cooldown) == (0.02, 0.95, "1h")
    # Left out, the margin is the measure's: a switchback promotion restarts nothing.
    assert spec.tuning.promotion_margin is None
    live = spec.tuning.model_copy(update={"measure": "switchback"})
    # A parallel drafter's N (and any method canary) is still a restart: a canary's margin.
    assert (live.margin_for("mtp"), live.margin_for("dflash"), live.canary_margin) == (0.005, 0.02, 0.02)


def test_contract_field_names_round_trip_as_camel_case() -> None:
    obj = _minimal()
    obj["spec"].update({
        "servedModelName": "qwen3-8b",
        "engine": {"args": ["--max-model-len=8192"], "env": [{"name": "A", "value": "1"}],
                   "nodeSelector": {"gpu": "mi300x"}, "modelCache": {"claimName": "hf"},
                   "hfTokenSecretRef": {"name": "hf"}},
        "tuning": {"enabled": True, "candidates": [3, 7, 11, 15], "objective": "latency",
                   "canary": {"replicas": 2, "analysisWindow": "30s", "windows": 4, "progressDeadline": "10m"},
                   "promotionMargin": 0.05, "confidence": 0.9, "cooldown": "30m"},
    })
    obj["spec"]["speculative"]["blockSize"] = 16
    dumped = SpeculativeDeployment.model_validate(obj).model_dump(by_alias=True, exclude_none=True)
    assert dumped["spec"]["servedModelName"] == "qwen3-8b"
    assert dumped["spec"]["speculative"]["numSpeculativeTokens"] == 7
    assert dumped["spec"]["speculative"]["blockSize"] == 16
    assert dumped["spec"]["engine"]["hfTokenSecretRef"] == {"name": "hf", "key": "token"}
    assert dumped["spec"]["tuning"]["canary"]["analysisWindow"] == "30s"
    assert dumped["spec"]["tuning"]["promotionMargin"] == 0.05


def test_unknown_fields_are_refused() -> None:
    obj = _minimal()
    obj["spec"]["speculative"]["numSpecTokens"] = 3
    with pytest.raises(ValueError, match="numSpecTokens"):
        SpeculativeDeployment.model_validate(obj)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25)])
def test_duration_seconds(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


def test_duration_rejects_words() -> None:
    with pytest.raises(ValueError, match="duration"):
        duration_seconds("5 minutes")
