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


def _acceptance_collapsed_case() -> dict[str, Any]:
    n, pos = op.LABEL_NUM_SPECULATIVE_TOKENS, vm.LABEL_POSITION
    drafts, drafted = counter(vm.SPEC_DRAFTS), counter(vm.SPEC_DRAFTED_PER_POS)
    accepted = counter(vm.SPEC_ACCEPTED_PER_POS)
    stable = {**DEP, "track": "stable", n: "4"}
    quiet = {**OTHER, "track": "stable", n: "4"}
    healthy = {"namespace": "serving", "deployment": "llama", "track": "stable", n: "4"}
    no_plugin = {"namespace": "serving", "deployment": "phi", "track": "stable", n: "2"}
    model = {vm.LABEL_MODEL: "m"}

    def pod(labels: dict[str, str], per_min: int, accepted_per_min: list[str],
            plugin: bool = True) -> list[dict[str, str]]:
        """A pod drafting `per_min` drafts a minute, each reaching every position, and accepting
        `accepted_per_min[k]` (a promtool expansion) at position k."""
        name = {"pod": f"{labels['deployment']}-0", **model}
        out = [_series(drafts, f"0+{per_min}x150", **labels, **name)]
        for k, values in enumerate(accepted_per_min):
            if plugin:
                out.append(_series(drafted, f"0+{per_min}x150", **labels, **name, **{pos: str(k)}))
            out.append(_series(accepted, values, **labels, **name, **{pos: str(k)}))
        return out

    return {"interval": "1m", "input_series": [
        # 10 drafts/s; position 3 accepts 20% for 90 minutes, then 5%: the mean hardly moves, position 3 collapses.
        *pod(stable, 600, ["0+480x150", "0+360x150", "0+240x150", "0+120x90 10800+30x60"]),
        # Position 1 collapsing (33% to 0) at 0.05 drafts/s: too few drafts to tell it from noise.
        *pod(quiet, 3, ["0+2x150", "0+1x90 90+0x60"]),
        # Steady acceptance at every position: nothing to say, even when a batch-size schedule drafts position
        # 1 in a tenth of the drafts from 90 minutes on (fewer tokens per step, the same acceptance there).
        *pod(healthy, 600, ["0+480x150"]),
        _series(drafted, "0+600x90 54000+60x60", **healthy, pod="llama-0", **model, **{pos: "1"}),
        _series(accepted, "0+360x90 32400+36x60", **healthy, pod="llama-0", **model, **{pos: "1"}),
        # No plugin (acceptance over all drafts): position 0 falls from 80% to 20% at 90 minutes.
        *pod(no_plugin, 600, ["0+480x90 43200+120x60", "0+240x90 21600+60x60"], plugin=False),
    ], "alert_rule_test": [
        {"eval_time": "100m", "alertname": "SpecpilotAcceptanceCollapsed", "exp_alerts": []},
        {"eval_time": "115m", "alertname": "SpecpilotAcceptanceCollapsed",
         "exp_alerts": [_expected("SpecpilotAcceptanceCollapsed", stable, "25%"),
                        _expected("SpecpilotAcceptanceCollapsed", no_plugin, "25%")]},
    ]}


def _slower_case() -> dict[str, Any]:
    plain, doubtful, quiet = ({"namespace": "serving", "deployment": d} for d in ("plain", "doubtful", "quiet"))
    bound, observed, n = op.TUNER_PREDICTED_GOODPUT_BOUND, op.TUNER_OBSERVED_GOODPUT, op.NUM_SPECULATIVE_TOKENS
    n_label = op.LABEL_NUM_SPECULATIVE_TOKENS

    def off(labels: dict[str, str], lower: str, upper: str) -> list[dict[str, str]]:
        """N=0's credible interval, and another N's, which the alert must not read."""
        return [_series(bound, lower, **labels, **{n_label: "0", op.LABEL_BOUND: op.BOUND_LOWER}),
                _series(bound, upper, **labels, **{n_label: "0", op.LABEL_BOUND: op.BOUND_UPPER}),
                _series(bound, "90x60", **labels, **{n_label: "5", op.LABEL_BOUND: op.BOUND_LOWER}),
                _series(bound, "110x60", **labels, **{n_label: "5", op.LABEL_BOUND: op.BOUND_UPPER})]

    return {"interval": "1m", "input_series": [
        # DEP runs N=5 and serves 100 tokens/s; no speculation is expected at 110 to 130: slower, beyond doubt.
        _series(n, "5x60", **DEP, track="stable"),
        _series(observed, "100x60", **DEP, track="stable"),
        *off(DEP, "110x60", "130x60"),
        # `doubtful` is expected faster without speculation too (the point estimate 120), but its interval
        # reaches down to 95: not proven.
        _series(n, "5x60", **doubtful, track="stable"),
        _series(observed, "100x60", **doubtful, track="stable"),
        *off(doubtful, "95x60", "145x60"),
        # OTHER beats the whole of its no-speculation interval.
        _series(n, "5x60", **OTHER, track="stable"),
        _series(observed, "200x60", **OTHER, track="stable"),
        *off(OTHER, "110x60", "130x60"),
        # `plain` already runs without speculation: nothing to say even below the estimate.
        _series(n, "0x60", **plain, track="stable"),
        _series(observed, "100x60", **plain, track="stable"),
        *off(plain, "110x60", "130x60"),
        # `quiet` serves no traffic after 10 minutes (the operator removes its observed goodput).
        _series(n, "5x60", **quiet, track="stable"),
        _series(observed, "100x10", **quiet, track="stable"),
        *off(quiet, "110x60", "130x60"),
    ], "alert_rule_test": [
        {"eval_time": "20m", "alertname": "SpecpilotSlowerThanNoSpeculation", "exp_alerts": []},
        {"eval_time": "40m", "alertname": "SpecpilotSlowerThanNoSpeculation",
         "exp_alerts": [_expected("SpecpilotSlowerThanNoSpeculation", DEP, "10%")]},
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


CASES = [_accepted_length_case, _acceptance_collapsed_case, _rollback_case, _stalled_case, _slower_case,
         _operator_down_case, _no_leader_case, _reconcile_errors_case]


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
