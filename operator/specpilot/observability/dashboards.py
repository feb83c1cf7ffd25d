"""specpilot's three Grafana dashboards: Speculative decoding, Tuner and Operator.

Every metric name comes from `specpilot_runtime.vllm_metrics` or `specpilot.controller.metric_names`;
`specpilot dashboards --out DIR` writes the JSON the chart ships (charts/specpilot/dashboards/).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specpilot.controller import metric_names as op
from specpilot_runtime import live, vllm_metrics as vm

from .grafana import Dashboard, Panel, Query, Row, Variable, render
from .promql import (BY_TRACK, OPERATOR_FILTER, RATE_WINDOW, TRACK_FILTER, VLLM_FILTER, acceptance_rate, counter,
                     histogram_quantile, mean_accepted_length, rate_sum, survival_by_position)

DEPLOYMENT_TRACK = "{{namespace}}/{{deployment}} {{track}}"
DEPLOYMENT = "{{namespace}}/{{deployment}}"


def _vllm_variables() -> tuple[Variable, ...]:
    """namespace -> deployment -> model -> track, each narrowed by the ones before it."""
    running = vm.RUNNING
    return (
        Variable("namespace", "Namespace", running, op.LABEL_NAMESPACE),
        Variable("deployment", "Deployment", running, op.LABEL_DEPLOYMENT, 'namespace=~"$namespace"'),
        Variable("model", "Model", running, vm.LABEL_MODEL,
                 'namespace=~"$namespace", deployment=~"$deployment"'),
        Variable("track", "Track", running, op.LABEL_TRACK,
                 'namespace=~"$namespace", deployment=~"$deployment"'),
    )


def speculative_decoding() -> Dashboard:
    sel, by = VLLM_FILTER, BY_TRACK
    acceptance = Row("Acceptance", (
        Panel("Mean accepted length",
              "Tokens produced per verify step: 1 + accepted draft tokens / drafts. Higher is better; "
              "the ceiling is N + 1.",
              (Query(mean_accepted_length(sel, by), DEPLOYMENT_TRACK),), unit="short", min=1),
        Panel("Acceptance by position",
              "Share of the drafts reaching position k whose first k draft tokens were all accepted. Counted "
              "over the drafts that drafted position k where specpilot's runtime plugin exports them (a "
              "batch-size schedule drafts fewer than N at large batches), else over all drafts. Positions "
              "that add little suggest a lower N.",
              (Query(survival_by_position(sel, by), DEPLOYMENT_TRACK + " pos {{position}}"),),
              unit="percentunit", min=0, max=1),
        Panel("Accepted vs drafted tokens/s",
              "Draft tokens proposed and accepted per second; the gap is wasted drafting.",
              (Query(rate_sum(counter(vm.SPEC_DRAFT_TOKENS), sel, by), DEPLOYMENT_TRACK + " drafted"),
               Query(rate_sum(counter(vm.SPEC_ACCEPTED_TOKENS), sel, by), DEPLOYMENT_TRACK + " accepted")),
              unit="tps"),
        Panel("Draft acceptance rate",
              "Accepted draft tokens / drafted tokens (the runtime plugin's count where exported: vLLM's "
              "counts N per draft even when a schedule drafted fewer).",
              (Query(acceptance_rate(sel, by), DEPLOYMENT_TRACK),),
              unit="percentunit", min=0, max=1),
    ))
    serving = Row("Serving", (
        Panel("Generation tokens/s", "Output tokens generated per second.",
              (Query(rate_sum(counter(vm.GENERATION_TOKENS), sel, by), DEPLOYMENT_TRACK),), unit="tps"),
        Panel("Time per output token", "Per-request time per output token, percentiles over all pods.",
              tuple(Query(histogram_quantile(q, vm.TPOT, sel, by), f"{DEPLOYMENT_TRACK} p{round(q * 100)}")
                    for q in (0.5, 0.9, 0.99)), unit="s"),
        Panel("Running requests", "Requests in the running batch, summed over pods.",
              (Query(f"sum by ({by}) ({vm.RUNNING}{{{sel}}})", DEPLOYMENT_TRACK + " running"),
               Query(f"sum by ({by}) ({vm.WAITING}{{{sel}}})", DEPLOYMENT_TRACK + " waiting")),
              unit="short", min=0),
        Panel("KV cache use", "Fraction of the KV cache in use, the fullest pod of each track.",
              (Query(f"max by ({by}) ({vm.KV_CACHE_USAGE}{{{sel}}})", DEPLOYMENT_TRACK),),
              unit="percentunit", min=0, max=1),
    ))
    return Dashboard(
        uid="specpilot-speculative", title="specpilot / Speculative decoding",
        description="vLLM speculative decoding per SpeculativeDeployment and track: acceptance, "
                    "throughput and latency.",
        variables=_vllm_variables(), rows=(acceptance, serving))


def _predicted_for_running_n() -> str:
    """Predicted goodput of the N each track runs. count_values turns that N (a gauge's value) into the
    label the predictions are keyed by, so the two can be joined."""
    n_label = op.LABEL_NUM_SPECULATIVE_TOKENS
    running_n = (f'count_values by ({BY_TRACK}) ("{n_label}", '
                 f"max by ({BY_TRACK}) ({op.NUM_SPECULATIVE_TOKENS}{{{TRACK_FILTER}}}))")
    return (f"max by ({BY_TRACK}) ({op.TUNER_PREDICTED_GOODPUT}{{{OPERATOR_FILTER}}} "
            f"* on (namespace, deployment, {n_label}) group_right {running_n})")


def tuner() -> Dashboard:
    decisions = Row("Decisions", (
        Panel("N by track",
              "num_speculative_tokens each track runs: stable, and canary while a round is on.",
              (Query(f"max by ({BY_TRACK}) ({op.NUM_SPECULATIVE_TOKENS}{{{TRACK_FILTER}}})",
                     DEPLOYMENT_TRACK),), unit="short", min=0, width=8),
        Panel("Decision timeline",
              f"Tuning decisions per deployment: {', '.join(op.DECISIONS)}.",
              (Query(f"sum by (namespace, deployment, {op.LABEL_DECISION}) "
                     f"(increase({counter(op.TUNER_DECISIONS)}{{{OPERATOR_FILTER}}}[{RATE_WINDOW}]))",
                     DEPLOYMENT + " {{decision}}"),),
              unit="short", bars=True, stacked=True, min=0, width=10),
        Panel("Since last decision",
              "Time since the tuner last decided anything (hold included) for each deployment.",
              (Query(f"time() - max by (namespace, deployment) "
                     f"({op.TUNER_LAST_DECISION_TIMESTAMP}{{{OPERATOR_FILTER}}})", DEPLOYMENT, instant=True),),
              type="bargauge", unit="s", min=0, width=6),
        Panel("Served batch-size schedule",
              "With tuning mode schedule: N each track serves per range of running batch sizes "
              "(vLLM's num_speculative_tokens_per_batch_size). Empty: every batch size runs the track's N.",
              (Query(f"max by ({BY_TRACK}, {op.LABEL_BATCH_SIZES}) ({op.TUNER_SCHEDULE}{{{TRACK_FILTER}}})",
                     DEPLOYMENT_TRACK + " batch {{batch_sizes}}", instant=True),),
              type="bargauge", unit="short", min=0, width=12),
        Panel("Method tournament",
              "With spec.tuning.alternatives: each measured method's expected goodput at its best N, relative "
              "to the stable track's (1). Above 1 by the promotion margin: worth a canary at that N.",
              (Query(f"max by (namespace, deployment, {op.LABEL_METHOD}, {op.LABEL_ROLE}) "
                     f"({op.TUNER_METHOD_GOODPUT}{{{OPERATOR_FILTER}}})",
                     DEPLOYMENT + " {{method}} ({{role}})", instant=True),),
              type="bargauge", unit="percentunit", min=0, width=12),
    ))
    goodput = Row("Goodput", (
        Panel("Predicted goodput by N",
              "Goodput the tuner predicts for each candidate N at the observed load; N=0 is the "
              "no-speculation estimate.",
              (Query(f"max by (namespace, deployment, {op.LABEL_NUM_SPECULATIVE_TOKENS}) "
                     f"({op.TUNER_PREDICTED_GOODPUT}{{{OPERATOR_FILTER}}})",
                     DEPLOYMENT + " N={{num_speculative_tokens}}"),),
              unit="tps", min=0),
        Panel("Observed vs predicted goodput",
              "Measured goodput of each track next to the prediction for the N it runs.",
              (Query(f"max by ({BY_TRACK}) ({op.TUNER_OBSERVED_GOODPUT}{{{TRACK_FILTER}}})",
                     DEPLOYMENT_TRACK + " observed"),
               Query(_predicted_for_running_n(), DEPLOYMENT_TRACK + " predicted")),
              unit="tps", min=0),
    ))
    comparison = Row("Canary vs stable", (
        Panel("Mean accepted length by track", "Stable and canary side by side.",
              (Query(mean_accepted_length(VLLM_FILTER, BY_TRACK), DEPLOYMENT_TRACK),),
              unit="short", min=1, width=8),
        Panel("Generation tokens/s per pod by track",
              "Per-pod throughput, so tracks of different sizes compare.",
              (Query(f"{rate_sum(counter(vm.GENERATION_TOKENS), VLLM_FILTER, BY_TRACK)} / "
                     f"count by ({BY_TRACK}) (max by ({BY_TRACK}, pod) ({vm.RUNNING}{{{VLLM_FILTER}}}))",
                     DEPLOYMENT_TRACK),),
              unit="tps", min=0, width=8),
        Panel("Median time per output token by track", "Stable and canary side by side.",
              (Query(histogram_quantile(0.5, vm.TPOT, VLLM_FILTER, BY_TRACK), DEPLOYMENT_TRACK),),
              unit="s", width=8),
    ))
    return Dashboard(
        uid="specpilot-tuner", title="specpilot / Tuner",
        description="How the tuner chooses num_speculative_tokens: N per track, decisions, predicted and "
                    "observed goodput, canary against stable, switchback arms against each other.",
        variables=_vllm_variables(), rows=(decisions, goodput, comparison, _switchback()))


def _switchback() -> Row:
    """spec.tuning.measure switchback: the K the stable pods serve per batch-size band, each arm's own
    throughput and step time from the engines' switchback counters (runtime/specpilot_runtime/live.py), and
    in schedule mode the judge's per-band estimate, its interval and the K it compared."""
    # The engine core's counters carry no model_name (the API server's do): namespace and deployment select.
    sel, arm = OPERATOR_FILTER, f"namespace, deployment, {live.LABEL_ARM}"
    band = f"namespace, deployment, {op.LABEL_BAND}"

    def per_arm(numerator: str, denominator: str) -> str:
        return f"{rate_sum(counter(numerator), sel, arm)} / {rate_sum(counter(denominator), sel, arm)}"

    return Row("Switchback", (
        Panel("K in force by batch-size band",
              "Draft length the stable pods serve now at each band of running batch sizes (live.json, set "
              "without a restart), the fullest pod of each deployment.",
              (Query(f"max by (namespace, deployment, {live.LABEL_BAND}) ({live.LIVE_K}{{{sel}}})",
                     DEPLOYMENT + " batch {{band}}", instant=True),),
              type="bargauge", unit="short", min=0, width=8),
        Panel("Output tokens per step-second by arm",
              "Each arm's throughput while in force: tokens out over the seconds its steps took, the steps "
              "right after a switch left out. The arms alternate in the same pods, so they saw the same load.",
              (Query(per_arm(live.SB_OUTPUT_TOKENS, live.SB_STEP_SECONDS), DEPLOYMENT + " {{arm}}"),),
              unit="tps", min=0, width=8),
        Panel("Step time by arm",
              "Seconds per engine step while each arm is in force.",
              (Query(per_arm(live.SB_STEP_SECONDS, live.SB_STEPS), DEPLOYMENT + " {{arm}}"),),
              unit="s", min=0, width=8),
        Panel("Judged gain by batch-size band",
              "Schedule mode: the judge's estimate of the arm's gain over the stable's K at each band, with the "
              "ends of its interval, from the newest decision that judged an arm band by band (its Event gives the rulings).",
              tuple(Query(f"max by ({band}) ({metric}{{{sel}{match}}})", f"{DEPLOYMENT} batch {{{{band}}}} {what}",
                          instant=True)
                    for metric, match, what in (
                        (op.TUNER_BAND_GAIN_BOUND, f', {op.LABEL_BOUND}="{op.BOUND_LOWER}"', op.BOUND_LOWER),
                        (op.TUNER_BAND_GAIN, "", "estimate"),
                        (op.TUNER_BAND_GAIN_BOUND, f', {op.LABEL_BOUND}="{op.BOUND_UPPER}"', op.BOUND_UPPER))),
              type="bargauge", unit="percent", width=12),
        Panel("Judged K by batch-size band",
              "The K each arm drafted at each band in that comparison: the estimate is the canary arm's K "
              "against the stable's.",
              (Query(f"max by ({band}, {op.LABEL_TRACK}) ({op.TUNER_BAND_K}{{{TRACK_FILTER}}})",
                     DEPLOYMENT + " batch {{band}} {{track}}", instant=True),),
              type="bargauge", unit="short", min=0, width=12),
    ))


def operator() -> Dashboard:
    reconciles = Row("Reconciles", (
        Panel("Reconciles/s by result", f"{', '.join(op.RESULTS)}.",
              (Query(rate_sum(counter(op.RECONCILES), OPERATOR_FILTER, op.LABEL_RESULT), "{{result}}"),),
              unit="ops", stacked=True, min=0),
        Panel("Reconcile errors/s", "Reconciles that raised or hit an API error, by reason.",
              (Query(rate_sum(counter(op.RECONCILE_ERRORS), OPERATOR_FILTER,
                              f"namespace, deployment, {op.LABEL_REASON}"), DEPLOYMENT + " {{reason}}"),),
              unit="ops", min=0),
        Panel("Reconcile latency", "Percentiles of one reconcile's duration.",
              tuple(Query(histogram_quantile(q, op.RECONCILE_DURATION, "", "instance"),
                          f"{{{{instance}}}} p{round(q * 100)}") for q in (0.5, 0.9, 0.99)), unit="s"),
        Panel("Invalid specs", "SpeculativeDeployments whose spec fails validation (SpecValid=False).",
              (Query(f"sum by (namespace, deployment) ({op.SPEC_INVALID}{{{OPERATOR_FILTER}}}) > 0",
                     DEPLOYMENT),), unit="short", bars=True, min=0),
    ))
    state = Row("State", (
        Panel("Managed objects", "SpeculativeDeployments and their children, per kind.",
              (Query(f"max by ({op.LABEL_KIND}) ({op.MANAGED_OBJECTS})", "{{kind}}", instant=True),),
              type="stat", unit="short", width=8),
        Panel("Leader", "1 on the replica holding the leader Lease; exactly one should.",
              (Query(f"max by (instance) ({op.LEADER})", "{{instance}}"),), type="state-timeline",
              unit="short", width=8),
        Panel("Ready stable replicas", "Ready replicas of each stable Deployment.",
              (Query(f"max by (namespace, deployment) ({op.READY_REPLICAS}{{{OPERATOR_FILTER}}})",
                     DEPLOYMENT),), unit="short", width=8, min=0),
    ))
    return Dashboard(
        uid="specpilot-operator", title="specpilot / Operator",
        description="The specpilot operator: reconciles, errors, latency and what it manages.",
        variables=(
            Variable("namespace", "Namespace", op.NUM_SPECULATIVE_TOKENS, op.LABEL_NAMESPACE),
            Variable("deployment", "Deployment", op.NUM_SPECULATIVE_TOKENS, op.LABEL_DEPLOYMENT,
                     'namespace=~"$namespace"'),
        ),
        rows=(reconciles, state))


DASHBOARDS = {"speculative-decoding": speculative_decoding, "tuner": tuner, "operator": operator}


def rendered() -> dict[str, dict[str, Any]]:
    """File name (without .json) -> Grafana JSON, for every dashboard."""
    return {name: render(build()) for name, build in DASHBOARDS.items()}


def to_text(dashboard: dict[str, Any]) -> str:
    """The checked-in form: stable key order so regeneration gives no diff."""
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def write(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, dashboard in rendered().items():
        path = out / f"{name}.json"
        path.write_text(to_text(dashboard))
        written.append(path)
    return written
