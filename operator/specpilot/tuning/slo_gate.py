"""The SLO and queueing gates (pure): what users pay for besides decode speed, measured on the canary against
the stable in the windows the judge pairs.

A canary that decodes faster can still serve worse: a draft model's weights and KV take the target's KV
blocks, so at high load it queues and preempts, and its time to first token grows while its time per output
token looks fine. The gates, each over the paired windows that measured it, on the medians (one slow window
is not a verdict):
- an SLO of spec.tuning.slo (TTFT, TPOT at its percentile): broken when the canary's median percentile is
  above the SLO by SLO_TOLERANCE while the stable's median meets it (where the stable breaks it too, the
  SLO does not tell the two apart: the goodput judge does);
- where the stable breaks an SLO too, the share of requests that meet it: broken when the canary's median
  share is below the SLO's percentile and below the stable's by more than ATTAINMENT_DROP (a faster decode that leaves more requests out of
  the SLO is no gain to those users);
- queueing, with or without SLOs: the canary's median waiting requests per pod above QUEUE_RATIO times the
  stable's plus QUEUE_SLACK;
- preemptions, likewise (PREEMPT_RATIO, PREEMPT_SLACK).
A gate broken over at least MIN_WINDOWS paired windows (the fewest the judge rules on) is proven: the canary
is rolled back whatever its goodput. Over fewer it is suspected: a promotion waits for the windows that
prove or clear it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import median

from specpilot.api.models import Slo

from .constants import (ATTAINMENT_DROP, LATENCY_CEILING_S, MIN_WINDOWS, PREEMPT_RATIO, PREEMPT_SLACK, QUEUE_RATIO,
                        QUEUE_SLACK, SLO_TOLERANCE)
from .observations import WindowRecord

Pairs = Sequence[tuple[WindowRecord, WindowRecord]]


@dataclass(frozen=True)
class Breach:
    """A gate the canary breaks: which, the medians measured, over how many paired windows, and whether that
    is enough windows to roll it back."""

    gate: str  # "ttft-slo", "tpot-slo", "ttft-attainment", "tpot-attainment", "queueing", "preemptions"
    canary: float
    stable: float
    windows: int
    proven: bool
    reason: str

    def to_json(self) -> dict:
        return {"gate": self.gate, "canary": round(self.canary, 6), "stable": round(self.stable, 6),
                "windows": self.windows, "proven": self.proven}


def _medians(pairs: Pairs, field: Callable[[WindowRecord], float | None]) -> tuple[float, float, int] | None:
    """The stable's and the canary's medians of `field` over the pairs where both tracks measured it."""
    both = [(s_v, c_v) for s, c in pairs if (s_v := field(s)) is not None and (c_v := field(c)) is not None]
    if not both:
        return None
    return median(s for s, _ in both), median(c for _, c in both), len(both)


def _seconds(x: float) -> str:
    return "above the histogram's largest bucket" if x >= LATENCY_CEILING_S else f"{x:.3g} s"


def _latency(pairs: Pairs, gate: str, label: str, field: Callable[[WindowRecord], float | None],
             slo_s: float | None, percentile: float) -> Breach | None:
    got = _medians(pairs, field)
    if slo_s is None or got is None:
        return None
    stable, canary, n = got
    if not (canary > slo_s * (1.0 + SLO_TOLERANCE) and stable <= slo_s):
        return None
    return Breach(gate, canary, stable, n, n >= MIN_WINDOWS,
                  f"canary {label} p{percentile * 100:g} {_seconds(canary)} breaks the SLO {_seconds(slo_s)} "
                  f"(stable {_seconds(stable)}; medians of {n} paired windows)")


def _attainment(pairs: Pairs, gate: str, label: str, field: Callable[[WindowRecord], float | None],
                slo_s: float | None, percentile: float) -> Breach | None:
    got = _medians(pairs, field)
    if slo_s is None or got is None:
        return None
    stable, canary, n = got
    if not (canary < percentile and canary < stable - ATTAINMENT_DROP):  # a canary meeting the SLO passes
        return None
    return Breach(gate, canary, stable, n, n >= MIN_WINDOWS,
                  f"canary meets the {label} SLO {_seconds(slo_s)} for {canary:.0%} of requests, the stable for "
                  f"{stable:.0%} (medians of {n} paired windows)")


def _more(pairs: Pairs, gate: str, what: str, field: Callable[[WindowRecord], float | None], ratio: float,
          slack: float) -> Breach | None:
    got = _medians(pairs, field)
    if got is None:
        return None
    stable, canary, n = got
    if not canary > ratio * stable + slack:
        return None
    return Breach(gate, canary, stable, n, n >= MIN_WINDOWS,
                  f"canary {what} {canary:.3g} per pod, the stable {stable:.3g} (more than {ratio:g}x + "
                  f"{slack:g}; medians of {n} paired windows)")


def breaches(pairs: Pairs, slo: Slo | None) -> list[Breach]:
    """Every gate the canary breaks in `pairs` (stable, canary), SLOs first, proven or not."""
    percentile = slo.percentile if slo is not None else 0.0
    found = [
        _latency(pairs, "ttft-slo", "TTFT", lambda r: r.ttft_q, slo.ttft_s if slo else None, percentile),
        _latency(pairs, "tpot-slo", "TPOT", lambda r: r.tpot_q, slo.tpot_s if slo else None, percentile),
        _attainment(pairs, "ttft-attainment", "TTFT", lambda r: r.ttft_met, slo.ttft_s if slo else None, percentile),
        _attainment(pairs, "tpot-attainment", "TPOT", lambda r: r.tpot_met, slo.tpot_s if slo else None, percentile),
        _more(pairs, "queueing", "queues: waiting requests", lambda r: r.waiting, QUEUE_RATIO, QUEUE_SLACK),
        _more(pairs, "preemptions", "preempts: requests preempted a window", lambda r: r.preempted, PREEMPT_RATIO,
              PREEMPT_SLACK),
    ]
    return [b for b in found if b is not None]


def proven_breach(pairs: Pairs, slo: Slo | None) -> Breach | None:
    """The first gate the canary is proven to break (roll it back), None when none is."""
    return next((b for b in breaches(pairs, slo) if b.proven), None)


def suspected_breach(pairs: Pairs, slo: Slo | None) -> Breach | None:
    """The first gate the canary breaks over too few windows to roll it back (do not promote it yet)."""
    return next((b for b in breaches(pairs, slo) if not b.proven), None)
