"""The vLLM metric surface specpilot reads: names, the typed snapshot, and deltas.

Metric names live here only; the simulated engine, the scraper, the dashboards and the alerts use them.
`parse` turns one /metrics exposition into a `Snapshot`; `delta` turns two into the counts of a window;
`survival`, `mean_acceptance_length`, `acceptance_rate`, `position_acceptance` and `tpot_mean` read
the quantities of docs/references.md §3 off either.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .live import BAND_COUNTERS, LABEL_ARM, LABEL_BAND, Arm, band_range

# Speculative-decoding counters (vLLM exports `<name>_total`; the bare spelling is accepted too).
SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
# Added by specpilot's stat-logger plugin (vLLM does not export drafted tokens per position), under specpilot's
# own prefix: `vllm:` is vLLM's namespace.
SPEC_DRAFTED_PER_POS = "specpilot:spec_decode_num_drafted_tokens_per_pos"
# Deprecated names -> their new names: what plugins of specpilot 0.x before the rename export, and what users
# may have in queries. Read (parse, the dashboards' and alerts' PromQL) for one release, then removed.
DEPRECATED_NAMES: dict[str, str] = {"vllm:spec_decode_num_drafted_tokens_per_pos": SPEC_DRAFTED_PER_POS}
# The prefixes of the samples `parse` reads.
PREFIXES = ("vllm:", "specpilot:")

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
# Per-request histograms whose _sum and _count the SLO gates read: seconds queued before scheduling, seconds
# from the first token to the last, and tokens generated.
QUEUE_TIME = "vllm:request_queue_time_seconds"
DECODE_TIME = "vllm:request_decode_time_seconds"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"

LABEL_MODEL = "model_name"
LABEL_ENGINE = "engine"
LABEL_POSITION = "position"
# Positions an exposition's per-position counters may have: N never reaches it (a draft block holds at most
# 64 tokens). A pod is not trusted with more: its position "1000000000" sized a vector at 8 GB.
MAX_POSITIONS = 64
# (arm, band) series a scrape may hold: live.MAX_REMEMBERED_ARMS arms x 17 bands.
MAX_SWITCHBACK_SERIES = 8 * 17
# Bucket bounds a latency histogram (e2e, TTFT, TPOT) may have: vLLM's have 22 or fewer; a pod is not trusted
# with more.
MAX_LATENCY_BUCKETS = 64
LABEL_LE = "le"


@dataclass(frozen=True)
class Snapshot:
    """One scrape of one pod, summed over engines. Counters are cumulative since the pod started.

    A `delta` is a Snapshot too: its counters count the window, its gauges are the later scrape's.
    """

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
    # Every other unlabelled vllm: or specpilot: sample (besides model_name and engine), summed over engines and keyed
    # by its name without `_total`; as scraped, never differenced (it mixes counters and gauges).
    extra: dict[str, float] = field(default_factory=dict)
    prompt_tokens: float = 0.0
    preemptions: float = 0.0
    kv_cache_usage: float = 0.0
    # On a delta: the counters restarted inside the window (pod restart), so it counts only from then.
    reset: bool = False
    # The engine's switchback counters (live.py): (arm, band) -> live.BAND_COUNTERS' values, in that order.
    switchback: dict[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)
    # vLLM's e2e request latency histogram, cumulative since the pod started: (le, count) sorted by le (+Inf
    # last), summed over engines; as scraped, never differenced (the operator's drain reads it: api/drain.py).
    e2e_latency_buckets: tuple[tuple[float, float], ...] = ()
    # vLLM's time-to-first-token and time-per-output-token histograms, (le, count) sorted by le as above; counters
    # like the others: a delta holds the window's counts.
    ttft_buckets: tuple[tuple[float, float], ...] = ()
    tpot_buckets: tuple[tuple[float, float], ...] = ()
    # Sums and counts of the per-request histograms (QUEUE_TIME, DECODE_TIME, REQUEST_GENERATION_TOKENS).
    queue_time_sum: float = 0.0
    queue_time_count: float = 0.0
    decode_time_sum: float = 0.0
    request_tokens_sum: float = 0.0
    request_tokens_count: float = 0.0


# Snapshot fields that are plain counters, by metric name.
_COUNTER_FIELDS: dict[str, str] = {
    SPEC_DRAFTS: "drafts",
    SPEC_DRAFT_TOKENS: "draft_tokens",
    SPEC_ACCEPTED_TOKENS: "accepted_tokens",
    GENERATION_TOKENS: "generation_tokens",
    PROMPT_TOKENS: "prompt_tokens",
    PREEMPTIONS: "preemptions",
    TPOT + "_sum": "tpot_sum",
    TPOT + "_count": "tpot_count",
    QUEUE_TIME + "_sum": "queue_time_sum",
    QUEUE_TIME + "_count": "queue_time_count",
    DECODE_TIME + "_sum": "decode_time_sum",
    REQUEST_GENERATION_TOKENS + "_sum": "request_tokens_sum",
    REQUEST_GENERATION_TOKENS + "_count": "request_tokens_count",
}
_GAUGE_FIELDS: dict[str, str] = {
    RUNNING: "running",
    WAITING: "waiting",
    KV_CACHE_USAGE: "kv_cache_usage",
}
_PER_POS_FIELDS: dict[str, str] = {
    SPEC_ACCEPTED_PER_POS: "accepted_per_pos",
    SPEC_DRAFTED_PER_POS: "drafted_per_pos",
}
_SUMMED_LABELS = frozenset({LABEL_MODEL, LABEL_ENGINE})


class NonFiniteSample(ValueError):
    """A vllm: sample is NaN or infinite: the exposition cannot be measured."""


def _base_name(sample_name: str) -> str:
    """Counters are exported as `<name>_total`; older exporters and recording rules use the bare name."""
    return sample_name.removesuffix("_total")


def _position(label: str) -> int:
    """A per-position counter's position label: a whole number below MAX_POSITIONS, else ValueError."""
    if not (label.isascii() and label.isdigit()) or int(label) >= MAX_POSITIONS:
        raise ValueError(f"position label {label[:16]!r} is not a whole number below {MAX_POSITIONS}")
    return int(label)


def _vector(by_pos: dict[int, float]) -> tuple[float, ...]:
    return tuple(by_pos.get(i, 0.0) for i in range(max(by_pos) + 1)) if by_pos else ()


def _read_lines(text: str) -> str:
    """The lines `parse` can use: vllm: and specpilot: families without vLLM's histogram buckets, but the
    latency histograms' (_BUCKETED: about 20 lines each per engine).
    Buckets are nearly half of vLLM's exposition and the other families most of the rest: parsing only
    these is three times faster (the scrape parse was a quarter of the operator's CPU with a hundred
    tuned objects). `_created` timestamps, a third of the rest, are left out too (`parse` ignores them). Text
    with no such line is parsed whole, so that what is not an exposition still fails."""
    kept = [line for line in text.splitlines()
            if any(p in line for p in PREFIXES) and "_created{" not in line and "_created " not in line
            and not (line.startswith("vllm:") and "_bucket{" in line and not line.startswith(_BUCKETED_LINES))]
    return "\n".join(kept) + "\n" if kept else text


def parse(text: str, scrape_time: float = 0.0) -> Snapshot:
    """One /metrics exposition (Prometheus text format) -> Snapshot, summed over `engine`.

    A deprecated name (DEPRECATED_NAMES) is read as its new one. `_created` samples are ignored: they are timestamps, not counts. Raises ValueError on text that is
    not an exposition, and NonFiniteSample when a vllm: sample is NaN or infinite (no count can be).
    """
    scalars: dict[str, float] = defaultdict(float)
    per_pos: dict[str, dict[int, float]] = {name: defaultdict(float) for name in (*_PER_POS_FIELDS, *DEPRECATED_NAMES)}
    seen_per_pos: set[str] = set()
    switchback: dict[tuple[str, str], list[float]] = {}
    buckets: dict[str, dict[float, float]] = {name: defaultdict(float) for name in _BUCKETED}
    for family in text_string_to_metric_families(_read_lines(text)):
        for sample in family.samples:
            if sample.name.endswith("_created") or not sample.name.startswith(PREFIXES):
                continue
            if not math.isfinite(sample.value):
                raise NonFiniteSample(f"{sample.name}{sample.labels or ''} is {sample.value}")
            name = _base_name(sample.name)
            if name in buckets:
                if LABEL_LE in sample.labels and set(sample.labels) <= _SUMMED_LABELS | {LABEL_LE}:
                    _add_bucket(buckets[name], name, sample.labels[LABEL_LE], sample.value)
            elif name in _SWITCHBACK_INDEX and {LABEL_ARM, LABEL_BAND} <= set(sample.labels):
                _add_switchback(switchback, name, sample.labels, sample.value)
            elif name in per_pos and LABEL_POSITION in sample.labels:
                per_pos[name][_position(sample.labels[LABEL_POSITION])] += sample.value
                seen_per_pos.add(name)
            elif set(sample.labels) <= _SUMMED_LABELS:
                scalars[name] += sample.value
    # Finite samples can sum to infinity over engines (two of 1e308), and a window of two infinite scrapes
    # would count NaN.
    overflowed = [name for name, v in scalars.items() if not math.isfinite(v)]
    overflowed += [name for name, v in per_pos.items() if not all(map(math.isfinite, v.values()))]
    overflowed += [name for name, v in buckets.items() if not all(map(math.isfinite, v.values()))]
    if overflowed:
        raise NonFiniteSample(f"{overflowed[0]} sums to infinity over engines")
    for old, new in DEPRECATED_NAMES.items():
        # A pod runs one plugin, so one spelling; were both there, the new one is the plugin's own count.
        if old in seen_per_pos and new not in seen_per_pos:
            per_pos[new], seen_per_pos = per_pos[old], seen_per_pos | {new}
    known = _COUNTER_FIELDS | _GAUGE_FIELDS
    values: dict[str, Any] = {attr: scalars.get(name, 0.0) for name, attr in known.items()}
    values.update({attr: tuple(sorted(buckets[name].items())) for name, attr in _BUCKETED.items()})
    return Snapshot(
        **values,
        accepted_per_pos=_vector(per_pos[SPEC_ACCEPTED_PER_POS]),
        drafted_per_pos=_vector(per_pos[SPEC_DRAFTED_PER_POS]) if SPEC_DRAFTED_PER_POS in seen_per_pos else None,
        scrape_time=scrape_time,
        extra={k: v for k, v in scalars.items() if k not in known},
        switchback={k: tuple(v) for k, v in switchback.items()},
    )


# The histograms whose buckets `parse` keeps, by bucket sample name -> Snapshot field.
_BUCKETED: dict[str, str] = {E2E_LATENCY + "_bucket": "e2e_latency_buckets", TTFT + "_bucket": "ttft_buckets",
                             TPOT + "_bucket": "tpot_buckets"}
_BUCKETED_LINES = tuple(name + "{" for name in _BUCKETED)
# The bucket fields that are counted per window (`delta`); the e2e histogram is read as scraped.
_WINDOW_BUCKETS = ("ttft_buckets", "tpot_buckets")


def _add_bucket(into: dict[float, float], name: str, le: str, count: float) -> None:
    """One bucket sample, its bound checked: a number (+Inf included), at most MAX_LATENCY_BUCKETS."""
    try:
        bound = float(le[:32])
    except ValueError:
        raise ValueError(f"{name} bucket bound {le[:16]!r} is not a number") from None
    if math.isnan(bound):
        raise ValueError(f"{name} bucket bound is NaN")
    if bound not in into and len(into) >= MAX_LATENCY_BUCKETS:
        raise ValueError(f"{name} has more than {MAX_LATENCY_BUCKETS} buckets")
    into[bound] += count


_SWITCHBACK_INDEX = {name: i for i, name in enumerate(BAND_COUNTERS)}


def _add_switchback(into: dict[tuple[str, str], list[float]], name: str, labels: dict[str, str], value: float) -> None:
    """One switchback sample, its labels checked (an engine's labels are as hostile as any value)."""
    arm, band = labels[LABEL_ARM], labels[LABEL_BAND]
    Arm.from_key(arm)
    band_range(band)
    key = (arm, band)
    if key not in into and len(into) >= MAX_SWITCHBACK_SERIES:
        raise ValueError(f"more than {MAX_SWITCHBACK_SERIES} switchback series")
    into.setdefault(key, [0.0] * len(BAND_COUNTERS))[_SWITCHBACK_INDEX[name]] += value


def _restarted(prev: Snapshot, cur: Snapshot) -> bool:
    """A counter went down, or the position vector changed length (N changes only with a restart)."""
    if any(getattr(cur, attr) < getattr(prev, attr) for attr in _COUNTER_FIELDS.values()):
        return True
    for attr in _PER_POS_FIELDS.values():
        a, b = getattr(prev, attr) or (), getattr(cur, attr) or ()
        if a and len(a) != len(b) or any(y < x for x, y in zip(a, b)):
            return True
    # A bucket that went down restarted, and so did a histogram whose bounds changed (a new vLLM is a new pod).
    for attr in _WINDOW_BUCKETS:
        a, b = getattr(prev, attr), getattr(cur, attr)
        if a and ([le for le, _ in a] != [le for le, _ in b] or any(y < x for (_, x), (_, y) in zip(a, b))):
            return True
    # A series that went down restarted; one that vanished was forgotten by the engine (live.MAX_REMEMBERED_ARMS).
    return any(y < x for key, b in cur.switchback.items() for x, y in zip(prev.switchback.get(key, ()), b))


def delta(prev: Snapshot, cur: Snapshot) -> Snapshot:
    """The counts between two scrapes of one pod; gauges, scrape time and `extra` are `cur`'s.

    When the pod restarted in between (any counter went down), every counter restarted from zero, so
    `cur`'s values are the window's counts: the tokens served before the restart are lost, never
    negative. The result then has `reset=True`.
    """
    if _restarted(prev, cur):
        return replace(cur, reset=True)
    counts: dict[str, Any] = {attr: getattr(cur, attr) - getattr(prev, attr) for attr in _COUNTER_FIELDS.values()}
    vectors: dict[str, Any] = {}
    for attr in _PER_POS_FIELDS.values():
        a, b = getattr(prev, attr), getattr(cur, attr)
        # A vector that appears (plugin turned on, speculation started counting) counts from zero.
        vectors[attr] = None if b is None else tuple(y - x for x, y in zip(a or (0.0,) * len(b), b))
    switchback = {key: tuple(y - x for x, y in zip(prev.switchback.get(key, (0.0,) * len(b)), b))
                  for key, b in cur.switchback.items()}
    histograms: dict[str, Any] = {attr: _bucket_delta(getattr(prev, attr), getattr(cur, attr)) for attr in _WINDOW_BUCKETS}
    return replace(cur, **counts, **vectors, **histograms, switchback=switchback, reset=False)


def _bucket_delta(prev: tuple[tuple[float, float], ...],
                  cur: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    """A histogram's window counts; one that appears counts from zero (`_restarted` saw the bounds agree)."""
    if not prev:
        return cur
    return tuple((le, y - x) for (le, x), (_, y) in zip(prev, cur))


def survival(snap: Snapshot) -> tuple[float, ...]:
    """S_k = P(the first k draft tokens were all accepted), k = 1..N; empty without drafts."""
    if snap.drafts <= 0:
        return ()
    return tuple(a / snap.drafts for a in snap.accepted_per_pos)


def mean_acceptance_length(snap: Snapshot) -> float | None:
    """Tokens per verify step, bonus token included: 1 + accepted / drafts. None without drafts."""
    if snap.drafts <= 0:
        return None
    return 1.0 + snap.accepted_tokens / snap.drafts


def acceptance_rate(snap: Snapshot) -> float | None:
    """Share of drafted tokens that were accepted. None when nothing was drafted."""
    if snap.draft_tokens <= 0:
        return None
    return snap.accepted_tokens / snap.draft_tokens


def position_acceptance(snap: Snapshot) -> tuple[float | None, ...] | None:
    """Accepted / drafted at each position: unlike survival, right when drafts can be shorter than N
    (ngram, batch-size schedules). None without the plugin's counter; None at a position never drafted.
    """
    if snap.drafted_per_pos is None:
        return None
    return tuple(a / d if d > 0 else None for a, d in zip(snap.accepted_per_pos, snap.drafted_per_pos))


def tpot_mean(snap: Snapshot) -> float | None:
    """Mean time per output token (seconds) of the requests finished in the window."""
    if snap.tpot_count <= 0:
        return None
    return snap.tpot_sum / snap.tpot_count
