"""What the controller hands the tuner each window, and the per-window numbers the tuner keeps.

A window's counters are deltas of `specpilot_runtime.vllm_metrics.Snapshot` (the controller computes them,
detecting counter resets). From one track's deltas the tuner derives:

- tokens per verify step L = 1 + accepted / drafts (precise: it is a ratio of large counters);
- acceptance at each position: accepted there over the drafts that reached it, which only specpilot's
  drafted-per-position counter gives; without it, over every draft (exact only when every draft is N
  long: a batch-size schedule drafting K < N at some batch sizes makes late positions read low);
- step time t = TPOT x L (a sequence's time per output token is the step time over tokens per step), TPOT
  token-weighted where vLLM's decode-time and generation-token histograms give it (`slo.token_weighted_tpot`:
  L is a ratio over every step, so a 3-token answer must not weigh as much as a 3,000-token one), else the
  mean of the requests' TPOT;
- load B per engine = generation rate x TPOT / (ready pods x engines per pod) (Little's law: each
  running sequence emits 1 / TPOT tokens per second; a pod runs one engine per data-parallel rank), falling
  back to the `running` gauge when no request finished.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from specpilot_runtime.vllm_metrics import SPEC_DRAFTED_PER_POS, Snapshot

from specpilot.api.models import DEFAULT_SLO_PERCENTILE, Slo

from .constants import (COUNT_DIGITS, COUNTER_SLACK, ECHO_CHARS, LATENCY_CEILING_S, LATENCY_DIGITS, MAX_LOAD,
                        MAX_MAGNITUDE, MAX_N, MAX_STEP_S, MAX_TOKEN_RATE, MIN_STEP_S)
from .slo import percentile_s, preemptions_per_pod, share_within, token_weighted_tpot, waiting_per_pod

# Condition/Event reason for `acceptance_note`'s message.
DRAFTED_PER_POS_ABSENT = "DraftedPerPositionAbsent"


def whole_n(value: Any, what: str) -> int:
    """An N read back from a status: a whole number in 0..MAX_N, else ValueError naming `what`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_N:
        raise ValueError(f"{what} {value!r} is not a whole number in 0..{MAX_N}")
    return value


def whole(value: Any, what: str) -> int:
    """A count or sequence number read back from a status: a whole number >= 0 (not 1e400, which JSON reads
    as infinity, nor true), else ValueError naming `what`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} {value!r} is not a whole number >= 0")
    return value


def finite(value: Any, what: str, least: float = -MAX_MAGNITUDE, most: float = MAX_MAGNITUDE) -> float:
    """A number read back from a status: finite (JSON's 1e400 reads as infinity) and from `least` to
    `most`, else ValueError naming `what`."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{what} {value!r:.32} is not a number") from None
    if not (math.isfinite(x) and least <= x <= most):
        raise ValueError(f"{what} {value!r:.32} is not a finite number from {least:g} to {most:g}")
    return x


@dataclass(frozen=True)
class TrackWindow:
    """One track (stable or canary) over one window."""

    n: int  # N the track's pods run (from the specpilot.io/num-speculative-tokens label)
    delta: Snapshot  # counter deltas over the window; gauges (running, waiting) as last scraped
    ready_pods: int
    desired_pods: int
    errors: float = 0.0  # failed requests and container restarts during the window
    method: str | None = None  # the speculative method the pods run (None: not reported)
    # vLLM engines per pod (its data-parallel size): each runs its own batch, so the load a step time
    # belongs to is the pod's sequences over its engines.
    engines: int = 1
    # Why the API server refuses to create the track's pods (its Deployment's ReplicaFailure condition, e.g.
    # Pod Security admission), None while it creates them: a canary refused never becomes Ready.
    refused: str | None = None
    # A switchback arm's counters per batch-size band (live.band_of's label -> live.BAND_COUNTERS' values):
    # what schedule mode compares band by band (bands.py); empty for a track of its own pods.
    bands: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Observations:
    """Everything one `step()` call sees. `canary` is None when no canary pods exist. `stable_replicas`: the
    pods the stable track runs when no canary does (spec.replicas; None: its ready pods). A replace-mode
    canary takes its pods from the stable, so the stable's ready pods beside it are not the ones it runs
    alone."""

    window_s: float
    stable: TrackWindow | None
    canary: TrackWindow | None = None
    stable_replicas: int | None = None
    # The canary is a switchback arm in the stable's own pods (tuning/switchback.py): the two share time, not
    # traffic, so each ran the load the stable's pods carry alone.
    switchback: bool = False


@dataclass(frozen=True)
class WindowRecord:
    """The numbers the tuner keeps from one track's window (serialised into the status)."""

    seq: int  # window sequence number, shared by the stable and canary records of one window
    track: str  # "stable" | "canary"
    n: int
    drafts: float
    accepted_per_pos: tuple[float, ...]
    tokens_per_step: float
    step_s: float | None  # None when no request finished in the window
    load: float  # concurrent sequences per engine (per pod without data parallelism)
    # Drafts that reached each position (specpilot's plugin counter); None when the pods do not export it.
    drafted_per_pos: tuple[float, ...] | None = None
    # The track served a batch-size schedule under N. Statuses written before this field was kept say so only
    # through "dr", which `record` keeps for scheduled tracks alone.
    scheduled: bool = False
    # The stable's sequences per pod had the canary's pods not taken their share of the traffic (`alone`);
    # None when no canary served in the window.
    alone_load: float | None = None
    # What the SLO and queueing gates weigh (slo.py): the TTFT and TPOT percentiles (seconds) at the spec's
    # percentile, mean waiting requests and preemptions per pod; None where the pods did not measure them.
    ttft_q: float | None = None
    tpot_q: float | None = None
    waiting: float | None = None
    preempted: float | None = None
    # The share of the window's requests that met spec.tuning.slo's TTFT and TPOT (None without that SLO).
    ttft_met: float | None = None
    tpot_met: float | None = None

    @property
    def mix_load(self) -> float:
        """The load this window adds to the deployment's load mix: what the stable serves without a canary."""
        return self.load if self.alone_load is None else self.alone_load

    @property
    def draft_length(self) -> float:
        """Tokens drafted per sequence and step: N, or under a batch-size schedule the mean K its steps drafted."""
        if self.drafted_per_pos is None or self.drafts <= 0:
            return float(self.n)
        return sum(self.drafted_per_pos) / self.drafts

    def drafted_at(self, pos: int) -> float:
        """The denominator of acceptance at position `pos` (0-based): drafts that reached it, or every
        draft when the drafted-per-position counter is absent."""
        if self.drafted_per_pos is None:
            return self.drafts
        return self.drafted_per_pos[pos] if pos < len(self.drafted_per_pos) else 0.0

    def to_json(self) -> dict:
        out = {"seq": self.seq, "track": self.track, "n": self.n, "drafts": self.drafts,
               "acc": list(self.accepted_per_pos), "l": self.tokens_per_step, "t": self.step_s,
               "b": self.load}
        if self.drafted_per_pos is not None:
            out["dr"] = list(self.drafted_per_pos)
        if self.scheduled or self.drafted_per_pos is not None:
            out["s"] = self.scheduled
        if self.alone_load is not None:
            out["a"] = self.alone_load
        out.update({key: getattr(self, attr) for key, attr in _SLO_KEYS.items() if getattr(self, attr) is not None})
        return out

    @classmethod
    def from_json(cls, d: dict) -> "WindowRecord":
        """A record read back from a status: ValueError (naming the field) for what the tuner never writes."""
        # "dr" is absent from statuses written before the drafted-per-position counter was kept.
        dr = d.get("dr")
        counts = [d["acc"], [] if dr is None else dr]
        if any(not isinstance(c, list) or len(c) > MAX_N for c in counts):
            raise ValueError(f"record acc/dr is not a list of at most {MAX_N} counts")
        if d["track"] not in ("stable", "canary"):
            raise ValueError(f"record track {str(d['track'])[:ECHO_CHARS]!r} is neither 'stable' nor 'canary'")
        # What `record` writes: counts never negative (`delta` restarts them instead) and none above the drafts,
        # the load at least one sequence per pod (the judge takes its log), step times within their bounds.
        drafts = finite(d["drafts"], "record drafts", 0.0)
        # A window with no step time is written as "t": null, which kube-apiserver's JSON merge patch drops
        # inside a list (it prunes nulls from the new value): absent reads as null.
        step_s = d.get("t")
        return cls(seq=whole(d["seq"], "record seq"), track=d["track"], n=whole_n(d["n"], "record n"),
                   drafts=drafts, accepted_per_pos=tuple(finite(a, "record acc", 0.0, drafts) for a in d["acc"]),
                   tokens_per_step=finite(d["l"], "record l", 1.0, MAX_N + 1),
                   step_s=None if step_s is None else finite(step_s, "record t", MIN_STEP_S, MAX_STEP_S),
                   load=finite(d["b"], "record b", 1.0, MAX_LOAD),
                   drafted_per_pos=None if dr is None else tuple(finite(x, "record dr", 0.0, drafts) for x in dr),
                   scheduled=d["s"] is True if "s" in d else dr is not None,
                   alone_load=None if d.get("a") is None else finite(d["a"], "record a", 1.0, MAX_LOAD),
                   **{attr: None if d.get(key) is None else finite(d[key], f"record {key}", 0.0, most)
                      for key, (attr, most) in _SLO_BOUNDS.items()})


# The SLO fields' keys in a status record, and the bounds a record read back is held to (absent from statuses
# written before they were kept).
_SLO_KEYS = {"tq": "ttft_q", "pq": "tpot_q", "wq": "waiting", "pre": "preempted", "tm": "ttft_met",
             "pm": "tpot_met"}
_SLO_BOUNDS = {"tq": ("ttft_q", LATENCY_CEILING_S), "pq": ("tpot_q", LATENCY_CEILING_S),
               "tm": ("ttft_met", 1.0), "pm": ("tpot_met", 1.0),
               "wq": ("waiting", MAX_LOAD), "pre": ("preempted", MAX_MAGNITUDE)}


def has_traffic(w: TrackWindow | None) -> TypeGuard[TrackWindow]:
    """True when the track served tokens in the window (ready and not idle)."""
    return w is not None and w.ready_pods > 0 and w.delta.generation_tokens > 0


def implausible(w: TrackWindow, window_s: float) -> str | None:
    """Why a track's window cannot be an engine's counting (a broken exporter, a forged /metrics), None when
    it can. Such a window is not measured: held to the bounds `record` keeps, it would still steer the tuner
    (a load of 10^6 sequences per pod outweighs every other window of the load mix)."""
    d, pods = w.delta, max(w.ready_pods, 1)
    if not window_s > 0:
        return f"a window of {window_s:g} s"
    counts = (d.drafts, d.accepted_tokens, d.generation_tokens, d.tpot_sum, d.tpot_count, d.running,
              *d.accepted_per_pos, *(d.drafted_per_pos or ()))
    if not all(map(math.isfinite, counts)):
        return "a counter that is not finite"
    rate = max(d.generation_tokens, d.drafts) / window_s / pods
    if rate > MAX_TOKEN_RATE:
        return f"{rate:.3g} tokens or drafts a second per pod, more than any engine emits ({MAX_TOKEN_RATE:g})"
    if w.n > 0 and d.accepted_tokens > w.n * d.drafts * (1 + COUNTER_SLACK):
        return f"{d.accepted_tokens:.6g} accepted tokens from {d.drafts:.6g} drafts of at most {w.n}"
    if w.n > 0 and any(a > d.drafts * (1 + COUNTER_SLACK) for a in d.accepted_per_pos[:w.n]):
        return f"a position accepted more tokens than the {d.drafts:.6g} drafts"
    mean_tpot = d.tpot_sum / d.tpot_count if d.tpot_count > 0 else None
    for what, tpot in (("mean", mean_tpot), ("token-weighted", token_weighted_tpot(d))):
        if tpot is None:
            continue
        if not MIN_STEP_S / (MAX_N + 1) <= tpot <= MAX_STEP_S:
            return f"a {what} time per output token of {tpot:.3g} s"
        if d.generation_tokens / window_s * tpot / pods > MAX_LOAD:
            return f"more than {MAX_LOAD:g} sequences per pod (tokens a second x time per token)"
    if d.running / pods > MAX_LOAD:
        return f"{d.running / pods:.3g} running sequences per pod, more than {MAX_LOAD:g}"
    return None


def measurable(w: TrackWindow | None, window_s: float) -> TypeGuard[TrackWindow]:
    """The track served tokens in the window, and counted them as an engine can (`implausible`)."""
    return has_traffic(w) and implausible(w, window_s) is None


def record(seq: int, track: str, w: TrackWindow, window_s: float, scheduled: bool = False,
           slo: Slo | None = None) -> WindowRecord:
    """Turn one track's counter deltas into the tuner's per-window numbers; `slo`: spec.tuning.slo, whose
    percentile the latency percentiles are taken at (else the default's) and whose limits the shares of
    requests meeting them are counted against. `scheduled`: the track serves
    a batch-size schedule, so drafts shorter than N come from the schedule and each position's acceptance
    is divided by the drafts that reached it. Otherwise short drafts are the drafter's own (a suffix or
    n-gram drafter with nothing to propose): what N buys is acceptance over every draft."""
    d = w.delta
    percentile = DEFAULT_SLO_PERCENTILE if slo is None else slo.percentile
    ttft_limit, tpot_limit = (None, None) if slo is None else (slo.ttft_s, slo.tpot_s)
    n_pos = min(w.n, len(d.accepted_per_pos))
    drafts = _count(d.drafts) if w.n > 0 else 0.0
    acc = tuple(min(_count(a), drafts) for a in d.accepted_per_pos[:n_pos])
    drafted = tuple(min(_count(x), drafts) for x in d.drafted_per_pos[:n_pos]) \
        if scheduled and d.drafted_per_pos is not None and w.n else None
    tokens = 1.0 + min(max(d.accepted_tokens, 0.0) / drafts, w.n) if drafts > 0 else 1.0
    tpot = token_weighted_tpot(d)
    if tpot is None and d.tpot_count > 0:
        tpot = d.tpot_sum / d.tpot_count
    step = tpot * tokens if tpot is not None and tpot > 0 and math.isfinite(tpot * tokens) else None
    pods = max(w.ready_pods, 1) * max(w.engines, 1)  # load per engine
    if step is not None and tpot is not None and window_s > 0:
        load = d.generation_tokens / window_s * tpot / pods
    else:
        load = d.running / pods
    return WindowRecord(seq=seq, track=track, n=w.n, drafts=drafts, accepted_per_pos=acc, tokens_per_step=tokens,
                        step_s=None if step is None else min(max(step, MIN_STEP_S), MAX_STEP_S),
                        load=min(max(load, 1.0), MAX_LOAD) if math.isfinite(load) else MAX_LOAD,
                        drafted_per_pos=drafted, scheduled=scheduled,
                        ttft_q=_rounded(percentile_s(d.ttft_buckets, percentile), LATENCY_DIGITS),
                        tpot_q=_rounded(percentile_s(d.tpot_buckets, percentile), LATENCY_DIGITS),
                        waiting=_rounded(waiting_per_pod(d, window_s, w.ready_pods), COUNT_DIGITS),
                        preempted=_rounded(preemptions_per_pod(d, w.ready_pods), COUNT_DIGITS),
                        ttft_met=_rounded(share_within(d.ttft_buckets, ttft_limit), COUNT_DIGITS),
                        tpot_met=_rounded(share_within(d.tpot_buckets, tpot_limit), COUNT_DIGITS))


def _rounded(x: float | None, digits: int) -> float | None:
    """A gate's number as the status keeps it (LATENCY_DIGITS, COUNT_DIGITS)."""
    return None if x is None else round(x, digits)


def _count(x: float) -> float:
    """A window's counter delta as a record holds it: at most MAX_MAGNITUDE (`WindowRecord.from_json`)."""
    return min(max(x, 0.0), MAX_MAGNITUDE) if math.isfinite(x) else MAX_MAGNITUDE


def alone(stable: WindowRecord, stable_pods: int, canary: WindowRecord | None, canary_pods: int,
          alone_pods: int | None = None) -> WindowRecord:
    """`stable` with the load it would have carried alone, on `alone_pods` (default `stable_pods`). A Service
    spreads requests over the ready pods of both tracks, so a surge canary lowers every pod's load (with one
    stable replica, to half); a replace canary runs on pods the stable gave up, and while it starts the
    stable's remaining pods carry more. The load mix the tuner weighs is the deployment's without a canary,
    the one a promoted N will serve; the judge carries each pair from the load it saw to that one. The
    sequences both tracks ran (Little's law, per track) are the ones the stable's pods would run alone."""
    total = stable.load * max(stable_pods, 1) + (canary.load * max(canary_pods, 0) if canary else 0.0)
    if alone_pods is None:
        load = max(total / max(stable_pods, 1), stable.load)
    else:
        load = max(total / max(alone_pods, 1), 1.0)
    return dataclasses.replace(stable, alone_load=round(min(load, MAX_LOAD), 4))


def acceptance_note(records: Sequence[WindowRecord], scheduled: Collection[str]) -> str | None:
    """What the status should say when a track serving a batch-size schedule lacks the drafted-per-position
    counter in its latest window, else None. `scheduled`: the tracks ("stable", "canary") serving one.

    Without the counter, acceptance past a step's K is divided by every draft, so late positions read low
    and the tuner underrates larger N; the status says so rather than letting the numbers look exact.
    """
    latest = {r.track: r for r in records if r.n > 0}  # in window order: each track's last one wins
    blind = [t for t in ("stable", "canary")
             if t in scheduled and t in latest and latest[t].drafted_per_pos is None]
    if not blind:
        return None
    return (f"{' and '.join(blind)} pods serve a batch-size schedule but export no {SPEC_DRAFTED_PER_POS} "
            "(specpilot's vLLM stat-logger plugin is off or unsupported): acceptance at positions past a "
            "step's K is measured against every draft and reads low")
