"""Schedule mode under switchback: K chosen per batch-size band from the arms' own per-band counters.

Both switchback arms run in the same pods at the same load, seconds apart, and the engine counts each arm's
steps per batch-size band (runtime/specpilot_runtime/live.py: `band_of`). So every band the load visits is a
paired comparison of the K each arm drafts there: the band's tokens per sequence-step and step time are the
arm's own at that batch size, whatever the other bands do. The canary judge (judge.py) rules on each band
where the arms draft differently on that band's pairs alone, at the canary's confidence split over the
bands judged (so a canary promotes a band on noise no more often than a canary is promoted on noise), and
the served table is the stable's with the canary's K at the bands proven better, and the stable's elsewhere
(`compose`). A band seen too rarely to prove keeps its K: nothing is promoted on the model's word.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot_runtime.live import (BAND_COUNTERS, SB_OUTPUT_TOKENS, SB_SEQUENCE_STEPS, SB_STEP_SECONDS, SB_STEPS,
                                    band_of, band_range)
from specpilot_runtime.speculative import schedule_k

from .constants import (BAND_SLACK, EXTEND, MAX_BATCH_SIZE, MAX_LOAD, MAX_N, MAX_STEP_S, MIN_BAND_STEPS,
                        MIN_BAND_WINDOWS, MIN_STEP_S)
from .judge import Verdict, judge
from .kinds import Ruling
from .observations import WindowRecord, finite, whole, whole_n

_COLUMNS = tuple(BAND_COUNTERS.index(c) for c in (SB_STEPS, SB_STEP_SECONDS, SB_SEQUENCE_STEPS, SB_OUTPUT_TOKENS))
Rows = list[list[int]]


@dataclass(frozen=True)
class BandRecord:
    """One arm's numbers at one batch-size band over one window (serialised into the status)."""

    seq: int  # the window, shared by the two arms' records
    track: str  # "stable" | "canary"
    band: str  # live.band_of's label, e.g. "16-31"
    k: int  # the K the arm drafted at the band (at its smallest batch size)
    tokens_per_step: float  # tokens out per sequence-step at this band
    step_s: float  # seconds per step at this band
    load: float  # sequences per step at this band

    def window(self) -> WindowRecord:
        """The record as the judge reads a track's window, drafting K at this band."""
        return WindowRecord(seq=self.seq, track=self.track, n=self.k, drafts=0.0, accepted_per_pos=(),
                            tokens_per_step=self.tokens_per_step, step_s=self.step_s, load=self.load)

    def to_json(self) -> list[Any]:
        """The fields in order, as a list (a status keeps up to MAX_BAND_RECORDS of them)."""
        return [getattr(self, f.name) for f in dataclasses.fields(self)]

    @classmethod
    def from_json(cls, v: Any) -> "BandRecord":
        """A record read back from a status: ValueError for anything `to_json` never writes."""
        size = len(dataclasses.fields(cls))
        if not isinstance(v, list) or len(v) != size:
            raise ValueError(f"band record is not a list of {size}")
        seq, track, band, k, tokens, step_s, load = v
        if track not in ("stable", "canary") or not isinstance(band, str):
            raise ValueError("band record track or band is not one the tuner writes")
        band_range(band)
        return cls(whole(seq, "band record seq"), track, band, whole_n(k, "band record k"),
                   finite(tokens, "band record l", 1.0, MAX_N + 1),
                   finite(step_s, "band record t", MIN_STEP_S, MAX_STEP_S), finite(load, "band record b", 1.0, MAX_LOAD))


def band_records(seq: int, track: str, arm: tuple[int, Rows | None],
                 bands: Mapping[str, Sequence[float]]) -> list[BandRecord]:
    """An arm's per-band counters (live.BAND_COUNTERS' order) as records, with the K the arm (N, table)
    drafts at each band: only bands an engine could have
    counted (a label `band_of` writes, finite counts, at least MIN_BAND_STEPS steps, a batch size inside
    the band, tokens per sequence-step and step time within the tuner's bounds). A pod's labels and values
    are as hostile as any input: anything else is left out, not clamped into evidence."""
    out = []
    for band, counts in bands.items():
        try:
            lo, hi = band_range(band)
        except ValueError:
            continue
        if len(counts) < len(BAND_COUNTERS) or not all(map(math.isfinite, counts)):
            continue
        steps, seconds, seq_steps, output = (counts[i] for i in _COLUMNS)
        if steps < MIN_BAND_STEPS or seconds <= 0 or seq_steps <= 0:
            continue
        load, tokens, step_s = seq_steps / steps, output / seq_steps, seconds / steps
        inside = lo * (1 - BAND_SLACK) <= load <= (hi + 1) * (1 + BAND_SLACK) and load <= MAX_LOAD
        if inside and 1.0 <= tokens <= MAX_N + 1 and MIN_STEP_S <= step_s <= MAX_STEP_S:
            out.append(BandRecord(seq, track, band, k_at(arm[1], arm[0], lo), tokens, step_s, load))
    return out


def k_at(rows: Sequence[Sequence[int]] | None, n: int, batch_size: int) -> int:
    return schedule_k(rows, n, min(batch_size, MAX_BATCH_SIZE))


def _points(lo: int, hi: int, tables: Sequence[Sequence[Sequence[int]] | None]) -> list[int]:
    """Batch sizes standing for every one in [lo, hi]: K is constant between the tables' row edges."""
    hi = min(hi, MAX_BATCH_SIZE)
    return [lo] + sorted({e for rows in tables for r in rows or () for e in (r[0], r[1] + 1) if lo < e <= hi})


def differs(band: str, stable: tuple[int, Rows | None], canary: tuple[int, Rows | None]) -> bool:
    """The arms draft a different K somewhere in the band."""
    lo, hi = band_range(band)
    return any(k_at(stable[1], stable[0], b) != k_at(canary[1], canary[0], b)
               for b in _points(lo, hi, (stable[1], canary[1])))


def compose(stable: tuple[int, Rows | None], canary: tuple[int, Rows | None],
            bands: Sequence[str]) -> tuple[int, Rows | None]:
    """The stable's (N, table) with the canary's K at `bands`: vLLM's rows (from batch size 1, rising, no
    overlap, K <= N), equal neighbours merged; (K, None) when one K serves every batch size."""
    ranges = sorted(band_range(b) for b in bands)
    edges = {1} | {e for lo, hi in ranges for e in (lo, hi + 1)}
    edges |= {e for rows in (stable[1], canary[1]) for r in rows or () for e in (r[0], r[1] + 1)}
    starts = sorted(e for e in edges if 1 <= e <= MAX_BATCH_SIZE)
    rows: Rows = []
    for i, lo in enumerate(starts):
        hi = starts[i + 1] - 1 if i + 1 < len(starts) else MAX_BATCH_SIZE
        src = canary if band_of(lo) in bands else stable
        k = k_at(src[1], src[0], lo)
        if rows and rows[-1][2] == k:
            rows[-1][1] = hi
        else:
            rows.append([lo, hi, k])
    n = max(r[2] for r in rows)
    return (n, None) if len(rows) == 1 else (n, rows)


def with_ks(stable: tuple[int, Rows | None], ks: Mapping[str, int]) -> tuple[int, Rows | None]:
    """The stable's (N, table) drafting ks[band] at each band of `ks`."""
    if not ks:
        return stable
    rows = [[*band_range(b), k] for b, k in sorted(ks.items(), key=lambda bk: band_range(bk[0])[0])]
    return compose(stable, (max(ks.values()), rows), list(ks))


@dataclass(frozen=True)
class BandVerdict:
    band: str
    stable_k: int
    canary_k: int
    verdict: Verdict

    def to_json(self) -> dict[str, Any]:
        return {"band": self.band, "stableK": self.stable_k, "canaryK": self.canary_k, **self.verdict.to_json()}

    def text(self) -> str:
        v = self.verdict
        return (f"band {self.band}: K={self.canary_k} vs {self.stable_k} measured {v.gain:+.1%} "
                f"[{v.lower:+.1%}, {v.upper:+.1%}] in {v.windows} windows")


def band_verdicts(records: Sequence[BandRecord], stable: tuple[int, Rows | None], canary: tuple[int, Rows | None],
                  judging: Judging) -> list[BandVerdict]:
    """The judge's ruling at every band where the arms draft differently (`verdict_at`). The canary's
    1 - confidence is split over the bands judged (Bonferroni): each is a chance to promote on noise."""
    seen = {r.band for r in records}
    judged = sorted((b for b in seen if differs(b, stable, canary)), key=lambda b: band_range(b)[0])
    out = []
    for band in judged:
        lo = band_range(band)[0]
        ks, kc = k_at(stable[1], stable[0], lo), k_at(canary[1], canary[0], lo)
        out.append(BandVerdict(band, ks, kc, verdict_at(records, band, ks, kc, judging, len(judged))))
    return out


@dataclass(frozen=True)
class Judging:
    """What the judge rules with (the spec's tuning): objective, margin, confidence, the round's windows,
    and the prior on a pair's spread."""

    objective: str
    margin: float
    confidence: float
    round_windows: int
    noise_prior_sd: float


def band_windows(records: Sequence[BandRecord], band: str, round_windows: int) -> int:
    """The windows the judge is configured with at a band: the band's share of the analysed windows times the
    round's, over EXTEND (the judge lets a canary run EXTEND x its configured windows). A band the load
    visits in one window of eight can pair in no more windows than that in a round: its promotion boundary
    (O'Brien-Fleming's over the looks it may get) is drawn over those, not over a canary's."""
    seqs = {r.seq for r in records}
    at = {r.seq for r in records if r.band == band}
    share = len(at) / len(seqs) if seqs else 1.0
    return max(MIN_BAND_WINDOWS, math.ceil(share * round_windows / EXTEND))


def verdict_at(records: Sequence[BandRecord], band: str, ks: int, kc: int, judging: Judging,
               bands: int = 1) -> Verdict:
    """The judge's ruling on K=kc against K=ks at one band, on the round's pairs of that band with these two
    K, whichever arm drafted which (an earlier arm's too: the same comparison in the same pods, only more
    of it), at the confidence split over `bands` bands."""
    j = judging
    at = [r for r in records if r.band == band]
    s = {r.seq: r for r in at if r.k == ks}
    c = [r.window() for r in at if r.k == kc and r.seq in s]
    pairs = [s[r.seq].window() for r in c]
    each = 1.0 - (1.0 - j.confidence) / max(bands, 1)
    return judge(pairs, c, [r.load for r in pairs], j.objective, j.margin, each,
                 band_windows(records, band, j.round_windows), noise_prior_sd=j.noise_prior_sd)


def proven(verdicts: Sequence[BandVerdict]) -> list[str]:
    return [v.band for v in verdicts if v.verdict.decision == Ruling.PROMOTE]


def promising(v: Verdict) -> bool:
    """Proven better, or undecided while its estimate is better than the stable. A band paired too rarely
    for an estimate is not: its pairs pool over the round's arms, so a later arm picks them up."""
    return v.decision == Ruling.PROMOTE or (v.decision == Ruling.CONTINUE and math.isfinite(v.upper) and v.gain > 0)


def untried(v: Verdict) -> bool:
    """A K worth an arm at a band: undecided there, and either paired too rarely for an estimate or
    estimated better. One an arm estimated no better, undecided when it ended, is not tried again: more of
    the same comparison would mostly prove it worse."""
    return v.decision == Ruling.CONTINUE and (not math.isfinite(v.upper) or v.gain > 0)


def neighbours(band: str, k: int, loads: Sequence[float]) -> list[int]:
    """The stable's K one either side at a band, the likelier better first: the best K falls as load rises,
    so at a band lighter than the load mix's median drafting more, elsewhere drafting less."""
    lighter = bool(loads) and band_range(band)[1] < statistics.median(loads)
    return [k + 1, k - 1] if lighter else [k - 1, k + 1]


def farther(records: Sequence[BandRecord], band: str, ks: int, judging: Judging, bands: int = 1) -> list[int]:
    """At a band, the K one step past the stable's neighbours estimated better there (by more than the
    promotion margin: less says nothing of a direction) but left unproven by an ended arm, the best
    estimate first: next to the stable is where the search starts, not where the best K must be (past a
    cliff or a capture cap one step gains a little and two a lot), and a K estimated better says which way
    a better one lies. So K=ks-2 follows K=ks-1 estimated better, K=ks-3 follows ks-2 when ks-1 and ks-2
    both were, and so on (a K the arms jumped to, with nothing measured between it and the stable's, says
    nothing of the K past it). The unproven K stays `untried` for a later arm."""
    found = []
    for step in (1, -1):
        k, gain = ks + step, None
        while 0 <= k <= MAX_N:
            v = verdict_at(records, band, ks, k, judging, bands)
            if not (v.decision == Ruling.CONTINUE and math.isfinite(v.upper) and v.gain > judging.margin):
                break
            k, gain = k + step, v.gain
        if gain is not None and 0 <= k <= MAX_N:
            found.append((gain, k))
    return [k for _, k in sorted(found, reverse=True)]


def carried_by_mix(verdicts: Sequence[BandVerdict]) -> list[str]:
    """The bands an arm proven better over the load mix serves its K at: those its pairs there back, proven
    better or undecided and not estimated worse (a rare band's gain is proven in the mix, not on its own
    pairs). A band the arms never paired at keeps the stable's K: the mix proves the bands it measured, not
    one it never saw (an arm drafting N=7 everywhere, proven at the light and middle loads, would draft 7
    at a heavy band where 3 is 6% better)."""
    return [v.band for v in verdicts if v.verdict.windows > 0 and v.verdict.decision != Ruling.ROLLBACK
            and not (math.isfinite(v.verdict.upper) and v.verdict.gain < 0)]


def open_bands(verdicts: Sequence[BandVerdict]) -> list[str]:
    return [v.band for v in verdicts if v.verdict.decision == Ruling.CONTINUE]
