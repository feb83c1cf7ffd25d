"""vLLM stat-logger plugin: drafted tokens per position, next to vLLM's accepted-per-position counter.

vLLM exports `vllm:spec_decode_num_accepted_tokens_per_pos` but not how many drafts reached each
position. When drafts can be shorter than N (ngram finds no match, a batch-size schedule lowers N),
accepted / drafts understates acceptance at late positions; accepted / drafted does not. vLLM's
scheduler already counts drafted tokens per position in `SpecDecodingStats.num_draft_tokens_per_pos`
(vLLM 0.32) and hands those stats to every stat logger; this logger adds them up into
`vllm_metrics.SPEC_DRAFTED_PER_POS` with the same labels vLLM uses (model_name, engine, position).

Loaded through the `vllm.stat_logger_plugins` entry point in the API server process, and active only
when the runtime sets SPECPILOT_DRAFTED_PER_POSITION=1 (serve.py does unless the EngineConfig turns
it off). This module imports vLLM, so only the serving venv may import it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping

from prometheus_client import Counter
from vllm.config import VllmConfig
from vllm.v1.metrics.loggers import AggregateStatLoggerBase
from vllm.v1.metrics.stats import IterationStats, MultiModalCacheStats, SchedulerStats
from vllm.v1.spec_decode.metrics import SpecDecodingStats

from .engine import PLUGIN_ENABLE_ENV, PLUGIN_ENTRY_POINT
from .vllm_metrics import LABEL_ENGINE, LABEL_MODEL, LABEL_POSITION, SPEC_DRAFTED_PER_POS

_DRAFTED_FIELD = "num_draft_tokens_per_pos"

log = logging.getLogger(__name__)


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(PLUGIN_ENABLE_ENV) == "1"


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
        # unregisters every collector named `vllm:*` from the global registry.
        counter = Counter(SPEC_DRAFTED_PER_POS, "Drafted tokens per draft position (specpilot plugin).",
                          [LABEL_MODEL, LABEL_ENGINE, LABEL_POSITION])
        self.children = {
            idx: [counter.labels(*lv, str(pos)) for pos in range(self.positions)]
            for idx, lv in self.labelvalues.items()
        }

    def log_engine_initialized(self) -> None:
        if self.active and self.children is None:
            self._register()

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
