"""The alert rules: checked in as generated, valid for promtool, and behaving on input series.

The promtool unit-test file is built here from the metric-name modules, so a renamed metric breaks the
test rather than silently testing a series nobody exports.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.controller import metric_names as op
from specpilot.observability import alerts
from specpilot.observability.promql import counter
from specpilot_runtime import vllm_metrics as vm

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "specpilot" / "files" / "specpilot-alerts.yaml"
PROMTOOL = shutil.which("promtool")
RULES_BY_NAME = {r["alert"]: r for g in alerts.rule_groups()["groups"] for r in g["rules"] if "alert" in r}



@pytest.fixture(scope="module")
def promtool() -> str:
    if PROMTOOL is None:
        pytest.fail("promtool is missing: run `make tools`")
    return PROMTOOL


def _labels(**labels: str) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    return {"series": f"{metric}{{{_labels(**labels)}}}", "values": values}


def _expected(alertname: str, labels: dict[str, str], value: str = "") -> dict[str, Any]:
    """An alert as Prometheus would send it: the rule's annotations with the labels and `value` (the
    rendered text of whatever `$value` expression the annotation uses) filled in."""
    rule = RULES_BY_NAME[alertname]
    annotations = {}
    for key, text in rule["annotations"].items():
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        annotations[key] = re.sub(r"\{\{ \$value[^}]*\}\}", value, text)
    return {"exp_labels": {**rule["labels"], **labels}, "exp_annotations": annotations}


DEP = {"namespace": "serving", "deployment": "qwen"}
OTHER = {"namespace": "serving", "deployment": "gemma"}


def _accepted_length_case() -> dict[str, Any]:
    n = op.LABEL_NUM_SPECULATIVE_TOKENS
    stable = {**DEP, "track": "stable", n: "4"}
    quiet = {**OTHER, "track": "stable", n: "4"}
    promoted_from = {"namespace": "serving", "deployment": "llama", "track": "stable", n: "7"}
    promoted_to = {**promoted_from, n: "3"}
    model = {vm.LABEL_MODEL: "m"}
    return {"interval": "1m", "input_series": [
        # 10 drafts/s throughout; accepted draft tokens per draft 2.0 for 90 minutes, then 1.0 (L 3 -> 2).
        _series(counter(vm.SPEC_DRAFTS), "0+600x150", **stable, pod="qwen-0", **model),
        _series(counter(vm.SPEC_ACCEPTED_TOKENS), "0+1200x90 108000+600x60", **stable, pod="qwen-0", **model),
        # The same drop at 0.5 drafts/s: too little traffic to alert on.
        _series(counter(vm.SPEC_DRAFTS), "0+30x150", **quiet, pod="gemma-0", **model),
        _series(counter(vm.SPEC_ACCEPTED_TOKENS), "0+60x90 5400+30x60", **quiet, pod="gemma-0", **model),
        # A promotion from N=7 (L 4) to N=3 (L 2.5) at 90 minutes: new pods, a new baseline, no alert.
        _series(counter(vm.SPEC_DRAFTS), "0+600x90", **promoted_from, pod="llama-a", **model),
        _series(counter(vm.SPEC_ACCEPTED_TOKENS), "0+1800x90", **promoted_from, pod="llama-a", **model),
        _series(counter(vm.SPEC_DRAFTS), "_x90 0+600x60", **promoted_to, pod="llama-b", **model),
        _series(counter(vm.SPEC_ACCEPTED_TOKENS), "_x90 0+900x60", **promoted_to, pod="llama-b", **model),
    ], "alert_rule_test": [
        {"eval_time": "85m", "alertname": "SpecpilotAcceptedLengthDropped", "exp_alerts": []},
        {"eval_time": "110m", "alertname": "SpecpilotAcceptedLengthDropped",
         "exp_alerts": [_expected("SpecpilotAcceptedLengthDropped", stable, "1.00")]},
        # Long enough after the promotion that a per-deployment baseline would have fired for llama.
        {"eval_time": "120m", "alertname": "SpecpilotAcceptedLengthDropped",
         "exp_alerts": [_expected("SpecpilotAcceptedLengthDropped", stable, "1.00")]},
    ]}


def _rollback_case() -> dict[str, Any]:
    rollback = {op.LABEL_DECISION: op.DECISION_ROLLBACK}
    decisions = counter(op.TUNER_DECISIONS)
    return {"interval": "1m", "input_series": [
        # DEP's rollback series is born at 1 (no zero before it); OTHER's goes 0 -> 1 at 20m.
        _series(decisions, "_x9 1x50", **DEP, **rollback),
        _series(decisions, "0x19 1x40", **OTHER, **rollback),
        _series(decisions, "0+1x59", **DEP, **{op.LABEL_DECISION: op.DECISION_HOLD}),
    ], "alert_rule_test": [
        {"eval_time": "5m", "alertname": "SpecpilotCanaryRolledBack", "exp_alerts": []},
        {"eval_time": "12m", "alertname": "SpecpilotCanaryRolledBack",
         "exp_alerts": [_expected("SpecpilotCanaryRolledBack", DEP)]},
        {"eval_time": "22m", "alertname": "SpecpilotCanaryRolledBack",
         "exp_alerts": [_expected("SpecpilotCanaryRolledBack", DEP), _expected("SpecpilotCanaryRolledBack", OTHER)]},
        {"eval_time": "50m", "alertname": "SpecpilotCanaryRolledBack", "exp_alerts": []},
    ]}


def _stalled_case() -> dict[str, Any]:
    # DEP last decided at t=0; OTHER decides every minute (its gauge holds the decision's unix time).
    return {"interval": "1m", "input_series": [
        _series(op.TUNER_LAST_DECISION_TIMESTAMP, "0x80", **DEP),
        _series(op.TUNER_LAST_DECISION_TIMESTAMP, "0+60x80", **OTHER),
    ], "alert_rule_test": [
        {"eval_time": "62m", "alertname": "SpecpilotTunerStalled", "exp_alerts": []},
        {"eval_time": "70m", "alertname": "SpecpilotTunerStalled",
         "exp_alerts": [_expected("SpecpilotTunerStalled", DEP, "1h 10m 0s")]},
    ]}


def _slower_case() -> dict[str, Any]:
    off = {"namespace": "serving", "deployment": "plain"}
    predicted, observed, n = op.TUNER_PREDICTED_GOODPUT, op.TUNER_OBSERVED_GOODPUT, op.NUM_SPECULATIVE_TOKENS
    n_label = op.LABEL_NUM_SPECULATIVE_TOKENS
    return {"interval": "1m", "input_series": [
        # DEP runs N=5 and serves 100 tokens/s where no speculation is predicted at 120: slower.
        _series(n, "5x60", **DEP, track="stable"),
        _series(observed, "100x60", **DEP, track="stable"),
        _series(predicted, "120x60", **DEP, **{n_label: "0"}),
        _series(predicted, "150x60", **DEP, **{n_label: "5"}),
        # OTHER runs N=3 and beats its no-speculation estimate.
        _series(n, "3x60", **OTHER, track="stable"),
        _series(observed, "200x60", **OTHER, track="stable"),
        _series(predicted, "120x60", **OTHER, **{n_label: "0"}),
        # `plain` already runs without speculation: nothing to say even below the estimate.
        _series(n, "0x60", **off, track="stable"),
        _series(observed, "100x60", **off, track="stable"),
        _series(predicted, "120x60", **off, **{n_label: "0"}),
    ], "alert_rule_test": [
        {"eval_time": "20m", "alertname": "SpecpilotSlowerThanNoSpeculation", "exp_alerts": []},
        {"eval_time": "40m", "alertname": "SpecpilotSlowerThanNoSpeculation",
         "exp_alerts": [_expected("SpecpilotSlowerThanNoSpeculation", DEP)]},
    ]}


def _operator_down_case() -> dict[str, Any]:
    return {"interval": "1m", "input_series": [
        # One leader for 20 minutes, then the only replica disappears.
        _series(op.LEADER, "1x20", instance="op-0"),
        _series(op.LEADER, "0x20", instance="op-1"),
    ], "alert_rule_test": [
        {"eval_time": "15m", "alertname": "SpecpilotOperatorDown", "exp_alerts": []},
        {"eval_time": "35m", "alertname": "SpecpilotOperatorDown",
         "exp_alerts": [_expected("SpecpilotOperatorDown", {})]},
    ]}


def _no_leader_case() -> dict[str, Any]:
    return {"interval": "1m", "input_series": [
        _series(op.LEADER, "0x20", instance="op-0"),
        _series(op.LEADER, "0x20", instance="op-1"),
    ], "alert_rule_test": [
        {"eval_time": "10m", "alertname": "SpecpilotOperatorDown",
         "exp_alerts": [_expected("SpecpilotOperatorDown", {})]},
    ]}


def _reconcile_errors_case() -> dict[str, Any]:
    result = op.LABEL_RESULT
    return {"interval": "1m", "input_series": [
        # DEP fails half its reconciles; OTHER never fails.
        _series(counter(op.RECONCILES), "0+10x60", **DEP, **{result: op.RESULT_APPLIED}),
        _series(counter(op.RECONCILE_ERRORS), "0+5x60", **DEP, **{op.LABEL_REASON: "Conflict"}),
        _series(counter(op.RECONCILES), "0+10x60", **OTHER, **{result: op.RESULT_UNCHANGED}),
        _series(counter(op.RECONCILE_ERRORS), "0x60", **OTHER, **{op.LABEL_REASON: "Conflict"}),
        # A spec refused for 30 minutes.
        _series(op.SPEC_INVALID, "1x30", **OTHER),
        _series(op.SPEC_INVALID, "0x30", **DEP),
    ], "alert_rule_test": [
        {"eval_time": "10m", "alertname": "SpecpilotReconcileErrors", "exp_alerts": []},
        {"eval_time": "30m", "alertname": "SpecpilotReconcileErrors",
         "exp_alerts": [_expected("SpecpilotReconcileErrors", DEP, "50%")]},
        {"eval_time": "20m", "alertname": "SpecpilotSpecInvalid",
         "exp_alerts": [_expected("SpecpilotSpecInvalid", OTHER)]},
    ]}


CASES = [_accepted_length_case, _rollback_case, _stalled_case, _slower_case, _operator_down_case,
         _no_leader_case, _reconcile_errors_case]


def test_checked_in_rules_are_generated_from_code() -> None:
    assert RULES.read_text() == alerts.to_text(alerts.rule_groups()), \
        "charts/specpilot/files/specpilot-alerts.yaml is stale: run `specpilot alerts` (or `make chart-assets`)"


def test_promtool_check_rules(promtool: str) -> None:
    proc = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in alerts.rule_groups()['groups'])} rules found" in proc.stdout


def test_every_alert_has_a_unit_test() -> None:
    tested = {t["alertname"] for case in CASES for t in case()["alert_rule_test"] if t["exp_alerts"]}
    assert tested == set(RULES_BY_NAME)


def test_promtool_unit_tests(promtool: str, tmp_path: Path) -> None:
    tests = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [case() for case in CASES]}
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", str(tmp_path / "alerts_test.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
