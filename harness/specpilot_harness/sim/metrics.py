"""The simulated engine's /metrics: vLLM's own families for speculative decoding and serving.

Names come from `vllm_metrics`; types, label names, HELP text and histogram buckets follow vLLM's
Prometheus stat logger, so the operator, dashboards and alerts cannot tell a simulated pod from a real
one. `tests/unit/test_sim_conformance.py` holds this against a real vLLM scrape. Like vLLM, the
speculative-decoding counters exist only when speculation is on (N >= 1), and every counter and
histogram carries prometheus_client's `_created` gauge. specpilot's drafted-per-position plugin counter
is exported too unless turned off, as on a real specpilot pod.

Latencies are reported in wall-clock seconds, as a real engine's are: with the clock running
`time_scale` times faster than wall time, engine seconds are divided by it. Rates read off the counters
then agree with the latencies, so the operator needs to know nothing about simulation.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specpilot_runtime import vllm_metrics as vm
from .engine import StepOutcome

# vLLM's bucket boundaries for these histograms (checked against a real 0.32 scrape).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                         7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

ENGINE_INDEX = "0"  # one engine core per simulated server, as vLLM without data parallelism


class SimMetrics:
    """One engine's metric families in a private registry (several engines can share a process)."""

    def __init__(self, model_name: str, num_speculative_tokens: int, drafted_per_position: bool = True,
                 time_scale: float = 1.0) -> None:
        self.registry = CollectorRegistry()
        self.wall = 1.0 / time_scale  # wall seconds per engine second
        labels = [vm.LABEL_MODEL, vm.LABEL_ENGINE]
        values = (model_name, ENGINE_INDEX)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=self.registry).labels(*values)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry).labels(*values)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=self.registry).labels(*values)

        self.running = gauge(vm.RUNNING, "Number of requests in model execution batches.")
        self.waiting = gauge(vm.WAITING, "Number of requests waiting to be processed.")
        self.kv_cache_usage = gauge(vm.KV_CACHE_USAGE, "KV-cache usage. 1 means 100 percent usage.")
        self.preemptions = counter(vm.PREEMPTIONS, "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter(vm.PROMPT_TOKENS, "Number of prefill tokens processed.")
        self.generation_tokens = counter(vm.GENERATION_TOKENS, "Number of generation tokens processed.")
        self.iteration_tokens = histogram(vm.ITERATION_TOKENS, "Histogram of number of tokens per engine_step.",
                                          ITERATION_TOKEN_BUCKETS)
        self.ttft = histogram(vm.TTFT, "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.inter_token_latency = histogram(vm.INTER_TOKEN_LATENCY, "Histogram of inter-token latency in seconds.",
                                             TOKEN_LATENCY_BUCKETS)
        self.tpot = histogram(vm.TPOT, "Histogram of time_per_output_token_seconds per request.",
                              TOKEN_LATENCY_BUCKETS)
        self.e2e_latency = histogram(vm.E2E_LATENCY, "Histogram of e2e request latency in seconds.",
                                     REQUEST_LATENCY_BUCKETS)

        self.spec_enabled = num_speculative_tokens > 0
        if self.spec_enabled:
            self.drafts = counter(vm.SPEC_DRAFTS, "Number of spec decoding drafts.")
            self.draft_tokens = counter(vm.SPEC_DRAFT_TOKENS, "Number of draft tokens.")
            self.accepted_tokens = counter(vm.SPEC_ACCEPTED_TOKENS, "Number of accepted tokens.")
            per_pos = Counter(vm.SPEC_ACCEPTED_PER_POS, "Accepted tokens per draft position.",
                              [*labels, vm.LABEL_POSITION], registry=self.registry)
            # Every position exists from the start (value 0), as in vLLM.
            self.accepted_per_pos = [per_pos.labels(*values, str(k)) for k in range(num_speculative_tokens)]
        # specpilot's stat-logger plugin (plugin.py) adds this next to vLLM's counters; serving pods
        # have it unless their EngineConfig turns it off, so simulated pods do too.
        self.drafted_per_pos: list[Counter] = []
        if self.spec_enabled and drafted_per_position:
            drafted = Counter(vm.SPEC_DRAFTED_PER_POS, "Drafted tokens per draft position (specpilot plugin).",
                              [*labels, vm.LABEL_POSITION], registry=self.registry)
            self.drafted_per_pos = [drafted.labels(*values, str(k)) for k in range(num_speculative_tokens)]

    def set_queue(self, running: int, waiting: int) -> None:
        self.running.set(running)
        self.waiting.set(waiting)

    def record(self, step: StepOutcome) -> None:
        """Fold one engine step into the counters, histograms and the KV gauge (the queue gauges follow
        the engine's live state through `set_queue`)."""
        self.kv_cache_usage.set(step.kv_cache_usage)
        self.prompt_tokens.inc(step.prompt_tokens)
        self.generation_tokens.inc(step.generation_tokens)
        self.preemptions.inc(step.preemptions)
        self.iteration_tokens.observe(step.prompt_tokens + step.generation_tokens)
        for t in step.time_to_first_token:
            self.ttft.observe(t * self.wall)
        for t in step.inter_token_latency:
            self.inter_token_latency.observe(t * self.wall)
        for req in step.finished:
            self.e2e_latency.observe(req.e2e_latency * self.wall)
            if req.time_per_output_token is not None:
                self.tpot.observe(req.time_per_output_token * self.wall)
        if self.spec_enabled and step.drafts:
            self.drafts.inc(step.drafts)
            self.draft_tokens.inc(step.draft_tokens)
            self.accepted_tokens.inc(step.accepted_tokens)
            for counter, count in zip(self.accepted_per_pos, step.accepted_per_pos):
                counter.inc(count)
            # Only positions below the step's K were drafted (a batch-size schedule can cut K below N).
            for counter, count in zip(self.drafted_per_pos, step.drafted_per_pos):
                counter.inc(count)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
