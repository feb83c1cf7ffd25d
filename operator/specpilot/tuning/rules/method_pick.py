"""The method canary an idle tournament starts, if any: `next_pick` gates (the N tuner between canaries, the
stable observed, the round's canary budget), then `PICK_RULES`, in order; the first to pick one decides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from specpilot.api.models import Tuning

from ..constants import OBSERVE_WINDOWS, TIE_PROBABILITY
from ..context import candidates, canary_share, fitted_model, judge_power
from ..kinds import Phase
from ..method_estimates import allowed_n, anchored, retry_value, stable_records, try_value
from ..observations import Observations, measurable
from ..state import TunerState
from ..tournament_state import Contender, Tournament
from ..tournament_transitions import Pick


def untried(tour: Tournament, tuning: Tuning, obs: Observations) -> list[int]:
    """Contenders never measured, when a first canary of one is worth its cost: they go before any N canary
    of the stable's method (a method moves goodput by tens of percent, an N by a few; N tuned for a method
    about to lose is a canary spent for nothing)."""
    value, cost = try_value(tuning.canary_margin, canary_share(tuning, obs))
    if value <= cost:
        return []
    return [i for i, e in enumerate(tour.entries) if i != tour.stable and e.measured_n is None]


@dataclass(frozen=True)
class Idle:
    """An idle window of the tournament (no method canary), for the rules that pick the next one."""

    tour: Tournament
    inner: TunerState
    tuning: Tuning
    contenders: Sequence[Contender]
    obs: Observations


def no_speculation_first(x: Idle) -> Pick | None:
    """While contenders are untried and the stable's step cost against no speculation is unmeasured, canary
    the stable's own method at N = 0 first: no speculation is a contender, and the anchor of every method's
    step cost on this machine."""
    own = candidates(x.inner, x.contenders[x.tour.stable].tuning(x.tuning))
    if untried(x.tour, x.tuning, x.obs) and not anchored(x.inner) and 0 in own and not x.tour.probed_off:
        return x.tour.stable, 0, ("no speculation (N=0) not measured yet: it is a contender, and the anchor of "
                                  "every method's step cost on this machine")
    return None


def untried_first(x: Idle) -> Pick | None:
    """Canary the first untried contender at its own N when a first canary is worth its cost (`untried`)."""
    waiting = untried(x.tour, x.tuning, x.obs)
    if not waiting:
        return None
    value, cost = try_value(x.tuning.canary_margin, canary_share(x.tuning, x.obs))
    c = x.contenders[waiting[0]]
    return waiting[0], c.n, (f"{c.label} untried: expected value {value:.2%} over cost {cost:.2%} "
                             f"(its goodput is unknown until measured)")


def second_chance(x: Idle) -> Pick | None:
    """Once the stable's N is tuned (converged): a loser's N whose expected promotable gain over the stable
    is worth its canary most, counting the uncertainty, not just the expectation (one canary at one N says
    little of a parallel drafter's other N, or of any drafter's cost at other N on a machine unlike the
    prior's). Once per contender; never a failed one; N = 0 is the stable's N tuner's to score; an N
    expected within the margin with little chance of proving more is a near tie, as for an N canary."""
    tour, tuning = x.tour, x.tuning
    if x.inner.phase != Phase.CONVERGED:
        return None
    share = canary_share(tuning, x.obs)
    power = judge_power(fitted_model(x.inner), tuning, tuning.canary_margin)
    retry = []
    for i, e in enumerate(tour.entries):
        if i == tour.stable or e.retried or e.failure is not None:
            continue
        # The status is writable by others: only an N the contender may run is ever canaried.
        allowed = set(allowed_n(x.contenders[i], tuning))
        for n, expected, sd in e.options:
            if n and n != e.measured_n and n in allowed:
                worth, cost, chance = retry_value(expected / tour.scale, sd / tour.scale, tuning.canary_margin,
                                                  share, power)
                near_tie = expected / tour.scale - 1.0 < tuning.canary_margin and chance < TIE_PROBABILITY
                if worth > cost and not near_tie:
                    retry.append((worth - cost, i, n, expected / tour.scale - 1.0, worth, cost, chance))
    if not retry:
        return None
    _, i, n, gain, worth, cost, chance = max(retry)
    return i, n, (f"{x.contenders[i].label} at N={n} expected {gain:+.1%} against the stable (measured at "
                  f"N={tour.entries[i].measured_n}): value {worth:.2%} over cost {cost:.2%}, "
                  f"{chance:.0%} chance of a promotion")


# The method canary an idle tournament starts, if any: the first rule that picks one.
PICK_RULES = (no_speculation_first, untried_first, second_chance)


def next_pick(tour: Tournament, inner: TunerState, tuning: Tuning, contenders: Sequence[Contender],
              obs: Observations) -> Pick | None:
    """The method canary to start now, if any: none while the N tuner runs a canary or has not observed the
    stable OBSERVE_WINDOWS windows, or the round's canary budget is spent; else the first of PICK_RULES."""
    if inner.phase not in (Phase.OBSERVING, Phase.CONVERGED) or inner.canary_n is not None:
        return None
    at_stable = [r for r in stable_records(inner) if r.n == inner.stable_n]
    this_window = measurable(obs.stable, obs.window_s) and obs.stable is not None and obs.stable.n == inner.stable_n
    if len(at_stable) + this_window < OBSERVE_WINDOWS \
            or inner.canaries_in_round >= tuning.max_canaries_per_round:
        return None
    x = Idle(tour, inner, tuning, contenders, obs)
    return next((pick for rule in PICK_RULES if (pick := rule(x)) is not None), None)
