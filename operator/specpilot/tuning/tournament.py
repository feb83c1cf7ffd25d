"""The method tournament: which way to speculate (method and draft), as well as N.

    contenders = tournament_state.contenders_of(spec)
    tour = tournament_state.Tournament.from_status(status.get("tournament"), contenders)
    inner = TunerState.from_status(status.get("tuning"), method=contenders[tour.stable].method, ...)
    tour, inner, action = tournament.step(tour, inner, spec.tuning, contenders, obs, now)

Contenders are spec.speculative (index 0) and spec.tuning.alternatives (1, 2, ...): ways to speculate for
the same target, each with its own N. The stable track runs one of them and the N tuner (`machine.step`)
tunes its N as ever. Nothing transfers between methods: an untried contender's goodput against the stable
is unknown, 0 +- METHOD_PRIOR_SD, so a canary of it is worth its expected promotable gain; against a canary's cost
(the canary's share of traffic while another checkpoint loads and while it is analysed) that is worth it
unless canaries are very dear, so each contender is tried once, at its own N, before the stable's N is
tuned (the method moves goodput by tens of percent in the source article, a step of N by a few). The paired
judge (`judge.py`) decides on the canary's measured goodput, as for any N; a promotion makes the contender
the stable's method and starts tuning its N from what its canary measured.

A contender that lost keeps what its canary measured: goodput against the stable of the time, mean accepted
length, and, from its acceptance at that N (the same transfer rules as the N tuner) and the step-time prior
of its drafter family, the N it would do best at and the goodput expected there, with its uncertainty.
Once the stable's N is tuned (converged), a contender with an N expected to beat the stable by the margin,
or with a fair chance to, gets one more canary, at the N whose value net of cost is highest: the model
chooses which canary to try, never whether it won.

Goodputs are kept relative to the configuration the tournament started from (`scale`: the stable's, moved
by each promotion's measured gain), so measurements against different stables compare.
"""

from __future__ import annotations

from typing import Any, Sequence

from specpilot.api.models import Tuning
from specpilot_runtime.speculative import DEFAULT_NGRAM_DRAFTER

from .actions import Action
from .method_estimates import accepted_length
from .observations import Observations
from .rules import first
from .rules.tournament import STAGE_RULES, TournamentWindow
from .state import TunerState
from .tournament_state import Contender, Tournament


def step(tour: Tournament, inner: TunerState, tuning: Tuning, contenders: Sequence[Contender],
         obs: Observations, now: float) -> tuple[Tournament, TunerState, Action]:
    """Advance by one window: the first of `rules.tournament.STAGE_RULES` that decides. Pure: returns new
    tournament and N-tuner states and the controller's action."""
    x = TournamentWindow(tour.copy(), inner, tuning, contenders, obs, now)
    st, action = first(STAGE_RULES, x)
    return x.tour, st, action


def standings(tour: Tournament, inner: TunerState, contenders: Sequence[Contender]) -> list[dict[str, Any]]:
    """Per contender, what the status shows: its role, N, mean accepted length, best N, goodput estimate
    against the stable now (and its sd). The stable's numbers are its own windows'."""
    out = []
    for i, (c, e) in enumerate(zip(contenders, tour.entries)):
        row: dict[str, Any] = {"contender": i, "method": c.method}
        if c.adaptive:
            row["adaptiveVerification"] = True  # tells it from the same method's contender without
        if c.ngram_drafter != DEFAULT_NGRAM_DRAFTER:
            row["ngramDrafter"] = c.ngram_drafter  # likewise
        if i == tour.stable:
            row.update(role="stable", n=inner.stable_n,
                       acceptedLength=accepted_length([r for r in inner.records if r.n == inner.stable_n]))
        elif i == tour.canary:
            row.update(role="canary", n=tour.canary_n)
        else:
            row.update(role="measured" if e.measured_n is not None else "untried", n=e.measured_n,
                       acceptedLength=e.accepted_length)
        if e.expected is not None and i != tour.stable:
            row.update(bestN=e.best_n, expectedGain=e.expected / tour.scale - 1.0, sd=(e.sd or 0.0) / tour.scale)
        if e.gain is not None:
            row["measuredGain"] = e.gain
        if e.failure is not None and i != tour.stable:
            row.update(role="failed", failure=e.failure)
        out.append(row)
    return out
