"""Method tournaments in the demo (pure): `specpilot demo --profile <tournament>` for any head-to-head of
`harness/specpilot_harness/bench/profiles/tournaments-article.json` (bench/tournament.py).

The SpeculativeDeployment starts at the tournament's start (method and N) with the other entries as
`spec.tuning.alternatives`, each at its method's default N (capped at what its profile serves) with its
own candidates 0..its profile's largest N; the simulated engines serve the entry of whichever method a pod
runs (`specpilot.io/sim-profile` names the start's entry, `specpilot.io/sim-profile-<method>` the others',
"<tournament>/<method>"). The operator canaries no speculation and each untried method, promotes what its
paired judge measures better and tunes the stable method's N; the demo ends when nothing is left untried,
no canary runs and the N tuner has converged (`finished`).

The truth is the tournament's entries: goodput per pod against N per method, either at the mean load a
stable pod served (one load level: step times are flat around it, so the best (method, N) is the
tournament's oracle) or over the tournament's load mix (several levels, whose load moves). The summary
scores the winner against `TournamentProfile.oracle()`, the best (method, N) over the tournament's mix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from specpilot.tuning import Phase
from specpilot_harness.bench.tournament import TournamentProfile, load_tournaments
from specpilot_harness.sandbox.sim_pods import ARTICLE_TOURNAMENTS
from specpilot_harness.sim.launch import SIM_PROFILE_ANNOTATION
from specpilot_harness.sim.profile import Profile
from specpilot_runtime.speculative import METHODS, Family, max_n

from . import readings

TOURNAMENT_FILES: tuple[Path, ...] = (ARTICLE_TOURNAMENTS,)
BLOCK_SIZE = 16  # the draft block of the article's DFlash and DSpark checkpoints (b16)
OPEN_ROLES = ("untried", "canary")  # a tournament with one of these is still running


def read_tournaments(files: Sequence[Path] = TOURNAMENT_FILES) -> dict[str, TournamentProfile]:
    """Every tournament of `files` by name; a name found in an earlier file wins."""
    out: dict[str, TournamentProfile] = {}
    for path in reversed(tuple(files)):
        out.update({t.name: t for t in load_tournaments(path.read_text(encoding="utf-8"), str(path))})
    return out


def find_tournament(name: str, files: Sequence[Path] = TOURNAMENT_FILES) -> TournamentProfile | None:
    return read_tournaments(files).get(name)


def block_size(method: str) -> int | None:
    """The draft block of a block drafter (dflash, dspark); None for the others."""
    return BLOCK_SIZE if METHODS[method].block_bound is not None else None


def top_n(profile: Profile) -> int:
    """The largest N the entry serves that vLLM runs for its method (and block)."""
    return min(profile.max_n, max_n(profile.method, block_size(profile.method)))


def start_ns(t: TournamentProfile) -> list[tuple[Profile, int]]:
    """Contenders in spec order (the start, then the alternatives) with the N each runs first: the start's
    N, else its method's default N (capped), as bench/tournament.py's `contenders` runs them."""
    return [(p, t.start.n if i == 0 else min(METHODS[p.method].default_n, top_n(p)))
            for i, p in enumerate(t.ordered())]


def speculative(profile: Profile, n: int) -> dict[str, Any]:
    """spec.speculative (or an alternative) for an entry: a fake draft checkpoint where the method takes one
    (simulated: never downloaded), block size 16 for block drafters."""
    rule = METHODS[profile.method]
    out: dict[str, Any] = {"method": profile.method, "numSpeculativeTokens": n}
    if rule.draft_model == "required" or (rule.draft_model == "optional" and rule.family is Family.PARALLEL):
        out["draftModel"] = f"example/{profile.method}-draft"
    if block_size(profile.method) is not None:
        out["blockSize"] = block_size(profile.method)
    return out


def alternatives(t: TournamentProfile) -> list[dict[str, Any]]:
    """spec.tuning.alternatives: every entry but the start's, at its first N, candidates 0..its top N."""
    return [{**speculative(p, n), "candidates": list(range(top_n(p) + 1))} for p, n in start_ns(t)[1:]]


def sim_profile_annotations(t: TournamentProfile) -> dict[str, str]:
    """The simulated engines' profile per method: the start's entry, and `-<method>` for the others."""
    first, *others = t.ordered()
    return {SIM_PROFILE_ANNOTATION: first.name, **{f"{SIM_PROFILE_ANNOTATION}-{p.method}": p.name for p in others}}


def finished(status: dict[str, Any]) -> bool:
    """The tournament is over: every contender measured, no canary (method or N) running, no stage under
    way, and the stable method's N tuner converged at least a window ago (a loser's second canary is
    decided in the windows after the N tuner converges)."""
    tour = status.get("tournament") or {}
    standings = tour.get("standings") or []
    tuning = status.get("tuning") or {}
    seq, converged_seq = tuning.get("seq"), tuning.get("convergedSeq")
    if not standings or tuning.get("phase") != Phase.CONVERGED \
            or not (isinstance(seq, int) and isinstance(converged_seq, int) and seq > converged_seq):
        return False
    return tour.get("canary") is None and tour.get("stage", "idle") == "idle" \
        and not any(r.get("role") in OPEN_ROLES for r in standings)


def stable_index(status: dict[str, Any]) -> int:
    stable = (status.get("tournament") or {}).get("stable")
    return stable if isinstance(stable, int) and not isinstance(stable, bool) else 0


def stable_profile(status: dict[str, Any], t: TournamentProfile) -> Profile:
    """The entry the stable track serves now."""
    entries = t.ordered()
    i = stable_index(status)
    return entries[i] if 0 <= i < len(entries) else entries[0]


def chosen(status: dict[str, Any], t: TournamentProfile) -> tuple[str, int]:
    """(method, N) the stable track serves."""
    n = (status.get("tuning") or {}).get("stableN")
    return stable_profile(status, t).method, int(t.start.n if n is None else n)


def method_of(t: TournamentProfile, contender: Any) -> str | None:
    entries = t.ordered()
    return entries[contender].method if isinstance(contender, int) and 0 <= contender < len(entries) else None


def truth(t: TournamentProfile, tuning: dict[str, Any], mixed: bool) -> dict[str, dict[int, float]]:
    """Goodput per pod (tokens/s, engine clock) per method and N: at the stable pods' mean load (exactly, as
    the tuner measured it), or over the tournament's load mix when it has several levels."""
    if mixed:
        return {p.method: {n: 1000 * p.goodput(n) for n in range(p.max_n + 1)} for p in t.ordered()}
    load = readings.reference_load(tuning)
    return {p.method: readings.truth(p, load, exact=True) for p in t.ordered()}


def truth_label(tuning: dict[str, Any], mixed: bool) -> str:
    if mixed:
        return "over the tournament's load mix"
    return f"at {readings.reference_load(tuning):.1f} sequences per pod"


def best(values: dict[str, dict[int, float]]) -> tuple[str, int]:
    return max(((m, n) for m, by_n in values.items() for n in by_n), key=lambda c: values[c[0]][c[1]])


def canaries(history: Sequence[dict[str, Any]], t: TournamentProfile) -> list[str]:
    """Every canary started, as "dflash N=7" (a method canary) or "N=5" (the stable method's N tuner)."""
    return [describe(h, t) for h in history if h.get("action") == "start_canary"]


def describe(entry: dict[str, Any], t: TournamentProfile) -> str:
    method = method_of(t, entry.get("contender"))
    return (f"{method} " if method else "") + f"N={entry.get('n')}"
