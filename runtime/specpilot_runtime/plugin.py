"""vLLM stat-logger plugin: drafted tokens per position, next to vLLM's accepted-per-position counter.

vLLM exports `vllm:spec_decode_num_accepted_tokens_per_pos` but not how many drafts reached each
position. When drafts can be shorter than N (ngram finds no match, a batch-size schedule lowers N),
accepted / drafts understates acceptance at late positions; accepted / drafted does not. vLLM's
scheduler already counts drafted tokens per position in `SpecDecodingStats.num_draft_tokens_per_pos`
(vLLM 0.32) and hands those stats to every stat logger; this logger adds them up into
`vllm_metrics.SPEC_DRAFTED_PER_POS` (`specpilot:` prefix: `vllm:` is vLLM's) with the same labels vLLM
uses (model_name, engine, position).

Loaded through the `vllm.stat_logger_plugins` entry point in the API server process, only when something
is drafted: otherwise the runtime leaves it out of VLLM_PLUGINS (engine.env), since vLLM turns its stats on
whenever a stat-logger plugin is loaded. Active only when the runtime sets SPECPILOT_DRAFTED_PER_POSITION=1.

With draft length set live (live_engine.py), the engine core writes its switchback counters and the arm in
force as Prometheus text to SPECPILOT_LIVE_STATE; `LiveStateCollector`, registered here because this is the
API server process that serves /metrics, relays that file at each scrape.
This module imports vLLM, so only the serving venv may import it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping

from prometheus_client import REGISTRY, Counter
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from vllm.config import VllmConfig
from vllm.v1.metrics.loggers import AggregateStatLoggerBase
from vllm.v1.metrics.stats import IterationStats, MultiModalCacheStats, SchedulerStats
from vllm.v1.spec_decode.metrics import SpecDecodingStats

from .engine import PLUGIN_ENABLE_ENV, PLUGIN_ENTRY_POINT
from .files import FileProblem, read_bounded
from .live import LIVE_STATE_ENV
from .vllm_metrics import LABEL_ENGINE, LABEL_MODEL, LABEL_POSITION, SPEC_DRAFTED_PER_POS

_DRAFTED_FIELD = "num_draft_tokens_per_pos"
# The engine's state file: 8 arms x 17 bands x 7 counters is about 100 KiB of text.
MAX_LIVE_STATE_BYTES = 1 << 20

log = logging.getLogger(__name__)


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(PLUGIN_ENABLE_ENV) == "1"


class LiveStateCollector(Collector):
    """The engine core's live counters (live_engine.py), read from its state file at each scrape; nothing
    when the file is missing or unreadable, so /metrics keeps answering."""

    def __init__(self, path: str):
        self.path = path
        self._warned = False

    def collect(self) -> list[Metric]:
        try:
            text = read_bounded(self.path, MAX_LIVE_STATE_BYTES).decode("utf-8")
            return list(text_string_to_metric_families(text))
        except FileNotFoundError:  # the engine has not written it yet
            return []
        except (OSError, FileProblem, UnicodeDecodeError, ValueError) as e:
            if not self._warned:
                self._warned = True
                log.warning("%s: cannot relay the live state %s: %s", PLUGIN_ENTRY_POINT, self.path, e)
            return []


_live_collector: list[LiveStateCollector] = []  # registered once per process, whatever builds the logger


def register_live_collector(env: Mapping[str, str] = os.environ) -> None:
    path = env.get(LIVE_STATE_ENV)
    if path and not _live_collector:
        _live_collector.append(LiveStateCollector(path))
        REGISTRY.register(_live_collector[0])


class DraftedPerPositionLogger(AggregateStatLoggerBase):
    """Counts drafted tokens per position for every engine this API server manages."""

    def __init__(self, vllm_config: VllmConfig, engine_indexes: list[int]):
        spec = vllm_config.speculative_config
        self.positions = spec.num_speculative_tokens if spec is not None else 0
        model_name = vllm_config.model_config.served_model_name
        self.labelvalues = {idx: [model_name, str(idx)] for idx in engine_indexes}
        self.active = enabled() and self.positions > 0
        if self.active and _DRAFTED_FIELD not in {f.name for f in dataclasses.fields(SpecDecodingStats)}:
            log.warning("%s: this vLLM's SpecDecodingStats has no %s; %s is not exported",
                        PLUGIN_ENTRY_POINT, _DRAFTED_FIELD, SPEC_DRAFTED_PER_POS)
            self.active = False
        self.children: dict[int, list[Counter]] | None = None

    def _register(self) -> None:
        # Not in __init__: vLLM builds plugin loggers before its PrometheusStatLogger, whose __init__
        # unregisters every collector whose name holds "vllm" (the deprecated vllm: name did); registering
        # once the engine is up keeps the counter whatever vLLM's cleanup matches.
        counter = Counter(SPEC_DRAFTED_PER_POS, "Drafted tokens per draft position (specpilot plugin).",
                          [LABEL_MODEL, LABEL_ENGINE, LABEL_POSITION])
        self.children = {
            idx: [counter.labels(*lv, str(pos)) for pos in range(self.positions)]
            for idx, lv in self.labelvalues.items()
        }

    def log_engine_initialized(self) -> None:
        if self.active and self.children is None:
            self._register()
        # Here for the same reason as the counter: after vLLM's cleanup of the registry.
        register_live_collector()

    def record(
        self,
        scheduler_stats: SchedulerStats | None,
        iteration_stats: IterationStats | None,
        mm_cache_stats: MultiModalCacheStats | None = None,
        engine_idx: int = 0,
    ) -> None:
        if not self.active or scheduler_stats is None or scheduler_stats.spec_decoding_stats is None:
            return
        if self.children is None:
            self._register()
        assert self.children is not None
        drafted = getattr(scheduler_stats.spec_decoding_stats, _DRAFTED_FIELD)
        for child, count in zip(self.children.get(engine_idx, ()), drafted):
            child.inc(count)
