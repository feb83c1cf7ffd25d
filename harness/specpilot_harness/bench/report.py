"""Benchmark results: rows in the documented JSON shape, per-strategy summaries, and the tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from specpilot_harness.sim.profile import Profile

from .strategies import BASELINES, Run, run_tuner

STRATEGIES: dict[str, Callable[[Profile, int], Run]] = {"tuner": run_tuner, **BASELINES}


def row(profile: Profile, seed: int, run: Run) -> dict[str, Any]:
    oracle = profile.oracle_n()
    regret = 1.0 - profile.goodput(run.chosen_n) / profile.goodput(oracle)
    return {"name": profile.name, "seed": seed, "chosen_n": run.chosen_n, "canaries": len(run.tried),
            "tried": list(run.tried), "oracle_n": oracle, "regret_pct": round(100 * regret, 3),
            "exploration_cost_pct": round(100 * run.exploration_cost, 3), "family": profile.family,
            "promotions": [{"from": a, "to": b} for a, b in run.promotions],
            "worst_promotion_pct": round(100 * worst_promotion(profile, run), 3)}


def worst_promotion(profile: Profile, run: Run) -> float:
    """Relative goodput change of the worst promotion in the run (0 when none)."""
    return min((profile.goodput(b) / profile.goodput(a) - 1.0 for a, b in run.promotions), default=0.0)


def schedule_row(profile: Profile, seed: int, run: Run) -> dict[str, Any] | None:
    """The tuner's schedule proposal, scored on the profile's true goodput against the best single N."""
    if not run.schedule:
        return None
    entries = run.schedule["num_speculative_tokens_per_batch_size"]

    def n_at(load: int) -> int:
        return next((n for lo, hi, n in entries if lo <= load <= hi), entries[-1][2])

    sched = sum(w * profile.goodput_at(n_at(b), b) for b, w in profile.concurrency.items())
    best = profile.goodput(profile.oracle_n())
    return {"name": profile.name, "seed": seed, "proposal": run.schedule,
            "true_gain_pct": round(100 * (sched / best - 1.0), 3)}


@dataclass
class Results:
    results: list[dict[str, Any]]
    baselines: dict[str, list[dict[str, Any]]]
    schedule: list[dict[str, Any]]
    worst_promotion_pct: dict[str, float]

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for name, rows in (("tuner", self.results), *self.baselines.items()):
            n = max(len(rows), 1)
            out[name] = {"mean_regret_pct": round(sum(r["regret_pct"] for r in rows) / n, 3),
                         "max_regret_pct": round(max((r["regret_pct"] for r in rows), default=0.0), 3),
                         "mean_canaries": round(sum(r["canaries"] for r in rows) / n, 3),
                         "mean_exploration_cost_pct": round(sum(r["exploration_cost_pct"] for r in rows) / n, 3),
                         "worst_promotion_pct": self.worst_promotion_pct[name]}
        return out

    def to_json(self) -> dict[str, Any]:
        return {"results": self.results, "baselines": self.baselines, "schedule": self.schedule,
                "summary": self.summary()}


def run_all(profiles: Sequence[Profile], seeds: int, progress: Callable[[str], None]) -> Results:
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in STRATEGIES}
    worst = {k: 0.0 for k in STRATEGIES}
    sched: list[dict[str, Any]] = []
    for i, p in enumerate(profiles, 1):
        for seed in range(seeds):
            for name, fn in STRATEGIES.items():
                run = fn(p, seed)
                rows[name].append(row(p, seed, run))
                worst[name] = min(worst[name], round(100 * worst_promotion(p, run), 3))
                if name == "tuner" and (s := schedule_row(p, seed, run)):
                    sched.append(s)
            t = rows["tuner"][-1]
            progress(f"[{i}/{len(profiles)}] {p.name} seed {seed}: tuner N={t['chosen_n']} "
                     f"(oracle {t['oracle_n']}, regret {t['regret_pct']:.2f}%, {t['canaries']} canaries)")
    return Results(rows.pop("tuner"), rows, sched, worst)


def _mean(rows: Iterable[dict[str, Any]], key: str) -> float:
    vals = [r[key] for r in rows]
    return sum(vals) / max(len(vals), 1)


def table_rows(res: Results) -> tuple[list[str], list[list[str]]]:
    """Per-profile means over seeds, then the overall mean: the same cells for rich and Markdown."""
    header = ["profile", "oracle N", "tuner N", "regret %", "canaries", "explore %",
              "sweep regret %", "sweep canaries", "hill-climb regret %", "hill-climb canaries",
              "default regret %"]
    names = list(dict.fromkeys(r["name"] for r in res.results))
    by = lambda rows, n: [r for r in rows if r["name"] == n]  # noqa: E731 - rows of one profile

    def cells(sel: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], label: str, oracle: str,
              chosen: str) -> list[str]:
        t = sel(res.results)
        sw, hc, df = (sel(res.baselines[k]) for k in ("sweep", "hill-climb", "default"))
        return [label, oracle, chosen, f"{_mean(t, 'regret_pct'):.2f}", f"{_mean(t, 'canaries'):.1f}",
                f"{_mean(t, 'exploration_cost_pct'):.2f}", f"{_mean(sw, 'regret_pct'):.2f}",
                f"{_mean(sw, 'canaries'):.1f}", f"{_mean(hc, 'regret_pct'):.2f}", f"{_mean(hc, 'canaries'):.1f}",
                f"{_mean(df, 'regret_pct'):.2f}"]

    out = []
    for n in names:
        t = by(res.results, n)
        chosen = "/".join(str(c) for c in sorted({r["chosen_n"] for r in t}))
        out.append(cells(lambda rows, n=n: by(rows, n), n, str(t[0]["oracle_n"]), chosen))
    out.append(cells(lambda rows: rows, "mean", "", ""))
    return header, out


def family_rows(res: Results) -> tuple[list[str], list[list[str]]]:
    """Per cost-shape family (generated profiles): the tuner's numbers against the baselines' regret."""
    header = ["family", "profiles", "tuner mean regret %", "tuner max regret %", "canaries",
              "worst promotion %", "sweep mean regret %", "hill-climb mean regret %", "default mean regret %"]
    fams = list(dict.fromkeys(r["family"] for r in res.results if r["family"]))
    out = []
    for f in fams + ["all"]:
        pick = lambda rows: [r for r in rows if f == "all" or r["family"] == f]  # noqa: E731
        t = pick(res.results)
        out.append([f, str(len({r["name"] for r in t})), f"{_mean(t, 'regret_pct'):.2f}",
                    f"{max(r['regret_pct'] for r in t):.2f}", f"{_mean(t, 'canaries'):.2f}",
                    f"{min(r['worst_promotion_pct'] for r in t):+.2f}",
                    *(f"{_mean(pick(res.baselines[k]), 'regret_pct'):.2f}" for k in ("sweep", "hill-climb", "default"))])
    return header, out if fams else []


def markdown(res: Results) -> str:
    lines = []
    for header, rows in (table_rows(res), family_rows(res)):
        if rows:
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    return "\n".join(lines)
