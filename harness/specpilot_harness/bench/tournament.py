"""`specpilot bench tournament`: choosing the method as well as N, on simulated head-to-heads.

A tournament is one target served under a load mix by several drafters (entries: one tuner-benchmark
profile per method, sharing the load mix, the noise and the target's step time at N = 0). The deployment
starts at `start` (a method and N); strategies:

- tuner: `specpilot.tuning.tournament.step` once per window (the controller's contract), with the other
  entries as `spec.tuning.alternatives` at their method's common N; its actions applied to the
  deployment (a method canary serves its entry's profile; a promotion moves the stable track to it);
- sweep: the source article's manual method, every method at every N as a canary (2 measured windows
  each), keep the best measured; not held to the canary budget;
- tune-n: stay with the starting method and tune its N (the N tuner alone).

Scored on the true goodput of what the stable track serves at the end against the oracle over every
(method, N); each promotion against the configuration it replaced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specpilot.api.models import Canary, Tuning
from specpilot.tuning import ActionKind, TunerState
from specpilot.tuning import tournament as tour
from specpilot.tuning import tournament_state as tour_state
from specpilot_harness.sim.profile import MAX_NAME, Profile, ProfileError, entry_label
from specpilot_runtime.speculative import METHODS, OFF

from .report import column_mean, markdown_tables
from .simulate import Deployment, Fleet
from .strategies import BASELINE_WINDOWS, MAX_CANARIES, MAX_WINDOWS, measure_canary

WINDOWS = 2 * MAX_WINDOWS  # a method round, then the winner's N round
# Targets the issue set (printed with the results).
TARGET_MEAN_REGRET_PCT = 1.0
TARGET_MEAN_CANARIES = 4.0
TARGET_WORST_PROMOTION_PCT = -0.5

Config = tuple[str, int]  # (method, N)


class Start(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    method: str
    n: int = Field(ge=0)


class TournamentProfile(BaseModel):
    """One tournament of the file; its entries become Profiles sharing its load mix and noise."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)
    name: str = Field(min_length=1, max_length=MAX_NAME)
    start: Start
    concurrency: dict[int, float] = Field(min_length=1)
    noise: float = Field(0.1, ge=0.0, lt=1.0)
    entries: list[Profile] = Field(min_length=2)
    family: str = ""

    @model_validator(mode="before")
    @classmethod
    def _shared(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
            return data
        shared = {k: data[k] for k in ("concurrency", "noise") if k in data}
        raw = data["entries"]
        start = data.get("start")
        # Starting without speculation needs no entry of its own: it is every entry's N = 0.
        if isinstance(start, dict) and start.get("method") == OFF \
                and not any(isinstance(e, dict) and e.get("method") == OFF for e in raw):
            raw = [*raw, {"method": OFF}]
        entries = [{"name": f"{data.get('name', 'tournament')}/{e.get('method')}", **_off_defaults(e, raw),
                    **e, **shared} if isinstance(e, dict) else e for e in raw]
        return {**data, "entries": entries}

    @model_validator(mode="after")
    def _start_is_an_entry(self) -> "TournamentProfile":
        methods = [e.method for e in self.entries]
        if len(set(methods)) != len(methods):
            raise ValueError(f"entries: one entry per method, got {methods}")
        if self.start.method not in methods:
            raise ValueError(f"start.method {self.start.method!r} is none of the entries' methods {methods}")
        if self.start.n > self.entry(self.start.method).max_n:
            raise ValueError(f"start.n {self.start.n} is above the {self.start.method} entry's max_n")
        return self

    def entry(self, method: str) -> Profile:
        return next(e for e in self.entries if e.method == method)

    def with_noise(self, noise: float) -> "TournamentProfile":
        """The same tournament on a machine whose per-window step-time noise is `noise` (checked by the caller)."""
        return self.model_copy(update={"noise": noise,
                                       "entries": [e.model_copy(update={"noise": noise}) for e in self.entries]})

    def ordered(self) -> list[Profile]:
        """The starting entry first (spec.speculative), then the others (spec.tuning.alternatives)."""
        return [self.entry(self.start.method)] + [e for e in self.entries if e.method != self.start.method]

    def goodput(self, config: Config) -> float:
        return self.entry(config[0]).goodput(config[1])

    def oracle(self) -> Config:
        return max(((e.method, n) for e in self.entries for n in range(e.max_n + 1)), key=self.goodput)


def _off_defaults(entry: dict[str, Any], entries: list[Any]) -> dict[str, Any]:
    """What an entry `{"method": "off"}` leaves out: no drafts, and the target's step time at N = 0, which the
    entries share (the first speculating entry's, row by row)."""
    if entry.get("method") != OFF:
        return {}
    times: dict[Any, Any] = next((e["step_time_ms"] for e in entries if isinstance(e, dict)
                                  and e.get("method") != OFF and isinstance(e.get("step_time_ms"), dict)), {})
    return {"max_n": 0, "survival": [],
            "step_time_ms": {b: row[:1] for b, row in times.items() if isinstance(row, list)}}


def load_tournaments(text: str, source: str = "tournaments") -> list[TournamentProfile]:
    """Parse a tournaments file; every error names the tournament and the field."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"{source}: not JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("tournaments"), list) or not doc["tournaments"]:
        raise ProfileError(f"{source}: expected an object with a non-empty 'tournaments' list")
    out = []
    for i, raw in enumerate(doc["tournaments"]):
        label = entry_label(raw, i)
        try:
            out.append(TournamentProfile.model_validate(raw))
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "tournament"
            raise ProfileError(f"{source}: tournaments[{i}] ({label}): {where}: {first['msg']}") from e
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise ProfileError(f"{source}: tournament names repeat")
    return out


@dataclass
class Run:
    chosen: Config
    canaries: int = 0
    promotions: list[tuple[Config, Config]] = field(default_factory=list)
    exploration_cost: float = 0.0


def contenders(t: TournamentProfile) -> list[tour_state.Contender]:
    """spec.speculative (the start) and the alternatives at their method's common N, candidates 0..max_n."""
    out = []
    for i, p in enumerate(t.ordered()):
        n = t.start.n if i == 0 else min(METHODS[p.method].default_n, p.max_n)
        out.append(tour_state.Contender(p.method, n, candidates=tuple(range(p.max_n + 1))))
    return out


def _deployment(t: TournamentProfile, seed: int, windows: int, fleet: Fleet = Fleet()) -> Deployment:
    return Deployment(t.entry(t.start.method), np.random.default_rng(seed), stable_n=t.start.n, horizon=windows,
                      stable_pods=fleet.stable_replicas, canary_mode=fleet.canary_mode)


def run_tuner(t: TournamentProfile, seed: int, windows: int = WINDOWS, fleet: Fleet = Fleet()) -> Run:
    dep = _deployment(t, seed, windows, fleet)
    cs = contenders(t)
    profiles = t.ordered()
    tuning = Tuning(enabled=True, confidence=fleet.confidence,
                    canary=Canary(analysis_window="5m", mode=fleet.canary_mode))
    state = tour_state.Tournament.new(cs, dep.now)
    inner = TunerState.new(cs[0].method, cs[0].n, now=dep.now)
    run = Run((t.start.method, t.start.n))
    budget = MAX_CANARIES * -(-windows // MAX_WINDOWS)
    for _ in range(windows):
        obs = dep.window()
        state, inner, action = tour.step(state, inner, tuning, cs, obs, dep.now)
        if action.kind == ActionKind.START_CANARY and action.n is not None:
            if run.canaries >= budget:
                break
            run.canaries += 1
        before = (dep.profile.method, dep.stable_n)
        dep.apply(action, profiles[action.contender] if action.contender is not None else None)
        if action.kind == ActionKind.PROMOTE and action.n is not None:
            run.promotions.append((before, (dep.profile.method, dep.stable_n)))
    while len(dep.costs) < dep.horizon:
        dep.window()
    run.chosen = (dep.profile.method, dep.stable_n)
    run.exploration_cost = dep.exploration_cost()
    return run


def run_sweep(t: TournamentProfile, seed: int, windows: int = WINDOWS, fleet: Fleet = Fleet()) -> Run:
    """Every (method, N) but the start as a canary, in order; keep the best measured."""
    dep = _deployment(t, seed, windows, fleet)
    start = (t.start.method, t.start.n)
    best, best_ratio = start, 1.0
    run = Run(start)
    for p in t.ordered():
        for n in range(p.max_n + 1):
            if (p.method, n) == start:
                continue
            ratio = measure_canary(dep, n, BASELINE_WINDOWS, p)
            if ratio is None:
                break
            run.canaries += 1
            if ratio > best_ratio:
                best, best_ratio = (p.method, n), ratio
    dep.promote(best[1], profile=t.entry(best[0]))
    while len(dep.costs) < dep.horizon:
        dep.window()
    run.chosen = best
    run.promotions = [(start, best)] if best != start else []
    run.exploration_cost = dep.exploration_cost()
    return run


def run_tune_n(t: TournamentProfile, seed: int, windows: int = WINDOWS, fleet: Fleet = Fleet()) -> Run:
    """The N tuner alone on the starting method."""
    return run_tuner(t.model_copy(update={"entries": [t.entry(t.start.method)]}), seed, windows, fleet)


STRATEGIES: dict[str, Callable[[TournamentProfile, int, int, Fleet], Run]] = {
    "tuner": run_tuner, "sweep": run_sweep, "tune-n": run_tune_n}


def row(t: TournamentProfile, seed: int, run: Run) -> dict[str, Any]:
    oracle = t.oracle()
    best = t.goodput(oracle)
    worst = min((t.goodput(b) / t.goodput(a) - 1.0 for a, b in run.promotions), default=0.0)
    return {"name": t.name, "seed": seed, "family": t.family, "chosen_method": run.chosen[0],
            "chosen_n": run.chosen[1], "canaries": run.canaries,
            "promotions": [{"from": list(a), "to": list(b)} for a, b in run.promotions],
            "oracle_method": oracle[0], "oracle_n": oracle[1],
            "regret_pct": round(100 * max(0.0, 1.0 - t.goodput(run.chosen) / best), 3),
            "worst_promotion_pct": round(100 * worst, 3),
            "exploration_cost_pct": round(100 * run.exploration_cost, 3)}


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    n = max(len(rows), 1)
    return {"mean_regret_pct": round(sum(r["regret_pct"] for r in rows) / n, 3),
            "max_regret_pct": round(max((r["regret_pct"] for r in rows), default=0.0), 3),
            "mean_canaries": round(sum(r["canaries"] for r in rows) / n, 3),
            "worst_promotion_pct": round(min((r["worst_promotion_pct"] for r in rows), default=0.0), 3),
            "mean_exploration_cost_pct": round(sum(r["exploration_cost_pct"] for r in rows) / n, 3)}


def run_all(tournaments: Sequence[TournamentProfile], seeds: int, progress: Callable[[str], None],
            windows: int = WINDOWS, fleet: Fleet = Fleet()) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in STRATEGIES}
    for i, t in enumerate(tournaments, 1):
        for seed in range(seeds):
            for name, fn in STRATEGIES.items():
                rows[name].append(row(t, seed, fn(t, seed, windows, fleet)))
            r = rows["tuner"][-1]
            progress(f"[{i}/{len(tournaments)}] {t.name} seed {seed}: tuner {r['chosen_method']} N={r['chosen_n']} "
                     f"(oracle {r['oracle_method']} N={r['oracle_n']}, regret {r['regret_pct']:.2f}%, "
                     f"{r['canaries']} canaries)")
    return {"results": rows["tuner"], "baselines": {k: v for k, v in rows.items() if k != "tuner"},
            "summary": {k: summary(v) for k, v in rows.items()},
            "targets": {"mean_regret_pct": TARGET_MEAN_REGRET_PCT, "mean_canaries": TARGET_MEAN_CANARIES,
                        "worst_promotion_pct": TARGET_WORST_PROMOTION_PCT}}


def tournament_rows(res: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per tournament, means over seeds: the same cells for rich and Markdown."""
    strategies = ["tuner", *res["baselines"]]
    rows = {"tuner": res["results"], **res["baselines"]}
    header = ["tournament", "oracle", "tuner chose", *(f"{s} regret %" for s in strategies), "tuner canaries"]
    out = []
    for name in dict.fromkeys(r["name"] for r in res["results"]):
        mine = {s: [r for r in rows[s] if r["name"] == name] for s in strategies}
        chose = sorted({f"{r['chosen_method']} {r['chosen_n']}" for r in mine["tuner"]})
        first = mine["tuner"][0]
        out.append([name, f"{first['oracle_method']} {first['oracle_n']}", ", ".join(chose),
                    *(f"{column_mean(mine[s], 'regret_pct'):.2f}" for s in strategies),
                    f"{column_mean(mine['tuner'], 'canaries'):.1f}"])
    return header, out


def family_rows(res: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per cost-shape family of generated tournaments (none for files without families), then all."""
    header = ["family", "tournaments", "tuner mean regret %", "tuner max regret %", "canaries",
              "worst promotion %", "sweep mean regret %", "sweep canaries", "tune-n mean regret %"]
    fams = list(dict.fromkeys(r["family"] for r in res["results"] if r["family"]))
    out = []
    for f in fams + ["all"]:
        pick = lambda rows: [r for r in rows if f == "all" or r["family"] == f]  # noqa: E731
        t, sw, tn = pick(res["results"]), pick(res["baselines"]["sweep"]), pick(res["baselines"]["tune-n"])
        out.append([f, str(len({r["name"] for r in t})), f"{column_mean(t, 'regret_pct'):.2f}",
                    f"{max(r['regret_pct'] for r in t):.2f}", f"{column_mean(t, 'canaries'):.2f}",
                    f"{min(r['worst_promotion_pct'] for r in t):+.2f}", f"{column_mean(sw, 'regret_pct'):.2f}",
                    f"{column_mean(sw, 'canaries'):.1f}", f"{column_mean(tn, 'regret_pct'):.2f}"])
    return header, out if fams else []


def markdown(res: dict[str, Any]) -> str:
    return "\n".join(markdown_tables((tournament_rows(res), family_rows(res))))
