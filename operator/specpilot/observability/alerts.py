"""specpilot's Prometheus recording rules and alerts, as a rule file (the `groups:` document).

`specpilot alerts --out FILE` writes charts/specpilot/files/specpilot-alerts.yaml, which the chart wraps
in a PrometheusRule and `promtool check rules` / `promtool test rules` read as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from specpilot.controller import metric_names as op
from specpilot.tuning.constants import PLAN_INTERVAL
from specpilot_runtime import vllm_metrics as vm

from .promql import BY_TRACK, counter, drafted_by_position, mean_accepted_length, rate_sum, survival_by_position

BY_DEPLOYMENT = f"{op.LABEL_NAMESPACE}, {op.LABEL_DEPLOYMENT}"
# Per N as well: a promotion to a lower N lowers the mean accepted length by design, and must start a
# new baseline rather than look like a drop.
BY_TRACK_AND_N = f"{BY_TRACK}, {op.LABEL_NUM_SPECULATIVE_TOKENS}"

# Recorded so the drop alert can compare the current level with its own recent history.
MEAN_ACCEPTED_LENGTH_5M = "specpilot:vllm_mean_accepted_length:rate5m"
DRAFTS_5M = "specpilot:vllm_drafts:rate5m"
# Per draft position too, so the collapse alert compares each position with its own history.
POSITION_ACCEPTANCE_5M = "specpilot:vllm_position_acceptance:rate5m"
POSITION_DRAFTS_5M = "specpilot:vllm_position_drafts:rate5m"

# The accepted-draft part of the mean accepted length (L - 1) falling below this share of its level
# over the hour before is a sharp drop: the workload or the draft changed, and N is probably wrong now.
ACCEPTED_LENGTH_DROP_RATIO = 0.7
BASELINE_WINDOW = "1h"
# Below this many drafts per second the 5-minute mean is too noisy to alert on.
MIN_DRAFTS_PER_SECOND = 1
# Acceptance at a draft position below this share of its own baseline has collapsed: the draft no longer
# predicts the target there (another checkpoint, chat template or workload), whatever the mean does.
ACCEPTANCE_COLLAPSE_RATIO = 0.5
COLLAPSE_FOR = "15m"
# The baseline: the position's mean over 6 hours, ending longer ago than the rate window plus `for`, so a
# collapse is never part of its own baseline while it is pending, and a new series (a new N) has had 15
# minutes of baseline by the time it may fire.
COLLAPSE_BASELINE_WINDOW = "6h"
COLLAPSE_BASELINE_OFFSET = "30m"
# Enough traffic: the drafts reaching the position in 5 minutes would have had 60 tokens accepted there at
# the baseline rate, so halving it is 4 Poisson standard deviations, not noise.
MIN_BASELINE_ACCEPTED_PER_SECOND = 0.2
# A tuner that decides nothing (not even hold) for this long is stuck: scrapes failing or loop dead.
TUNER_STALL_SECONDS = 3600
# Reconciles failing more than this share of the time, persistently.
RECONCILE_ERROR_RATIO = 0.1

DASHBOARD_SPECULATIVE = "specpilot-speculative"
DASHBOARD_TUNER = "specpilot-tuner"
DASHBOARD_OPERATOR = "specpilot-operator"


def _alert(name: str, expr: str, duration: str, severity: str, summary: str, description: str,
           dashboard: str) -> dict[str, Any]:
    return {"alert": name, "expr": expr, "for": duration,
            "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description, "dashboard_uid": dashboard}}


def _recording_rules() -> list[dict[str, Any]]:
    return [
        {"record": MEAN_ACCEPTED_LENGTH_5M, "expr": mean_accepted_length("", BY_TRACK_AND_N, "5m")},
        {"record": DRAFTS_5M, "expr": rate_sum(counter(vm.SPEC_DRAFTS), "", BY_TRACK_AND_N, "5m")},
        {"record": POSITION_ACCEPTANCE_5M, "expr": survival_by_position("", BY_TRACK_AND_N, "5m")},
        {"record": POSITION_DRAFTS_5M, "expr": drafted_by_position("", BY_TRACK_AND_N, "5m")},
    ]


def _vllm_alerts() -> list[dict[str, Any]]:
    drop = (f"({MEAN_ACCEPTED_LENGTH_5M} - 1)\n"
            f"  < {ACCEPTED_LENGTH_DROP_RATIO} * (avg_over_time({MEAN_ACCEPTED_LENGTH_5M}[{BASELINE_WINDOW}] "
            f"offset 10m) - 1)\n"
            f"and {DRAFTS_5M} > {MIN_DRAFTS_PER_SECOND}")
    baseline = f"avg_over_time({POSITION_ACCEPTANCE_5M}[{COLLAPSE_BASELINE_WINDOW}] offset {COLLAPSE_BASELINE_OFFSET})"
    # Per position, then the worst one per track and N: one alert per collapse, not one per position.
    collapsed = (f"min by ({BY_TRACK_AND_N}) (\n"
                 f"    {POSITION_ACCEPTANCE_5M} / {baseline}\n"
                 f"  and {POSITION_DRAFTS_5M} * {baseline} > {MIN_BASELINE_ACCEPTED_PER_SECOND}\n"
                 f") < {ACCEPTANCE_COLLAPSE_RATIO}")
    return [_alert(
        "SpecpilotAcceptedLengthDropped", drop, "10m", "warning",
        "Mean accepted length of {{ $labels.namespace }}/{{ $labels.deployment }} ({{ $labels.track }}, "
        "N={{ $labels.num_speculative_tokens }}) dropped sharply",
        "Accepted draft tokens per step fell below "
        f"{round(ACCEPTED_LENGTH_DROP_RATIO * 100)}% of their level over the previous {BASELINE_WINDOW}; "
        "now {{ $value | printf \"%.2f\" }} extra tokens per step. The traffic or the draft changed: "
        "the current N is likely no longer the best.",
        DASHBOARD_SPECULATIVE), _alert(
        "SpecpilotAcceptanceCollapsed", collapsed, COLLAPSE_FOR, "warning",
        "Draft acceptance of {{ $labels.namespace }}/{{ $labels.deployment }} ({{ $labels.track }}, "
        "N={{ $labels.num_speculative_tokens }}) collapsed",
        "Over the last 5 minutes, acceptance at its worst draft position is {{ $value | humanizePercentage }} "
        f"of that position's mean over the {COLLAPSE_BASELINE_WINDOW} before the last {COLLAPSE_BASELINE_OFFSET} "
        f"(alert below {ACCEPTANCE_COLLAPSE_RATIO:.0%}, for {COLLAPSE_FOR}), with enough drafts to tell. The "
        "draft no longer predicts the target: a changed draft checkpoint, chat template or workload. Every "
        "token drafted there now costs compute and earns nothing. With tuning enabled the drift check re-plans N; "
        "either way, find what changed.",
        DASHBOARD_SPECULATIVE)]


def _tuner_alerts() -> list[dict[str, Any]]:
    rollbacks = f'{counter(op.TUNER_DECISIONS)}{{{op.LABEL_DECISION}="{op.DECISION_ROLLBACK}"}}'
    # increase() misses the first rollback of a series born at 1; `unless ... offset` catches that case.
    rolled_back = (f"sum by ({BY_DEPLOYMENT}) (increase({rollbacks}[15m])) > 0\n"
                   f"or sum by ({BY_DEPLOYMENT}) ({rollbacks} > 0 unless {rollbacks} offset 15m)")
    stalled = f"time() - max by ({BY_DEPLOYMENT}) ({op.TUNER_LAST_DECISION_TIMESTAMP}) > {TUNER_STALL_SECONDS}"
    stable = f'{op.LABEL_TRACK}="stable"'
    # The low end of N=0's credible interval, not its point estimate: the alert fires only when no
    # speculation is better beyond the tuner's doubt. The observed gauge is gone in a window without
    # traffic, and so is the alert.
    off_lower = (f'{op.TUNER_PREDICTED_GOODPUT_BOUND}{{{op.LABEL_NUM_SPECULATIVE_TOKENS}="0", '
                 f'{op.LABEL_BOUND}="{op.BOUND_LOWER}"}}')
    slower = (f"max by ({BY_DEPLOYMENT}) ({off_lower})\n"
              f"  / on ({BY_DEPLOYMENT}) max by ({BY_DEPLOYMENT}) ({op.TUNER_OBSERVED_GOODPUT}{{{stable}}}) - 1 > 0\n"
              f"and on ({BY_DEPLOYMENT}) max by ({BY_DEPLOYMENT}) ({op.NUM_SPECULATIVE_TOKENS}{{{stable}}}) > 0")
    return [
        _alert("SpecpilotCanaryRolledBack", rolled_back, "0m", "info",
               "A canary of {{ $labels.namespace }}/{{ $labels.deployment }} was rolled back",
               "The tuner tried another N and rolled it back (worse, inconclusive or unhealthy); stable "
               "was not touched. status.tuning.history and the object's Events say why.",
               DASHBOARD_TUNER),
        _alert("SpecpilotTunerStalled", stalled, "5m", "warning",
               "The tuner of {{ $labels.namespace }}/{{ $labels.deployment }} has decided nothing for "
               "{{ $value | humanizeDuration }}",
               "No tuning decision, not even hold, for over "
               f"{TUNER_STALL_SECONDS // 60} minutes: scrapes of the vLLM pods are failing or the tuning "
               "loop is stuck. The object's Tuning condition says why.",
               DASHBOARD_TUNER),
        _alert("SpecpilotSlowerThanNoSpeculation", slower, "30m", "warning",
               "{{ $labels.namespace }}/{{ $labels.deployment }} serves slower than it would without "
               "speculation",
               "Speculation costs more than it gives: even at the low end of its "
               f"{PLAN_INTERVAL:.0%} credible interval, the tuner expects "
               "{{ $value | humanizePercentage }} more goodput per pod without speculation (N=0) than the "
               "stable track measures, for 30 minutes. Let the tuner try N=0 (add 0 to "
               "spec.tuning.candidates) or set method off.",
               DASHBOARD_TUNER),
    ]


def _operator_alerts() -> list[dict[str, Any]]:
    errors = rate_sum(counter(op.RECONCILE_ERRORS), "", BY_DEPLOYMENT, "10m")
    reconciles = rate_sum(counter(op.RECONCILES), "", BY_DEPLOYMENT, "10m")
    return [
        _alert("SpecpilotOperatorDown", f"absent(max({op.LEADER}) == 1)", "5m", "critical",
               "No specpilot operator is leading",
               "No scraped operator replica holds the leader Lease: the operator is down, not scraped, "
               "or stuck electing. SpeculativeDeployments are neither reconciled nor tuned.",
               DASHBOARD_OPERATOR),
        _alert("SpecpilotReconcileErrors", f"{errors}\n  / {reconciles}\n  > {RECONCILE_ERROR_RATIO}",
               "15m", "warning",
               "Reconciles of {{ $labels.namespace }}/{{ $labels.deployment }} keep failing",
               "{{ $value | humanizePercentage }} of reconciles failed over 10 minutes, for 15 minutes. "
               "The operator's log and the object's Events name the API error.",
               DASHBOARD_OPERATOR),
        _alert("SpecpilotSpecInvalid", f"max by ({BY_DEPLOYMENT}) ({op.SPEC_INVALID}) == 1", "10m", "info",
               "{{ $labels.namespace }}/{{ $labels.deployment }} has an invalid spec",
               "The spec fails validation (SpecValid=False); the running pods were left as they were. "
               "`kubectl describe` shows the reason.",
               DASHBOARD_OPERATOR),
    ]


def rule_groups() -> dict[str, Any]:
    return {"groups": [
        {"name": "specpilot.recording", "rules": _recording_rules()},
        {"name": "specpilot.vllm", "rules": _vllm_alerts()},
        {"name": "specpilot.tuner", "rules": _tuner_alerts()},
        {"name": "specpilot.operator", "rules": _operator_alerts()},
    ]}


class _Dumper(yaml.SafeDumper):
    """Multi-line expressions as literal blocks, so the file reads like hand-written rules."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def to_text(groups: dict[str, Any]) -> str:
    header = "# Generated by `specpilot alerts`; edit operator/specpilot/observability/alerts.py instead.\n"
    return header + yaml.dump(groups, Dumper=_Dumper, sort_keys=False, width=1000, default_flow_style=False)


def write(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_text(rule_groups()))
    return out
