"""The vLLM metric surface specpilot reads: names, the typed snapshot, and deltas.

Metric names live here only; the simulated engine, the scraper, the dashboards and the alerts use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Speculative-decoding counters (vLLM exports `<name>_total`; the bare spelling is accepted too).
SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
# Added by specpilot's stat-logger plugin (vLLM does not export drafted tokens per position).
SPEC_DRAFTED_PER_POS = "vllm:spec_decode_num_drafted_tokens_per_pos"

# Serving metrics.
GENERATION_TOKENS = "vllm:generation_tokens"
PROMPT_TOKENS = "vllm:prompt_tokens"
TPOT = "vllm:request_time_per_output_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
TTFT = "vllm:time_to_first_token_seconds"
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
ITERATION_TOKENS = "vllm:iteration_tokens_total"
PREEMPTIONS = "vllm:num_preemptions"

LABEL_MODEL = "model_name"
LABEL_ENGINE = "engine"
LABEL_POSITION = "position"


@dataclass(frozen=True)
class Snapshot:
    """One scrape of one pod, summed over engines. Counters are cumulative since the pod started."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_pos: tuple[float, ...] = ()
    drafted_per_pos: tuple[float, ...] | None = None  # None when the plugin is not installed
    generation_tokens: float = 0.0
    tpot_sum: float = 0.0
    tpot_count: float = 0.0
    running: float = 0.0
    waiting: float = 0.0
    scrape_time: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
