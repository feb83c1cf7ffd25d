"""Benchmark results: rows in the documented JSON shape, per-strategy summaries, and the tables.

A run is scored on what its stable track serves at the end: N (`chosen_n`, the started N) and, in schedule
mode, a batch-size schedule (`schedule`, [lo, hi, K] rows; K = `schedule_k(schedule, N, B)` at B sequences
per pod). Against two oracles from the profile's true goodput:
- the best single N (`oracle_n`): `regret_pct` (0 when the served configuration is at least as good) and
  `vs_single_pct` (signed: a schedule may beat it);
- the per-load oracle: at each load level the best K <= max_n, over the load mix (`oracle_k_by_load`,
  `oracle_gain_pct`). It is the best configuration a schedule can serve: for a drafter whose curve does
  not depend on N it is each level's best K on its own; where the curve depends on N (parallel drafters'
  `survival_by_n`), vLLM drafts the started N and truncates, so the levels' K are chosen together with
  the started N they run under (`oracle_started_n`). On a mixed-load profile (per-load oracle at least
  MIN_ORACLE_GAIN above the best single N) `oracle_gain_share` is the share of that gain the served
  configuration reaches (1 = all of it, 0 = the best single N, negative = below it).
Both oracles are static configurations and pay no batch-size table's cost (`Profile.table_cost`); a served
configuration under a table (a schedule, or a switchback pod's table: `Deployment.stable_table`, `Run.table`)
pays it, so a tuner that keeps a costly table shows regret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from specpilot.api.models import TuningMode
from specpilot_harness.sim.profile import Profile
from specpilot_runtime.speculative import METHODS, Family, schedule_k

from .simulate import Fleet, served_goodput_at
from .strategies import BASELINES, MAX_WINDOWS, Run, run_tuner

STRATEGIES: dict[str, Callable[..., Run]] = {"tuner": run_tuner, **BASELINES}

# A profile counts as mixed-load (its runs get an oracle_gain_share) when serving the best K per load level
# beats the best single N by at least this much; below it the share would divide noise by almost nothing.
MIN_ORACLE_GAIN = 0.005
# Targets for mixed loads (printed with the report): the mean share of the per-load oracle's gain over the
# best single N that the served configuration reaches, and the worst run against the best single N.
TARGET_GAIN_SHARE = 0.95
TARGET_VS_SINGLE_PCT = -0.5


def served_goodput(profile: Profile, n: int, schedule: list[list[int]] | None = None,
                   table: bool | None = None) -> float:
    """True goodput over the load mix of N (under a batch-size schedule: K by load, as vLLM serves it).
    `table`: the pods carry a batch-size table and pay its cost (`Profile.table_cost`) at every load; None:
    exactly when there is a schedule."""
    table = bool(schedule) if table is None else table
    if not schedule:
        return profile.goodput(n) / (1.0 + profile.table_cost if table else 1.0)
    return sum(w * served_goodput_at(profile, n, schedule_k(schedule, n, b), b, table)
               for b, w in profile.concurrency.items())


def per_load_oracle(profile: Profile) -> tuple[dict[int, int], float]:
    """The best K <= max_n at every load level of the profile, and their goodput over the load mix."""
    ks, g, _ = per_load_oracle_started(profile)
    return ks, g


def per_load_oracle_started(profile: Profile) -> tuple[dict[int, int], float, int]:
    """The per-load oracle with the started N it runs under: for every started N the best K <= N per load
    level (acceptance: the curve at N cut to K), and the started N whose mix goodput is highest (the
    smallest on a tie). Without N-dependent curves: each level's best K, started at the largest."""
    best: tuple[dict[int, int], float, int] | None = None
    for n in range(profile.max_n + 1):
        ks = {b: max(range(n + 1), key=lambda k: served_goodput_at(profile, n, k, b))
              for b in sorted(profile.concurrency)}
        g = sum(w * served_goodput_at(profile, n, ks[b], b) for b, w in profile.concurrency.items())
        if best is None or g > best[1] * (1 + 1e-12):  # a larger N that only ties is not better
            best = (ks, g, n)
    assert best is not None
    return best


def oracle_gain(profile: Profile) -> float:
    """Per-load oracle over the best single N, minus 1."""
    return per_load_oracle(profile)[1] / profile.goodput(profile.oracle_n()) - 1.0


def row(profile: Profile, seed: int, run: Run) -> dict[str, Any]:
    oracle = profile.oracle_n()
    single = profile.goodput(oracle)
    served = served_goodput(profile, *run.served_config(), table=run.table)
    ks, g_load, started = per_load_oracle_started(profile)
    share = (served - single) / (g_load - single) if g_load / single - 1.0 >= MIN_ORACLE_GAIN else None
    return {"name": profile.name, "seed": seed, "method": profile.method, "chosen_n": run.chosen_n,
            "schedule": [list(r) for r in run.schedule] if run.schedule else None,
            "restarts": run.restarts, "canaries": len(run.tried), "tried": list(run.tried), "schedule_canaries": run.schedule_canaries,
            "oracle_n": oracle,
            "regret_pct": round(100 * max(0.0, 1.0 - served / single), 3),
            "vs_single_pct": round(100 * (served / single - 1.0), 3),
            "oracle_k_by_load": {str(b): k for b, k in ks.items()}, "oracle_started_n": started,
            "oracle_gain_pct": round(100 * (g_load / single - 1.0), 3),
            "oracle_gain_share": None if share is None else round(share, 4),
            "exploration_cost_pct": round(100 * run.exploration_cost, 3), "family": profile.family,
            "promotions": [{"from": a, "to": b, "schedule": sb}
                           for (a, _), (b, sb) in run.promotion_configs()],
            "worst_promotion_pct": round(100 * worst_promotion(profile, run), 3)}


def worst_promotion(profile: Profile, run: Run) -> float:
    """Relative goodput change of the worst promotion in the run (0 when none): each served configuration
    (N and schedule) against the one it replaced."""
    return min((served_goodput(profile, *after) / served_goodput(profile, *before) - 1.0
                for before, after in run.promotion_configs()), default=0.0)


def schedule_row(profile: Profile, seed: int, run: Run) -> dict[str, Any] | None:
    """The tuner's last schedule proposal, scored on the profile's true goodput against the best single N."""
    if not run.proposal:
        return None
    entries = run.proposal["num_speculative_tokens_per_batch_size"]

    started = run.proposal.get("num_speculative_tokens", max(k for _, _, k in entries))
    sched = served_goodput(profile, started, entries)
    best = profile.goodput(profile.oracle_n())
    return {"name": profile.name, "seed": seed, "proposal": run.proposal,
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
                         "mean_restarts": round(sum(r["restarts"] for r in rows) / n, 3),
                         "max_restarts": max((r["restarts"] for r in rows), default=0),
                         "mean_exploration_cost_pct": round(sum(r["exploration_cost_pct"] for r in rows) / n, 3),
                         "worst_promotion_pct": self.worst_promotion_pct[name]}
        return out

    def mixed_summary(self) -> dict[str, Any]:
        """Mixed-load runs (those with an oracle_gain_share) per strategy, with the targets."""
        out: dict[str, Any] = {"targets": {"mean_oracle_gain_share": TARGET_GAIN_SHARE,
                                           "worst_vs_single_pct": TARGET_VS_SINGLE_PCT}}
        for name, rows in (("tuner", self.results), *self.baselines.items()):
            m = [r for r in rows if r["oracle_gain_share"] is not None]
            if not m:
                continue
            shares = [r["oracle_gain_share"] for r in m]
            vs = [r["vs_single_pct"] for r in m]
            out[name] = {"runs": len(m), "profiles": len({r["name"] for r in m}),
                         "runs_serving_schedule": sum(r["schedule"] is not None for r in m),
                         "mean_oracle_gain_share": round(sum(shares) / len(m), 4),
                         "min_oracle_gain_share": round(min(shares), 4),
                         "mean_vs_single_pct": round(sum(vs) / len(m), 3),
                         "worst_vs_single_pct": round(min(vs), 3),
                         "mean_oracle_gain_pct": round(column_mean(m, "oracle_gain_pct"), 3),
                         # Pooled: the runs' summed gain over the best single N over the oracles' summed gain.
                         "pooled_oracle_gain_share": round(sum(vs) / sum(r["oracle_gain_pct"] for r in m), 4)}
        return out

    def to_json(self) -> dict[str, Any]:
        return {"results": self.results, "baselines": self.baselines, "schedule": self.schedule,
                "summary": self.summary(), "mixed": self.mixed_summary()}


def run_all(profiles: Sequence[Profile], seeds: int, progress: Callable[[str], None],
            windows: int = MAX_WINDOWS, mode: TuningMode = "single",
            fleet: Fleet = Fleet(), tuned: dict[str, Callable[..., Run]] | None = None) -> Results:
    """Every strategy on every profile and seed; the tuner in `mode` (schedule: it may serve a batch-size
    schedule), on deployments run as `fleet` says. `tuned`: more strategies that run the tuner's machine
    in `mode` (the floor), reported beside the baselines."""
    with_mode: dict[str, Callable[..., Run]] = {"tuner": run_tuner, **(tuned or {})}
    strategies = {**STRATEGIES, **with_mode}
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in strategies}
    worst = {k: 0.0 for k in strategies}
    sched: list[dict[str, Any]] = []
    for i, p in enumerate(profiles, 1):
        for seed in range(seeds):
            for name, fn in strategies.items():
                run = fn(p, seed, windows, mode, fleet) if name in with_mode else fn(p, seed, windows, fleet)
                rows[name].append(row(p, seed, run))
                worst[name] = min(worst[name], round(100 * worst_promotion(p, run), 3))
                if name == "tuner" and (s := schedule_row(p, seed, run)):
                    sched.append(s)
            t = rows["tuner"][-1]
            served = schedule_text(t["chosen_n"], t["schedule"])
            progress(f"[{i}/{len(profiles)}] {p.name} seed {seed}: tuner N={served} "
                     f"(oracle {t['oracle_n']}, regret {t['regret_pct']:.2f}%, {t['canaries']} canaries)")
    return Results(rows.pop("tuner"), rows, sched, worst)


def column_mean(rows: Iterable[dict[str, Any]], key: str) -> float:
    """Mean of one field over result rows (0 for none): the tables' cells."""
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
        return [label, oracle, chosen, f"{column_mean(t, 'regret_pct'):.2f}",
                f"{column_mean(t, 'canaries'):.1f}", f"{column_mean(t, 'exploration_cost_pct'):.2f}",
                f"{column_mean(sw, 'regret_pct'):.2f}", f"{column_mean(sw, 'canaries'):.1f}",
                f"{column_mean(hc, 'regret_pct'):.2f}", f"{column_mean(hc, 'canaries'):.1f}",
                f"{column_mean(df, 'regret_pct'):.2f}"]

    out = []
    for n in names:
        t = by(res.results, n)
        chosen = "/".join(str(c) for c in sorted({r["chosen_n"] for r in t}))
        out.append(cells(lambda rows: by(rows, n), n, str(t[0]["oracle_n"]), chosen))
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
        out.append([f, str(len({r["name"] for r in t})), f"{column_mean(t, 'regret_pct'):.2f}",
                    f"{max(r['regret_pct'] for r in t):.2f}", f"{column_mean(t, 'canaries'):.2f}",
                    f"{min(r['worst_promotion_pct'] for r in t):+.2f}",
                    *(f"{column_mean(pick(res.baselines[k]), 'regret_pct'):.2f}"
                      for k in ("sweep", "hill-climb", "default"))])
    return header, out if fams else []


def drafter_rows(res: Results) -> tuple[list[str], list[list[str]]]:
    """Per drafter family: switchback measures chain and lookup drafters live, parallel ones by canary."""
    header = ["drafter family", "runs", "tuner mean regret %", "tuner max regret %", "restarts per run",
              "max restarts", "worst promotion %"]
    out = []
    for fam in (*Family, None):
        t = [r for r in res.results if fam is None or METHODS[r["method"]].family == fam]
        if t:
            out.append([fam.value if fam else "all", str(len(t)), f"{column_mean(t, 'regret_pct'):.2f}",
                        f"{max(r['regret_pct'] for r in t):.2f}", f"{column_mean(t, 'restarts'):.2f}",
                        str(max(r["restarts"] for r in t)), f"{min(r['worst_promotion_pct'] for r in t):+.2f}"])
    return header, out


def schedule_text(n: int, schedule: list[list[int]] | None) -> str:
    """A served configuration in one short cell: "7" or "7 [1-8:7 9-64:4 65+:2]"."""
    if not schedule:
        return str(n)
    parts = [f"{lo}-{hi}:{k}" for lo, hi, k in schedule[:-1]] + [f"{schedule[-1][0]}+:{schedule[-1][2]}"]
    return f"{n} [{' '.join(parts)}]"


def mixed_rows(res: Results) -> tuple[list[str], list[list[str]]]:
    """Mixed-load profiles: the served configuration against the best single N and the per-load oracle."""
    header = ["profile", "best single N", "per-load oracle K (load:K)", "oracle gain %", "tuner serves",
              "runs with schedule", "vs single %", "worst vs single %", "gain share %", "canaries",
              "schedule canaries", "sweep vs single %"]
    mixed = [r for r in res.results if r["oracle_gain_share"] is not None]
    names = list(dict.fromkeys(r["name"] for r in mixed))
    out = []

    def cells(t: list[dict[str, Any]], sw: list[dict[str, Any]], label: str, single: str, ks: str,
              served: str) -> list[str]:
        return [label, single, ks, f"{column_mean(t, 'oracle_gain_pct'):.2f}", served,
                f"{sum(r['schedule'] is not None for r in t)}/{len(t)}", f"{column_mean(t, 'vs_single_pct'):+.2f}",
                f"{min(r['vs_single_pct'] for r in t):+.2f}", f"{100 * column_mean(t, 'oracle_gain_share'):.1f}",
                f"{column_mean(t, 'canaries'):.1f}", f"{column_mean(t, 'schedule_canaries'):.1f}",
                f"{column_mean(sw, 'vs_single_pct'):+.2f}" if sw else "-"]

    for n in names:
        t = [r for r in mixed if r["name"] == n]
        sw = [r for r in res.baselines.get("sweep", []) if r["name"] == n]
        ks = t[0]["oracle_k_by_load"]
        served = "; ".join(dict.fromkeys(schedule_text(r["chosen_n"], r["schedule"]) for r in t))
        out.append(cells(t, sw, n, str(t[0]["oracle_n"]), " ".join(f"{b}:{k}" for b, k in ks.items()), served))
    if names:
        sw = [r for r in res.baselines.get("sweep", []) if r["oracle_gain_share"] is not None]
        out.append(cells(mixed, sw, "mean", "", "", ""))
    return header, out


def mixed_verdict(res: Results) -> list[str]:
    """One line per target for the tuner's mixed-load runs: measured against the target, met or not."""
    m = res.mixed_summary().get("tuner")
    if not m:
        return []
    share_ok = m["mean_oracle_gain_share"] >= TARGET_GAIN_SHARE
    vs_ok = m["worst_vs_single_pct"] >= TARGET_VS_SINGLE_PCT
    return [f"mixed loads ({m['profiles']} profiles, {m['runs']} runs, {m['runs_serving_schedule']} serving a "
            f"schedule; per-load oracle {m['mean_oracle_gain_pct']:+.2f}% over the best single N on average):",
            f"  share of the per-load oracle's gain reached: mean {100 * m['mean_oracle_gain_share']:.1f}%, "
            f"min {100 * m['min_oracle_gain_share']:.1f}%, pooled {100 * m['pooled_oracle_gain_share']:.1f}% "
            f"(target: mean >= {100 * TARGET_GAIN_SHARE:.0f}%) "
            f"{'met' if share_ok else 'NOT met'}",
            f"  against the best single N: mean {m['mean_vs_single_pct']:+.2f}%, worst run "
            f"{m['worst_vs_single_pct']:+.2f}% (target: no run below {TARGET_VS_SINGLE_PCT:+.1f}%) "
            f"{'met' if vs_ok else 'NOT met'}",
            *(f"  {name}: share mean {100 * o['mean_oracle_gain_share']:.1f}%, pooled "
              f"{100 * o['pooled_oracle_gain_share']:.1f}%, worst run {o['worst_vs_single_pct']:+.2f}% against the "
              f"best single N, {o['runs_serving_schedule']} runs serving a schedule"
              for name, o in res.mixed_summary().items() if name not in ("targets", "tuner", *BASELINES))]


def markdown_tables(tables: Iterable[tuple[list[str], list[list[str]]]]) -> list[str]:
    """Markdown lines for each (header, rows) table that has rows, a blank line after each."""
    lines = []
    for header, rows in tables:
        if rows:
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    return lines


def markdown(res: Results) -> str:
    lines = markdown_tables((table_rows(res), family_rows(res), mixed_rows(res)))
    verdict = mixed_verdict(res)
    if verdict:
        lines += [verdict[0], ""] + [f"- {v.strip()}" for v in verdict[1:]] + [""]
    return "\n".join(lines)
