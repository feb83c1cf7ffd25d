"""The canary verdict: a sequential test on the canary's *measured* goodput against the stable's, plus
health gates.

Each paired window (stable and canary in the same window, same traffic mix) gives the measured log goodput
ratio of the canary at the same load:

    y_w = log(L_canary,w / L_stable,w) - log(t_canary,w / t_stable,w)

tokens per step L from the counters, step time t from TPOT x L. Traffic splits by replicas, but a slower
track holds more sequences per pod (Little's law), so the two may not run at the same load: the canary's
time per token is brought to the stable's load along the slope of log TPOT against log load that the
stable track's own windows show (`load_slope`), so a canary is not judged faster for holding fewer
sequences, nor slower for holding more. Nothing here comes from the step-time model: the model may choose *which* canary to try (planner.py), never whether a canary won, so a machine
the prior never saw cannot talk the judge into a worse N. Windows are weighed by the stable track's
goodput at their load level (per-sequence speed for the latency objective, per-pod tokens for throughput)
and the level's share of the round's load mix, so the ratio is the one of G = sum_B w_B B L / t over the
round's loads; no promotion before the last look until the windows have covered COVERAGE of that goodput,
each level counting from LEVEL_WINDOWS windows (a rollback need not wait). The mix itself is known only
through the windows that sampled it, and its doubt is part of the estimate's. At the last look what was
seen is judged: a level with a pair or two is estimated from them with their doubt, and the goodput at
loads no pair came near counts at the sceptical prior below, rather than the canary being rolled back for
coverage (a heavy level that comes rarely would otherwise never let a canary through).

The true log ratio gets a sceptical prior centred on 0 (GAIN_PRIOR_SD: a canary is no better than the
stable until it shows it); each level's per-window spread is its own, shrunk towards the pooled one, which
has a weak inverse-gamma prior (a few windows cannot look spuriously certain); bounds use Student-t
quantiles with Welch-Satterthwaite degrees of freedom. Decision at confidence c and margin m, looked at
after every window from MIN_WINDOWS on:
- promote   when the posterior mean gain is at least +m and the lower bound is above 0, the bound being
            O'Brien-Fleming's over the EXTEND x windows the canary may get (`promotion_z`): looking
            after every window does not spend more than 1 - c on promoting a canary that is no better;
- roll back when the upper bound at c is below +m (it cannot be better by enough), the goodput at loads no
            pair came near counting as possibly much better (UNSEEN_UPSIDE_SD);
- otherwise keep analysing, and roll back as inconclusive once the configured windows run out (up to
  EXTEND times that while the canary measures better than the stable).
A retry of an unproven canary (evidence.py) starts with its predecessor's paired windows: they count in the
estimate, not in the windows above, and its boundary is drawn at half the error rate over the pooled horizon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from statistics import NormalDist
from typing import Protocol, Sequence

import numpy as np

from .constants import (COVERAGE, ERROR_SLACK, EXTEND, GAIN_PRIOR_SD, JUDGE_NOISE_PRIOR_DOF, JUDGE_NOISE_PRIOR_SD,
                        SWITCHBACK_NOISE_PRIOR_SD,
                        LEVEL_PRIOR_DOF, LEVEL_WINDOWS, MIN_ESTIMATE_SD, MIN_RELATIVE_GAIN, MIN_WINDOWS,
                        OCTAVE_TOLERANCE, PROJECTION_MAX_SLOPE, PROJECTION_SLOPE_Z, SLOPE_MIN_SPREAD, SLOPE_WINDOWS,
                        SPLIT_NOTE_BELOW, UNSEEN_DOWNSIDE_SD_PER_OCTAVE, UNSEEN_UPSIDE_SD)
from .kinds import Ruling
from .observations import TrackWindow, WindowRecord


class Drafting(Protocol):
    """What the canary drafts against the stable at a load level (schedule.TrackDrafting)."""

    def identical(self, level: float) -> bool:
        """The two tracks are one configuration around this load: their goodput ratio is exactly 1."""

    def direction(self, level: float) -> int:
        """+1 where the canary drafts more tokens per step than the stable, -1 fewer, 0 as many."""


@dataclass(frozen=True)
class Verdict:
    decision: Ruling
    gain: float  # measured relative goodput gain of the canary (posterior mean)
    lower: float
    upper: float
    windows: int  # the canary's own paired windows
    reason: str
    carried: int = 0  # paired windows pooled from an earlier canary of the same N (a retry)
    inconclusive: bool = False  # rolled back because the windows ran out, not on the numbers

    def to_json(self) -> dict:
        def pct(v: float) -> float | None:
            return round(v * 100, 3) if math.isfinite(v) else None
        return {"decision": self.decision, "gain_pct": pct(self.gain), "lower_pct": pct(self.lower),
                "upper_pct": pct(self.upper), "windows": self.windows, "carried": self.carried,
                "reason": self.reason}


def out_of_room(v: Verdict, room: int) -> Verdict:
    """`v`, or an inconclusive rollback when the canary is still undecided with `room` windows of its own:
    all that status holds of one canary's analysis. Past that its oldest windows go as new ones come, the
    windows the judge counts stop growing, and a canary allowed more (EXTEND x a configured `windows` above
    a third of the room) would stay "promising" for good; a method canary's windows count against no
    round's budget."""
    if v.decision != Ruling.CONTINUE or v.windows < room:
        return v
    return replace(v, decision=Ruling.ROLLBACK, inconclusive=True,
                   reason=f"inconclusive after {v.windows} windows, all that status holds of one canary "
                          f"(measured {v.gain:+.1%})")


def health_problem(stable: TrackWindow | None, canary: TrackWindow | None, error_gate: float) -> str | None:
    """A reason to roll back now, whatever the numbers say; None when the canary is healthy.
    `error_gate` is spec.tuning.errorGate: the canary's errors per pod may reach that many times stable's,
    plus ERROR_SLACK."""
    if canary is None:
        return "canary pods disappeared"
    if canary.errors > 0:
        stable_rate = (stable.errors / max(stable.ready_pods, 1)) if stable else 0.0
        if canary.errors / max(canary.ready_pods, 1) > error_gate * stable_rate + ERROR_SLACK:
            return f"canary errors {canary.errors:g} above stable's"
    return None


def t_quantile(p: float, dof: float) -> float:
    """Student-t quantile (Cornish-Fisher expansion around the normal one; plenty for dof >= 3)."""
    z = NormalDist().inv_cdf(p)
    return z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)


def promotion_z(confidence: float, dof: float, windows: int, horizon: int) -> float:
    """The promotion boundary after `windows` of at most `horizon` paired windows, in standard errors.

    A canary is looked at after every window, and each look is a chance for noise to cross a bound set for
    one look. The boundary is constant on the scale of the summed evidence (O'Brien-Fleming): z sqrt(horizon /
    windows), with z at 1 - (1 - confidence) / 2, so by the reflection principle noise crosses it at any of
    the looks with probability at most 1 - confidence. Early looks need overwhelming gains, the last about
    the one-look bound.
    """
    return t_quantile(1.0 - (1.0 - confidence) / 2.0, dof) * math.sqrt(max(horizon / max(windows, 1), 1.0))


def promotion_power(gain: np.ndarray, margin: float, confidence: float, noise_sd: float,
                    windows: int) -> np.ndarray:
    """Chance that the judge promotes a canary truly better by `gain` (relative), configured for `windows`
    paired windows of per-window spread `noise_sd` (normal approximations). What a canary is worth to the
    planner. The canary must measure better than the stable by its configured windows (else it is rolled
    back as inconclusive, not extended), and by the last of EXTEND times as many reach the margin and clear
    the boundary; the product of the two chances is a little low, as the second look includes the first's
    windows."""
    g = np.log1p(np.maximum(gain, MIN_RELATIVE_GAIN))
    m = math.log1p(margin)
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    se = noise_sd / math.sqrt(max(windows, 1))
    se_last = se / math.sqrt(EXTEND)
    x = np.minimum((g - m) / se_last, g / se_last - z)
    return _phi(g / se) * _phi(x)


def _phi(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))


_erf = np.vectorize(math.erf, otypes=[float])


def paired(stable: Sequence[WindowRecord], canary: Sequence[WindowRecord]) -> list[tuple[WindowRecord, WindowRecord]]:
    """Windows in which both tracks measured tokens per step and step time."""
    by_seq = {r.seq: r for r in stable if r.step_s}
    return [(by_seq[c.seq], c) for c in canary if c.seq in by_seq and c.step_s]


@dataclass(frozen=True)
class Estimate:
    """Posterior of the log goodput ratio canary / stable over the round's load mix."""

    mean: float
    sd: float
    dof: float
    covered: float  # share of the mix's goodput whose level was seen at least LEVEL_WINDOWS times
    unseen: float = 0.0  # share of the mix's goodput at loads no pair came near
    downside: float = 0.0  # sd of the mean from unseen loads on the side where speculating more pays less
    load_share: float = 1.0  # the pairs' load over the load the stable serves alone (a surge canary's split)
    carry: float = 0.0  # mean log ratio `projection` gives to carry the pairs to that load (counted if < 0)

    def split_note(self) -> str:
        """What the verdict says when the pairs ran lighter than the load a promotion will serve: the
        measurement was carried there by a model, which a user can avoid (tuning.canary.mode replace)."""
        if self.load_share >= SPLIT_NOTE_BELOW:
            return ""
        carried = math.expm1(self.carry)
        how = f"carried {carried:+.1%}" if carried <= 0 else f"not carried up the {carried:+.1%} a model says"
        return f"; paired at {self.load_share:.0%} of the load it will serve, {how}"


def load_octaves(loads: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The round's load mix in octaves (powers of two of running sequences per pod) and how many windows
    each held, plus one (the weights' Dirichlet posterior under a uniform prior over the levels seen).

    Loads measured on a real engine scatter around their level (3.4, 3.9, 4.3 ...); stratifying by the exact
    value would make every window its own level, never seen often enough. Within an octave the step-time
    ratio of two N hardly moves, so windows there share one level.
    """
    if not loads:
        return np.array([1.0]), np.array([1.0])
    octaves = np.round(np.log2(np.maximum(np.asarray(loads, dtype=float), 1.0)))
    levels, counts = np.unique(octaves, return_counts=True)
    # A level held by fewer windows within an octave of one that holds LEVEL_WINDOWS, or of a rare level
    # that already joined one, is a passing state (the burst when load starts and the ramp down from it, a
    # lull): its windows join that level. A rare level far from the others is a real part of the mix (a
    # heavy hour) and stays.
    target = {lv: lv for lv, c in zip(levels, counts) if c >= LEVEL_WINDOWS}
    while target:
        joining = {lv: min(target, key=lambda t: abs(t - lv)) for lv in levels
                   if lv not in target and min(abs(t - lv) for t in target) <= 1.0}
        if not joining:
            break
        target.update({lv: target[t] for lv, t in joining.items()})
    joined = np.array([target.get(lv, lv) for lv in levels])
    counts = np.array([counts[joined == t].sum() for t in np.unique(joined)])
    levels = np.unique(joined)
    # One pseudo-window per level: a level seen once in 26 windows may well carry far more than 1/26 of the
    # traffic.
    return 2.0 ** levels, counts + 1.0


def load_slope(stable: Sequence[WindowRecord]) -> float:
    """d log TPOT / d log load of the stable track over its windows (per N, as a fixed effect), between 0
    (time per token independent of load) and 1 (proportional to it); 0 when the loads hardly vary."""
    return load_slope_fit(stable)[0]


def load_slope_fit(stable: Sequence[WindowRecord]) -> tuple[float, float]:
    """`load_slope` and its standard error (infinite when the loads hardly vary)."""
    xs: list[float] = []
    ys: list[float] = []
    for n in {r.n for r in stable}:
        rs = [(r.load, r.step_s / r.tokens_per_step) for r in stable
              if r.n == n and r.step_s and r.tokens_per_step > 0]
        if len(rs) < 2:
            continue
        x = np.log([load for load, _ in rs])
        y = np.log([tpot for _, tpot in rs])
        xs.extend(x - x.mean())
        ys.extend(y - y.mean())
    x_a, y_a = np.array(xs), np.array(ys)
    if len(x_a) < SLOPE_WINDOWS or float(np.sqrt((x_a ** 2).mean())) < SLOPE_MIN_SPREAD:
        return 0.0, math.inf
    sxx = float((x_a ** 2).sum())
    b = float((x_a * y_a).sum()) / sxx
    resid = float(((y_a - b * x_a) ** 2).sum()) / max(len(x_a) - 2, 1)
    return float(np.clip(b, 0.0, 1.0)), math.sqrt(resid / sxx)


def projection(s: WindowRecord, c: WindowRecord, slope: float) -> float:
    """How the pair's log goodput ratio (canary over stable) moves from the load the pair ran at to the one
    the stable serves alone (`WindowRecord.mix_load`): a Service spreads requests over the canary's pods
    too, so every pod ran lighter (with one stable replica, at half), and a longer N gains more at a lighter
    load on an engine whose step cost grows with the tokens it verifies.

    Linear step cost in the tokens a step verifies, t = a + b x B(1 + K): its elasticity in the load B is
    e = q / (1 + q) with q = b B (1 + K) / a. The stable's measured `load_slope` is its own e; the canary
    verifying k = (1 + K_c) / (1 + K_s) times the tokens has q k in place of q. Over the log load gap x the
    ratio moves by -(e_canary - e_stable) x."""
    x = math.log(s.mix_load / s.load)
    if x <= 0 or slope <= 0:
        return 0.0
    e = min(slope, PROJECTION_MAX_SLOPE)
    q = e / (1.0 - e) * (1.0 + c.draft_length) / (1.0 + s.draft_length)
    return -(q / (1.0 + q) - e) * x


def measured_gain(pairs: Sequence[tuple[WindowRecord, WindowRecord]], stable: Sequence[WindowRecord],
                  loads: Sequence[float], objective: str, drafting: Drafting | None = None,
                  noise_prior_sd: float = JUDGE_NOISE_PRIOR_SD) -> Estimate:
    """Posterior of the log goodput ratio canary / stable over the round's load mix, and the share of the
    mix's goodput the paired windows covered.

    Windows are stratified by load level: a level's mean ratio counts by its weight in the round's mix times
    the stable's goodput there (measured), so a light load seen often cannot outvote a heavy one seen once.
    Each level has its own spread (shrunk towards the pooled one by LEVEL_PRIOR_DOF windows' worth), and the
    degrees of freedom of the weighted mean are Welch-Satterthwaite's: a heavy level seen in two windows
    counts with the doubt of two windows, not with that of every window of the canary.

    A canary's pods take their share of the traffic, so each pair ran lighter than the load the stable serves
    alone: it counts at that load's level, carried there by `projection` where that lowers it.

    `drafting`: where a batch-size schedule drafts as the other track does (`Drafting.identical`), the ratio
    is exactly 1 and the level counts as seen; its pairs measure only the noise (around a known mean of 0),
    which they lend to the pooled spread. Without it (method canaries) no level is identical.

    `noise_prior_sd`: the prior on the pairs' per-window spread (a switchback arm's is smaller than a
    canary's: `noise_prior`).
    """
    levels, counts = load_octaves(loads)
    same = np.array([drafting is not None and drafting.identical(float(level)) for level in levels])
    weights = counts / counts.sum()
    level_g = _level_goodput(stable, levels, weights, objective)
    ratios = _level_ratios(pairs, stable, levels, same)
    split = {"load_share": float(np.mean(ratios.shares)), "carry": float(np.mean(ratios.carries))} \
        if ratios.shares else {}
    seen = sorted(ratios.ys)
    known = float(level_g[same].sum() / level_g.sum()) if level_g.sum() > 0 else 0.0
    if not seen:
        # Nothing measured where the tracks differ (yet): the identical levels are known, the rest is unseen.
        unseen = 1.0 - known if same.any() else 1.0
        return Estimate(0.0, max(unseen * GAIN_PRIOR_SD, MIN_ESTIMATE_SD), LEVEL_PRIOR_DOF, known, unseen, **split)
    cover = _coverage(levels, same, ratios.ys, seen, level_g, known, _directions(levels, pairs, drafting))
    post_mean, post_sd, dof, total = _posterior(ratios, seen, cover, level_g, weights, counts.sum(), known,
                                                noise_prior_sd)
    return Estimate(post_mean, post_sd, dof, cover.covered, cover.unseen,
                    _downside(pairs, levels, level_g, cover.near, seen, same, drafting) / total, **split)


def _nearest_level(levels: np.ndarray, b: float) -> int:
    """Index of the load level nearest `b` (in log load)."""
    return int(np.argmin(np.abs(np.log(levels) - np.log(max(b, 1.0)))))


def _level_goodput(stable: Sequence[WindowRecord], levels: np.ndarray, weights: np.ndarray,
                   objective: str) -> np.ndarray:
    """Each level's weight in the objective: its share of the mix times the stable's goodput there
    (per-sequence speed; per-pod tokens for throughput)."""
    speed = np.zeros(len(levels))
    count = np.zeros(len(levels))
    for r in stable:
        if r.step_s:
            i = _nearest_level(levels, r.load)
            speed[i] += r.tokens_per_step / r.step_s
            count[i] += 1
    level_g = weights * np.where(count > 0, speed / np.maximum(count, 1), 0.0)
    if objective == "throughput":
        level_g = level_g * levels
    return level_g


@dataclass(frozen=True)
class LevelRatios:
    """The pairs' log goodput ratios by load level (where the tracks differ), the identical levels' noise,
    and each counted pair's load share and projection."""

    ys: dict[int, list[float]]
    noise: list[float]  # pairs at identical levels: their true log ratio is 0
    shares: list[float]
    carries: list[float]


def _level_ratios(pairs: Sequence[tuple[WindowRecord, WindowRecord]], stable: Sequence[WindowRecord],
                  levels: np.ndarray, same: np.ndarray) -> LevelRatios:
    """Each pair's log goodput ratio at the stable's load, by the level of the load the stable serves alone,
    carried there by `projection` where that lowers it."""
    ys: dict[int, list[float]] = {}
    noise: list[float] = []
    shares: list[float] = []
    carries: list[float] = []
    slope, slope_se = load_slope_fit(stable)
    # The projection trusts only the slope the stable's windows prove: per-window step-time noise over a
    # split of a quarter makes a flat step time read as a slope of 0.1 either way, and every N longer than
    # the stable's would pay for it.
    proven = max(0.0, slope - PROJECTION_SLOPE_Z * slope_se)
    for s, c in pairs:
        assert s.step_s and c.step_s  # paired() keeps windows with step times only
        i = _nearest_level(levels, s.mix_load)
        y = math.log(c.tokens_per_step / s.tokens_per_step) - math.log(c.step_s / s.step_s) \
            + slope * math.log(c.load / s.load)
        if same[i]:
            noise.append(y)
            continue
        carry = projection(s, c, proven)
        # The model may only hold a canary back, never carry it to a win: where a shorter N would gain at
        # the heavier load (what a cost linear in the verified tokens says) the gain is not counted (on an
        # MoE target the ratio of two N is not monotone in load).
        ys.setdefault(i, []).append(y + min(carry, 0.0))
        shares.append(s.load / s.mix_load)
        carries.append(carry)
    return LevelRatios(ys, noise, shares, carries)


@dataclass(frozen=True)
class Coverage:
    """Which level of the mix counts at which seen level, each seen level's weight, and the shares of the
    mix's goodput covered (LEVEL_WINDOWS pairs) and unseen (no pair near)."""

    near: dict[int, int]
    w: np.ndarray
    covered: float
    unseen: float


def _directions(levels: np.ndarray, pairs: Sequence[tuple[WindowRecord, WindowRecord]],
                drafting: Drafting | None) -> list[int]:
    """Per level, +1 where the canary drafts more tokens per step than the stable, -1 fewer, 0 as many: the
    schedule's K there (`Drafting.direction`), else the two tracks' N."""
    n_direction = int(np.sign(pairs[0][1].n - pairs[0][0].n)) if pairs else 0
    return [drafting.direction(float(b)) if drafting is not None else n_direction for b in levels]


def _coverage(levels: np.ndarray, same: np.ndarray, ys: dict[int, list[float]], seen: list[int],
              level_g: np.ndarray, known: float, directions: Sequence[int] = ()) -> Coverage:
    """A level no pair saw borrows the nearest level's pairs, when one is within an octave. A level with pairs
    of its own is estimated from them, however few (its spread then carries the doubt): a neighbour's pairs
    would hide that the canary wins at one load and loses at the next. It counts as covered once it, or a
    neighbour in reach, has LEVEL_WINDOWS pairs.

    Not on the side where speculating more pays less (`directions`): a level with no pair of its own, heavier
    than the one it would borrow from where the canary drafts more than the stable (lighter, where it drafts
    fewer), borrows nothing and stays unseen (`_downside` counts it) until a pair of its own comes: within an
    octave a compute-bound step's cost of a longer N can turn a gain into a loss (an n-gram N=1 +5% over 0
    at 4 sequences per pod, -16% at 8, was promoted on four pairs at 4)."""
    octave = np.log2(levels)
    enough = [j for j in seen if len(ys[j]) >= LEVEL_WINDOWS] or seen
    differ = [i for i in range(len(levels)) if not same[i]]
    nearest = {i: min(enough, key=lambda j: abs(octave[i] - octave[j])) for i in differ}
    in_reach = {i for i, j in nearest.items() if abs(octave[i] - octave[j]) <= 1.0 + OCTAVE_TOLERANCE}
    near = {i: (i if i in ys else nearest[i]) for i in differ
            if i in ys or (i in in_reach and not _beyond_risky(i, nearest[i], octave, directions))}
    w = np.array([sum(level_g[i] for i, j in near.items() if j == k) for k in seen])
    enough_near = {i for i in in_reach if len(ys[nearest[i]]) >= LEVEL_WINDOWS}
    seen_enough = sum(level_g[i] for i in near if len(ys.get(i, [])) >= LEVEL_WINDOWS or i in enough_near)
    covered = float(seen_enough / level_g.sum()) + known if level_g.sum() > 0 else 0.0
    unseen = 0.0  # share of the mix's goodput at loads no pair came near
    if w.sum() > 0:
        unseen = max(0.0, 1.0 - known - float(w.sum() / level_g.sum()))
        w = w / level_g.sum()
    else:
        w = np.full(len(seen), (1.0 - known) / len(seen))
    return Coverage(near, w, covered, unseen)


def _beyond_risky(i: int, j: int, octave: np.ndarray, directions: Sequence[int]) -> bool:
    """Level i lies past level j on the side where the canary's draft length pays less: heavier where it
    drafts more, lighter where it drafts fewer."""
    d = directions[i] if i < len(directions) else 0
    return (d > 0 and octave[i] > octave[j]) or (d < 0 and octave[i] < octave[j])


def _posterior(ratios: LevelRatios, seen: list[int], cover: Coverage, level_g: np.ndarray, weights: np.ndarray,
               windows: float, known: float, noise_prior_sd: float) -> tuple[float, float, float, float]:
    """(posterior mean, sd, degrees of freedom) of the log goodput ratio over the mix, and the ratio of the
    mix's goodput before the prior (`total`). Each level's spread is shrunk towards the pooled one; the
    ratio over the mix is the weighted mean of the levels' ratios, not of their logs (a canary 3.5x faster
    at a light level carrying 6% of the goodput and even at the heavy one is +15%, where the mean of logs
    says +8%); loads no pair came near count as no gain, give or take GAIN_PRIOR_SD."""
    ys, noise, w, unseen = ratios.ys, ratios.noise, cover.w, cover.unseen
    means = np.array([np.mean(ys[i]) for i in seen])
    n_l = np.array([len(ys[i]) for i in seen], dtype=float)
    ss_l = np.array([((np.array(ys[i]) - np.mean(ys[i])) ** 2).sum() for i in seen])
    noise_ss = float(np.square(noise).sum())
    pooled = (ss_l.sum() + noise_ss + JUDGE_NOISE_PRIOR_DOF * noise_prior_sd ** 2) \
        / (n_l.sum() - len(seen) + len(noise) + JUDGE_NOISE_PRIOR_DOF)
    dof_l = n_l - 1 + LEVEL_PRIOR_DOF
    var_l = (ss_l + LEVEL_PRIOR_DOF * pooled) / dof_l
    ratio = w * np.exp(means)
    total = float(ratio.sum()) + unseen + known
    terms = (ratio / total) ** 2 * var_l / n_l  # delta method: d log(total) / d mean_l = ratio_l / total
    se2 = float(terms.sum()) + (unseen * GAIN_PRIOR_SD) ** 2 + _mix_var(level_g, weights, windows, cover.near,
                                                                        seen, means, total)
    dof = se2 ** 2 / float((terms ** 2 / dof_l).sum())  # at least the smallest dof_l: LEVEL_PRIOR_DOF
    post_var = 1.0 / (1.0 / se2 + 1.0 / GAIN_PRIOR_SD ** 2)
    post_mean = math.log(total) / se2 * post_var
    return post_mean, math.sqrt(post_var), dof, total


def _downside(pairs: Sequence[tuple[WindowRecord, WindowRecord]], levels: np.ndarray, level_g: np.ndarray,
              near: dict[int, int], seen: list[int], same: np.ndarray, drafting: Drafting | None) -> float:
    """How much the goodput at loads no pair came near may lose, beyond the sceptical prior's doubt: a
    longer N than the stable's pays less the busier the pod (its extra tokens cost more of a step), so at
    loads heavier than every seen one it may lose however much it gained where it was seen, the more so
    the farther they are (a shorter N, at lighter loads). Under a batch-size schedule what counts is the K each track drafts at that
    load (`Drafting.direction`): a schedule that drafts no more than the stable at the heavy loads risks
    nothing there by drafting more at light ones."""
    n_direction = int(np.sign(pairs[0][1].n - pairs[0][0].n)) if pairs else 0
    if not pairs or not seen or level_g.sum() <= 0:
        return 0.0
    share = level_g / level_g.sum()
    octave = np.log2(levels)
    at = octave[seen]
    var = 0.0
    for i in range(len(level_g)):
        if i in near or same[i]:
            continue
        direction = drafting.direction(float(levels[i])) if drafting is not None else n_direction
        if not direction:
            continue
        beyond = (octave[i] - at.max()) if direction > 0 else (at.min() - octave[i])
        if beyond > 0:
            var += (share[i] * UNSEEN_DOWNSIDE_SD_PER_OCTAVE * beyond) ** 2
    return math.sqrt(var)


def _mix_var(level_g: np.ndarray, weights: np.ndarray, windows: float, near: dict[int, int], seen: list[int],
             means: np.ndarray, total: float) -> float:
    """Variance of log(total) from the load mix being known only through the windows that sampled it.

    The weights are a Dirichlet posterior over `windows` (pseudo-)windows. A canary that wins at one load
    and loses at another gains what the mix says, and a mix sampled by few windows can be far off. Delta method: with p_i the levels'
    goodput shares and r_i their ratios, Var(sum p_i r_i) = sum (p_i^2 / w_i) (r_i - R)^2 / (windows + 1).
    """
    if level_g.sum() <= 0:
        return 0.0
    share = level_g / level_g.sum()
    ratio = np.array([math.exp(means[seen.index(near[i])]) if i in near else 1.0 for i in range(len(level_g))])
    var = float((share ** 2 / weights * (ratio - total) ** 2).sum()) / (windows + 1.0)
    return var / total ** 2


def noise_prior(switchback: bool) -> float:
    """The prior on the paired windows' spread: a canary's pods serve other requests on other GPUs, a
    switchback arm the same pods' requests, seconds apart."""
    return SWITCHBACK_NOISE_PRIOR_SD if switchback else JUDGE_NOISE_PRIOR_SD


def judge(stable: Sequence[WindowRecord], canary: Sequence[WindowRecord], loads: Sequence[float], objective: str,
          margin: float, confidence: float, max_windows: int, carried: int = 0,
          drafting: Drafting | None = None, noise_prior_sd: float = JUDGE_NOISE_PRIOR_SD) -> Verdict:
    """Verdict on the canary from its paired analysis windows (measured goodput only). `stable` may hold the
    whole round's stable windows (they give each load level's goodput weight); pairs match by window.
    `carried`: how many of the pairs are an earlier canary's of the same N against the same stable (a retry,
    evidence.py); the window limits count the canary's own, and promotion spends half the error rate again
    over the pooled horizon, so the two canaries together promote a canary that is no better at most 1.5
    times as often as one. `drafting`: what each track drafts, load by load (`measured_gain`)."""
    pairs = paired(stable, canary)
    m = len(pairs) - carried
    if m < MIN_WINDOWS:
        return Verdict(Ruling.CONTINUE, 0.0, -math.inf, math.inf, m, "too few paired windows", carried)
    est = measured_gain(pairs, stable, loads, objective, drafting, noise_prior_sd)
    mu, covered = est.mean, est.covered
    # The lower bound is the promotion's (every look counted), the upper one the rollback's (one look). The
    # rollback does not count unseen loads as no gain: a canary may win most where it was not yet paired.
    promote_confidence = 1.0 - (1.0 - confidence) / 2.0 if carried else confidence
    z = promotion_z(promote_confidence, est.dof, carried + m, carried + EXTEND * max_windows)
    lo = mu - z * math.hypot(est.sd, est.downside)
    hi = mu + t_quantile(confidence, est.dof) * math.hypot(est.sd, est.unseen * UNSEEN_UPSIDE_SD)
    target = math.log1p(margin)
    gain, lower, upper = math.expm1(mu), math.expm1(lo), math.expm1(hi)
    verdict = partial(Verdict, gain=gain, lower=lower, upper=upper, windows=m, carried=carried)
    pooled = f" with {carried} carried windows" if carried else ""
    split = est.split_note()
    # A rollback need not wait for coverage: a level seen in a pair or two counts with that doubt, and one
    # never seen at its unseen upside (a canary far worse at every level seen need not wait for a rare one).
    if hi < target:
        return verdict(Ruling.ROLLBACK, reason=f"cannot beat stable by {margin:.0%} (measured {gain:+.1%}, "
                                               f"upper bound {upper:.1%}{pooled}{split})")
    if covered < COVERAGE and m < EXTEND * max_windows:
        return verdict(Ruling.CONTINUE, reason=f"waiting for loads carrying {1 - covered:.0%} of the goodput")
    if mu >= target and lo > 0:
        return verdict(Ruling.PROMOTE, reason=f"measured better by {gain:.1%} (lower bound {lower:.1%}{pooled}{split})")
    if m >= max_windows and mu > 0 and m < EXTEND * max_windows:
        return verdict(Ruling.CONTINUE, reason=f"promising: measured {gain:+.1%}, not proven yet")
    if m >= max_windows:
        unsure = f"; loads carrying {1 - covered:.0%} of the goodput seen too rarely" if covered < COVERAGE else ""
        return verdict(Ruling.ROLLBACK, inconclusive=True,
                       reason=f"inconclusive after {m} windows{pooled} (measured {gain:+.1%}{unsure}{split})")
    return verdict(Ruling.CONTINUE, reason="undecided")
