"""Schedule mode under switchback: a live arm chosen and judged band by band (tuning/bands.py).

Both arms run in the stable's pods and the engines count their steps per batch-size band, so each band is
a paired comparison of the K the two arms draft there. Observing, `band_canary` starts an arm drafting at
each band a K not yet judged against the stable's there (a proposed K nothing measured there, one step past
a neighbour estimated better, the proposed K, then the stable's neighbours). Analysing, `band_arm_worse`
ends an arm the canary judge proves worse over the load mix while no band is promising; `band_by_band`
serves the arm where the judge proves it better over the load mix (at the bands its pairs back), else runs
it until a band is proven better (and the mix is not about to prove the whole arm), every band where the
arms differ is decided, or its windows run out; then the bands proven better take the arm's K in the
served table and every other band keeps the stable's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from specpilot_runtime.live import band_of, band_range, bands_up_to

from ..actions import Action
from ..bands import (BandVerdict, Judging, band_verdicts, carried_by_mix, compose, differs, farther, k_at,
                     neighbours, open_bands, promising, proven, untried, verdict_at, with_ks)
from ..constants import EXTEND, MAX_BATCH_SIZE
from ..context import Window, candidates, load_mix
from ..judge import noise_prior
from ..kinds import ActionKind, Ruling
from ..schedule import schedule_text
from ..switchback import live_arm, started_n, switching
from ..transitions import promote, rollback, start_canary

if TYPE_CHECKING:
    from .analysing import Analysis
    from .observing import Observing


def band_canary(o: Observing) -> Action | None:
    """Schedule mode under switchback: start an arm drafting, at every band, the first K not yet judged
    against the stable's there this round of (`bands.untried`): the K the measurements propose
    (`schedule.propose`) where no arm has an estimate for it there, one step past a neighbour an ended arm
    estimated better (`bands.farther`: past a cliff or a cap the best K may be two steps away), the
    proposed K, and at a band the arms have visited, the stable's K one either side, the side the
    load leans to first (`bands.neighbours`; next to the stable is where a shape the step-time model cannot
    express hides a better K). Where the proposal drafts the stable's K at every band the load visits, the
    neighbours go first at every band (wherever the load goes next, the arm is measured there): the
    measurements see no better K, and a far single N the planner would try instead may cost far more
    while it runs. A band the load never visits gathers no evidence and keeps the stable's K. None when no
    band is left to try (the other rules then plan or converge)."""
    w = o.w
    s, t = w.state, w.tuning
    if t.mode != "schedule" or not switching(s, t):
        return None
    proposal = w.propose()
    stable, prop = (s.stable_n, s.stable_schedule), (proposal.num_speculative_tokens, proposal.rows)
    allowed = [k for k in candidates(s, t) if k <= started_n(s, t)]
    loads = load_mix(s)
    seen = {r.band for r in s.band_records}
    visited = seen | {band_of(round(b)) for b in loads}
    every = bands_up_to(MAX_BATCH_SIZE)
    near = seen if any(differs(b, stable, prop) for b in visited) else set(every)
    j = judging(w)
    ks: dict[str, int] = {}
    for band in every:
        lo = band_range(band)[0]
        k_s = k_at(stable[1], stable[0], lo)
        k_p = k_at(prop[1], prop[0], lo)
        # The proposal first where it says something new (a K no arm has an estimate for here), then one
        # step past a neighbour estimated better (`farther`), then the proposal measured undecided and the
        # neighbours.
        fresh = [k_p] if not math.isfinite(verdict_at(s.band_records, band, k_s, k_p, j, len(seen)).upper) else []
        options = fresh + farther(s.band_records, band, k_s, j, len(seen)) + [k_p] \
            + (neighbours(band, k_s, loads) if band in near else [])
        ks_band = next((k for k in options if k != k_s and k in allowed and
                        untried(verdict_at(s.band_records, band, k_s, k, j, len(seen)))), None)
        if ks_band is not None:
            ks[band] = ks_band
    if not ks:
        return None
    n, rows = with_ks(stable, ks)
    if not live_arm(s, t, n, rows):
        return None
    s.canary_schedule = rows
    return start_canary(s, w.now, n, f"arm {_text(n, rows)}: per band, a K not yet "
                                     f"judged against the stable's", {"schedule": proposal.to_json()}, rows)


def judging(w: Window) -> Judging:
    s, t = w.state, w.tuning
    return Judging(t.objective, t.margin_for(s.method), t.confidence, t.max_windows_per_round, noise_prior(True))


def judged_by_band(a: Analysis) -> list[BandVerdict] | None:
    """The band verdicts on a live canary arm in schedule mode; None where the canary is judged as a whole
    (another mode, a canary of its own pods, or engines that count no bands)."""
    s, t = a.state, a.w.tuning
    if t.mode != "schedule" or s.canary_n is None or not live_arm(s, t, s.canary_n, s.canary_schedule):
        return None
    if not any(r.track == "canary" and r.seq >= a.since for r in s.band_records):
        return None
    return band_verdicts(s.band_records, (s.stable_n, s.stable_schedule), (s.canary_n, s.canary_schedule),
                         judging(a.w))


def band_arm_worse(a: Analysis) -> Action | None:
    """Roll back a band-by-band arm the canary judge rolls back over the load mix, as it would a canary,
    while no band is promising (`bands.promising`): at every band it differs at, it measures no better
    than the stable's K, so the windows it may still run (EXTEND x canary.windows) would buy nothing a
    later arm cannot try (an arm may return to a band only where it measured better: `bands.untried`)."""
    verdicts = a.by_band
    if verdicts is None or a.verdict.decision != Ruling.ROLLBACK or any(promising(v.verdict) for v in verdicts):
        return None
    said = "; ".join(v.text() for v in verdicts) or "no band paired"
    return rollback(a.state, a.w.now, f"{a.verdict.reason} over the load mix, and no band promising: {said}",
                    {"bands": [v.to_json() for v in verdicts], "verdict": a.verdict.to_json()})


def band_by_band(a: Analysis) -> Action | None:
    """Serve an arm the canary judge proves better over the load mix, but at the bands proven worse; else,
    once a band is proven better, every band the arms differ at is decided, or the arm's windows
    (EXTEND x canary.windows, or the round's) run out: promote the bands proven better (the served table
    changes there only), or roll the arm back when none is."""
    verdicts = a.by_band
    if verdicts is None:
        return None
    s, t, now = a.state, a.w.tuning, a.w.now
    assert s.canary_n is not None  # judged_by_band judges a running canary only
    numbers = {"bands": [v.to_json() for v in verdicts]}
    said = "; ".join(v.text() for v in verdicts)
    stable, canary = (s.stable_n, s.stable_schedule), (s.canary_n, s.canary_schedule)
    if a.proven_whole:
        # Proven over the load mix, as a canary is: the arm's K at the bands its pairs back (`carried_by_mix`),
        # the stable's at those proven or estimated worse and at those never paired.
        backed = carried_by_mix(verdicts)
        worse = {v.band for v in verdicts if v.band not in backed}
        n, rows = compose(stable, canary, backed)
        kept = f", the stable's K kept at {', '.join(sorted(worse))}" if worse else ""
        return promote(s, now, Action(ActionKind.PROMOTE, n, f"{a.verdict.reason} over the load mix{kept}: "
                                                             f"serving {_text(n, rows)}", rows),
                       {**numbers, "verdict": a.verdict.to_json()})
    ran = s.seq - a.since + 1
    # A band proven ends the arm, unless the arm is already measured better over the load mix (its lower
    # bound above the stable's, the judge waiting only for more looks or for the mix's loads: `mix_wait`)
    # and another band it differs at is undecided, paired too rarely for an estimate or estimated better
    # (`untried`): the mix may soon prove the whole arm (a rare band's gain counts in it, though never
    # proven on its own pairs), which promoting the proven band alone would start again from no windows.
    whole = a.verdict
    going = whole.decision in (Ruling.CONTINUE, Ruling.PROMOTE) and math.isfinite(whole.lower) and whole.lower > 0 \
        and any(untried(v.verdict) for v in verdicts)
    spent = ran >= EXTEND * t.canary.windows or s.windows_in_round >= t.max_windows_per_round \
        or (bool(proven(verdicts)) and not going)
    if not spent and (open_bands(verdicts) or not verdicts):
        return Action(ActionKind.KEEP_ANALYSING, s.canary_n, f"bands undecided: {said or 'no band paired yet'}")
    won = proven(verdicts)
    if not won:
        return rollback(s, now, f"no band proven better: {said or 'no band paired'}", numbers)
    n, rows = compose(stable, canary, won)
    proof = "; ".join(v.text() for v in verdicts if v.band in won)
    return promote(s, now, Action(ActionKind.PROMOTE, n, f"{proof}: serving {_text(n, rows)}", rows), numbers)


def _text(n: int, rows: list[list[int]] | None) -> str:
    return schedule_text(rows) if rows else f"N={n}"
