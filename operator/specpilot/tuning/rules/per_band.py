"""Analysing, schedule mode under switchback: the canary arm is judged band by band (tuning/bands.py).

Both arms run in the stable's pods and the engines count their steps per batch-size band, so each band is
a paired comparison of the K the two arms draft there. The arm runs until every band where they differ is
decided (proven better, or unable to beat the stable's K by the margin) or its windows run out; then the
bands proven better take the canary's K in the served table and every other band keeps the stable's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..actions import Action
from ..bands import BandVerdict, band_verdicts, compose, open_bands, proven
from ..constants import EXTEND
from ..judge import noise_prior
from ..kinds import ActionKind
from ..schedule import schedule_text
from ..switchback import live_arm
from ..transitions import promote, rollback

if TYPE_CHECKING:
    from .analysing import Analysis


def judged_by_band(a: Analysis) -> list[BandVerdict] | None:
    """The band verdicts on a live canary arm in schedule mode; None where the canary is judged as a whole
    (another mode, a canary of its own pods, or engines that count no bands)."""
    s, t = a.state, a.w.tuning
    if t.mode != "schedule" or s.canary_n is None or not live_arm(s, t, s.canary_n, s.canary_schedule):
        return None
    if not any(r.track == "canary" and r.seq >= a.since for r in s.band_records):
        return None
    return band_verdicts(s.band_records, (s.stable_n, s.stable_schedule), (s.canary_n, s.canary_schedule), t.objective,
                         t.margin_for(s.method), t.confidence, t.canary.windows, noise_prior(True))


def band_by_band(a: Analysis) -> Action | None:
    """Promote the bands proven better (the served table changes there only), or roll the arm back when
    none is, once every band the arms differ at is decided or the arm's windows (EXTEND x canary.windows,
    or the round's) run out."""
    verdicts = judged_by_band(a)
    if verdicts is None:
        return None
    s, t, now = a.state, a.w.tuning, a.w.now
    assert s.canary_n is not None  # judged_by_band judges a running canary only
    numbers = {"bands": [v.to_json() for v in verdicts]}
    said = "; ".join(v.text() for v in verdicts)
    ran = s.seq - a.since + 1
    spent = ran >= 2 * EXTEND * t.canary.windows or s.windows_in_round >= t.max_windows_per_round \
        or (ran >= t.canary.windows and bool(proven(verdicts)))
    if not spent and (open_bands(verdicts) or not verdicts):
        return Action(ActionKind.KEEP_ANALYSING, s.canary_n, f"bands undecided: {said or 'no band paired yet'}")
    won = proven(verdicts)
    if not won:
        return rollback(s, now, f"no band proven better: {said or 'no band paired'}", numbers)
    n, rows = compose((s.stable_n, s.stable_schedule), (s.canary_n, s.canary_schedule), won)
    served = schedule_text(rows) if rows else f"N={n}"
    proof = "; ".join(v.text() for v in verdicts if v.band in won)
    return promote(s, now, Action(ActionKind.PROMOTE, n, f"{proof}: serving {served}", rows), numbers)
