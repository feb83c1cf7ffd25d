"""spec.tuning.slo: what a user may write, what is refused (naming the field and what is allowed), and what the
tuner reads from it; the same bounds hold in the checked-in CRD (CEL) and in the models."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from specpilot.api.admission import admit, schema_of
from specpilot.api.models import DEFAULT_SLO_PERCENTILE, Slo
from specpilot.api.validate import load, validate_object

CRD = yaml.safe_load((Path(__file__).resolve().parents[2] / "crds" / "specpilot.io_speculativedeployments.yaml")
                     .read_text())
SCHEMA = schema_of(CRD, "v1alpha1")
BASE: dict[str, Any] = {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                        "metadata": {"name": "x"},
                        "spec": {"model": "Qwen/Qwen3-8B", "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                                 "tuning": {"enabled": True}}}


def with_slo(slo: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    obj["spec"]["tuning"]["slo"] = slo
    return obj


def test_slo_durations_parse_as_the_specs_other_durations() -> None:
    sd = load(with_slo({"ttft": "1500ms", "tpot": "40ms", "percentile": 0.99}))
    slo = sd.spec.tuning.slo
    assert slo is not None
    assert slo.ttft_s == pytest.approx(1.5) and slo.tpot_s == pytest.approx(0.04) and slo.percentile == 0.99


def test_every_slo_field_is_optional_and_the_percentile_defaults_to_p90() -> None:
    assert load(BASE).spec.tuning.slo is None
    slo = load(with_slo({"tpot": "50ms"})).spec.tuning.slo
    assert slo is not None and slo.ttft_s is None and slo.percentile == DEFAULT_SLO_PERCENTILE == 0.9
    empty = load(with_slo({})).spec.tuning.slo
    assert empty is not None and empty.ttft is None and empty.tpot is None


@pytest.mark.parametrize(("slo", "field", "says"), [
    ({"percentile": 1.0}, "percentile", "< 1"),
    ({"percentile": 0}, "percentile", "> 0"),
    ({"percentile": -0.5}, "percentile", "> 0"),
    ({"percentile": float("nan")}, "percentile", "finite number in (0, 1)"),
    ({"percentile": float("inf")}, "percentile", "< 1"),
    ({"percentile": "0.9"}, "percentile", "must be a number"),
    ({"ttft": "0s"}, "ttft", "above 0s and at most 1h"),
    ({"ttft": "2h"}, "ttft", "above 0s and at most 1h"),
    ({"tpot": "0ms"}, "tpot", "above 0s and at most 10s"),
    ({"tpot": "11s"}, "tpot", "above 0s and at most 10s"),
    ({"tpot": "1" * 400 + "s"}, "tpot", "at most 16 characters"),
    ({"ttft": "fast"}, "ttft", "a duration like 30s"),
    ({"ttft": 1.5}, "ttft", "must be a string"),
    ({"goodput": True}, "goodput", "unknown"),
])
def test_a_bad_slo_is_refused_naming_the_field_and_what_is_allowed(slo: dict[str, Any], field: str,
                                                                   says: str) -> None:
    problems = validate_object(with_slo(slo))
    assert problems, slo
    assert any(p.path == f"spec.tuning.slo.{field}" and says in p.message for p in problems), problems


def test_the_crds_cel_rule_refuses_out_of_bound_durations_as_the_api_server_would() -> None:
    assert admit(SCHEMA, with_slo({"ttft": "1500ms", "tpot": "40ms"})) == []
    refused = admit(SCHEMA, with_slo({"ttft": "0s", "tpot": "20s"}))
    assert refused == ["spec.tuning.slo.ttft: ttft must be above 0s and at most 1h",
                       "spec.tuning.slo.tpot: tpot must be above 0s and at most 10s"]


def test_the_model_holds_the_bounds_without_the_crd() -> None:
    # An object read by a reader that skips admission (an older CRD on the server) cannot bring a zero SLO.
    with pytest.raises(ValidationError, match="above 0s"):
        Slo.model_validate({"ttft": "0ms"})
    with pytest.raises(ValidationError, match="finite"):
        Slo.model_validate({"percentile": float("nan")})
