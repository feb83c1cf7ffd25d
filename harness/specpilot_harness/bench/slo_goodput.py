"""SLO goodput: output tokens per second per pod from the requests that met every SLO (TTFT and TPOT),
measured by serving on the simulated engine (sim/engine.py) at a fixed request rate.

A request meets the SLOs when its own time to first token is at most `slo.ttft` and its own mean time per
output token after the first at most `slo.tpot` (an SLO left out holds for every request). The percentile is
the gates' business: a user is served by requests, not by a percentile.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from statistics import median

from specpilot.api.models import Slo

from specpilot_harness.sim.engine import Engine, FinishedRequest
from specpilot_harness.sim.profile import Profile

from .engine_tuning import Requests


@dataclass(frozen=True)
class Served:
    """A configuration served at one rate: SLO goodput and plain throughput (tokens per second per pod)."""

    slo_goodput: float
    throughput: float
    met_share: float  # the share of requests that met every SLO
    tpot_median: float  # seconds: what speculation wins where every N meets the SLOs


def _ttft(req: FinishedRequest) -> float:
    """The request's time to first token: its latency less the decode time after the first token."""
    decode = (req.generation_tokens - 1) * req.time_per_output_token if req.time_per_output_token else 0.0
    return req.e2e_latency - decode


def _meets(req: FinishedRequest, slo: Slo) -> bool:
    ttft_s, tpot_s = slo.ttft_s, slo.tpot_s
    if ttft_s is not None and _ttft(req) > ttft_s:
        return False
    return tpot_s is None or req.time_per_output_token is None or req.time_per_output_token <= tpot_s


def serve(profile: Profile, n: int, requests: Requests, slo: Slo, seconds: float, seed: int) -> Served:
    """Requests arriving for `seconds`, served to the last; tokens count over the seconds they arrived in,
    so a configuration that falls behind shows it in the requests that miss the SLOs, not in a longer run."""
    engine = Engine(profile, n, random.Random(seed))
    total = int(seconds * requests.rate)
    arrivals = (i / requests.rate for i in range(total))
    nxt = next(arrivals, None)
    done: list[FinishedRequest] = []
    i = 0
    while nxt is not None or engine.busy:
        while nxt is not None and nxt <= engine.clock:
            engine.submit(f"r{i}", requests.prompt_tokens, requests.output_tokens)
            i, nxt = i + 1, next(arrivals, None)
        if not engine.busy:
            assert nxt is not None
            engine.catch_up(nxt)
            continue
        done += engine.step().finished
    good = [r for r in done if _meets(r, slo)]
    tpots = [r.time_per_output_token for r in done if r.time_per_output_token is not None]
    return Served(sum(r.generation_tokens for r in good) / seconds,
                  sum(r.generation_tokens for r in done) / seconds, len(good) / max(len(done), 1),
                  median(tpots) if tpots else 0.0)
