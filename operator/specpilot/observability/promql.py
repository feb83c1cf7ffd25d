"""PromQL shared by the dashboards and the alerts, spelled from the metric-name modules.

vLLM series carry `model_name` and `engine` from vLLM, plus `namespace`, `pod`, `deployment`, `track`
and `num_speculative_tokens` from the scrape (the chart's PodMonitor copies the pod labels).
"""

from __future__ import annotations

from specpilot.controller import metric_names as op
from specpilot_runtime import vllm_metrics as vm

# Per deployment and track: canary and stable stay apart everywhere.
BY_TRACK = f"{op.LABEL_NAMESPACE}, {op.LABEL_DEPLOYMENT}, {op.LABEL_TRACK}"
# The Grafana template variables and the labels they narrow.
VLLM_FILTER = (f'{op.LABEL_NAMESPACE}=~"$namespace", {op.LABEL_DEPLOYMENT}=~"$deployment", '
               f'{vm.LABEL_MODEL}=~"$model", {op.LABEL_TRACK}=~"$track"')
OPERATOR_FILTER = f'{op.LABEL_NAMESPACE}=~"$namespace", {op.LABEL_DEPLOYMENT}=~"$deployment"'
TRACK_FILTER = f'{OPERATOR_FILTER}, {op.LABEL_TRACK}=~"$track"'
# Grafana picks a rate window of at least four scrape intervals.
RATE_WINDOW = "$__rate_interval"


def counter(name: str) -> str:
    """The exported name of a counter: prometheus_client and vLLM append `_total`."""
    return f"{name}_total"


# Counters also read under their deprecated names for one release (vllm_metrics.DEPRECATED_NAMES): pods still
# on the previous plugin export the old name.
_DEPRECATED = {counter(new): counter(old) for old, new in vm.DEPRECATED_NAMES.items()}


def select(metric: str, selector: str) -> str:
    if metric in _DEPRECATED:
        names = f'__name__=~"{metric}|{_DEPRECATED[metric]}"'
        return f"{{{names}, {selector}}}" if selector else f"{{{names}}}"
    return f"{metric}{{{selector}}}" if selector else metric


def rate_sum(metric: str, selector: str, by: str, window: str = RATE_WINDOW) -> str:
    return f"sum by ({by}) (rate({select(metric, selector)}[{window}]))"


def mean_accepted_length(selector: str, by: str, window: str = RATE_WINDOW) -> str:
    """Tokens per verify step, 1 + accepted / drafts (docs/references.md §2): the target's own token plus the
    accepted draft tokens."""
    accepted = rate_sum(counter(vm.SPEC_ACCEPTED_TOKENS), selector, by, window)
    drafts = rate_sum(counter(vm.SPEC_DRAFTS), selector, by, window)
    return f"1 + {accepted} / {drafts}"


def survival_by_position(selector: str, by: str, window: str = RATE_WINDOW) -> str:
    """Acceptance at each draft position k: accepted_per_pos[k-1] over the drafts that drafted position k
    (specpilot's plugin counter). vLLM's own draft count includes drafts that stopped short of k (a
    batch-size schedule drafting K < N, ngram finding fewer tokens), which would read as rejections; a pod
    without the plugin falls back to it (S_k, the share of drafts whose first k tokens were accepted).
    A position never drafted has no value rather than 0."""
    pos = f"{by}, {vm.LABEL_POSITION}"
    per_pos = rate_sum(counter(vm.SPEC_ACCEPTED_PER_POS), selector, pos, window)
    drafted = rate_sum(counter(vm.SPEC_DRAFTED_PER_POS), selector, pos, window)
    drafts = rate_sum(counter(vm.SPEC_DRAFTS), selector, by, window)
    return f"({per_pos} / {drafted}) or ({per_pos} / on ({by}) group_left {drafts})"


def drafted_by_position(selector: str, by: str, window: str = RATE_WINDOW) -> str:
    """Drafts per second that reached each position: the denominator of `survival_by_position`, with its
    fallback (every draft, where a pod has no plugin counter)."""
    pos = f"{by}, {vm.LABEL_POSITION}"
    per_pos = rate_sum(counter(vm.SPEC_ACCEPTED_PER_POS), selector, pos, window)
    drafted = rate_sum(counter(vm.SPEC_DRAFTED_PER_POS), selector, pos, window)
    drafts = rate_sum(counter(vm.SPEC_DRAFTS), selector, by, window)
    return f"{drafted} or (0 * {per_pos} + on ({by}) group_left {drafts})"


def acceptance_rate(selector: str, by: str, window: str = RATE_WINDOW) -> str:
    """Accepted draft tokens over drafted ones: the plugin's drafted tokens where a pod exports them (vLLM's
    draft_tokens counts N per draft even when a schedule drafted fewer), else vLLM's."""
    accepted = rate_sum(counter(vm.SPEC_ACCEPTED_TOKENS), selector, by, window)
    drafted = rate_sum(counter(vm.SPEC_DRAFTED_PER_POS), selector, by, window)
    draft_tokens = rate_sum(counter(vm.SPEC_DRAFT_TOKENS), selector, by, window)
    return f"({accepted} / {drafted}) or ({accepted} / {draft_tokens})"


def histogram_quantile(q: float, metric: str, selector: str, by: str, window: str = RATE_WINDOW) -> str:
    return f"histogram_quantile({q}, {rate_sum(metric + '_bucket', selector, f'{by}, le', window)})"
