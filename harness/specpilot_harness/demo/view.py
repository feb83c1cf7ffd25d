"""The demo's live view and summary as rich renderables (pure: status and profile in, tables out)."""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Group
from rich.table import Table
from rich.text import Text

from specpilot_harness.sim.profile import Profile

from specpilot.tuning.schedule import schedule_text

from specpilot_harness.bench.tournament import TournamentProfile

from . import readings
from . import tournament as tour
from .mix import MixPlan, spread_goodput

DECISIONS_SHOWN = 8


def _condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), {})


def _survival_table(tuning: dict[str, Any], max_n: int) -> Table:
    table = Table(title="Survival S_k per position (latest window)", title_justify="left", expand=False)
    table.add_column("track")
    for k in range(1, max_n + 1):
        table.add_column(f"S{k}", justify="right")
    for track in ("stable", "canary"):
        record = readings.latest(tuning, track)
        if record is None:
            continue
        values = readings.survival(record)
        table.add_row(f"{track} N={record['n']}", *["-" if s is None else f"{s:.2f}" for s in values],
                      *[""] * (max_n - len(values)))
    return table


def _goodput_table(tuning: dict[str, Any], profile: Profile, prefix: str = "", time_scale: float = 1.0,
                   exact: bool = False) -> Table:
    measured, predicted = readings.observed(tuning, time_scale), readings.predicted(tuning, time_scale)
    truth = readings.truth(profile, readings.reference_load(tuning), exact)
    oracle = readings.best(truth)
    table = Table(title=f"{prefix}Goodput per pod at {readings.reference_load(tuning):.1f} sequences, tokens/s "
                        "(engine clock)", title_justify="left")
    for name in ("N", "measured", "predicted", "profile", ""):
        table.add_column(name, justify="right" if name else "left")
    for n in range(profile.max_n + 1):
        marks = []
        if n == tuning.get("stableN"):
            marks.append("stable")
        if n == tuning.get("canaryN"):
            marks.append("canary")
        if n == oracle:
            marks.append("best (profile)")
        cells = [f"{d[n]:.0f}" if n in d else "" for d in (measured, predicted, truth)]
        table.add_row(str(n), *cells, ", ".join(marks), style="bold" if n == tuning.get("stableN") else None)
    return table


def _decisions_table(tuning: dict[str, Any], describe: Callable[[dict[str, Any]], str] | None = None) -> Table:
    """The latest decisions; `describe`: how to show an entry's N (a tournament names the method canary's
    method)."""
    table = Table(title="Decisions", title_justify="left")
    for name in ("window", "action", "N", "why"):
        table.add_column(name)
    for entry in (tuning.get("history") or [])[-DECISIONS_SHOWN:]:
        n = describe(entry) if describe is not None else str(entry.get("n"))
        if entry.get("schedule"):
            n += f" [{schedule_text(entry['schedule'])}]"
        table.add_row(str(entry.get("seq")), str(entry.get("action")), n, str(entry.get("reason", ""))[:90])
    return table


def _levels_table(status: dict[str, Any], profile: Profile, default_n: int) -> Table:
    """Per load level of the profile: its truth for the default N, the best single N, the stable track (its
    schedule's K there) and the canary."""
    tuning = status.get("tuning") or {}
    stable = readings.mix_truth(profile, default_n, int(tuning.get("stableN", default_n)),
                                tuning.get("stableSchedule"))
    columns = [stable.default, stable.single, stable.served]
    names = [f"default N={default_n}", f"best single N={stable.single.n}", "stable"]
    if tuning.get("canaryN") is not None:
        canary = readings.mix_truth(profile, default_n, int(tuning["canaryN"]), tuning.get("canarySchedule"))
        columns.append(canary.served)
        names.append("canary")
    table = Table(title="Goodput per pod per load level, tokens/s (profile truth; K drafted there)",
                  title_justify="left")
    for name in ("sequences per pod", "share", "best K", *names):
        table.add_column(name, justify="right")
    for b in stable.levels:
        table.add_row(str(b), f"{stable.weights[b]:.0%}", str(stable.best_k[b]),
                      *[f"{s.by_level[b]:.0f} (K={s.k_by_level[b]})" for s in columns])
    table.add_row("mix", "", "", *[f"{s.total:.0f} ({s.total / stable.single.total - 1:+.1%})" for s in columns],
                  style="bold")
    table.caption = (f"(%): over the best single N. The best K at every level ({stable.oracle.label[len('best K per level: '):]}) "
                     f"would serve {stable.oracle.total:.0f} ({stable.gain(stable.oracle, stable.single):+.1%}).")
    table.caption_justify = "left"
    return table


def _schedules(status: dict[str, Any]) -> str:
    tuning = status.get("tuning") or {}
    stable = status.get("servedSchedule") or "-"
    canary = schedule_text(tuning.get("canarySchedule")) or "-"
    return f"schedule: stable {stable}, canary {canary}\n"


def dashboard(status: dict[str, Any], profile: Profile, default_n: int, elapsed: float, limit: float,
              load: str | None = None, mixed: bool = False, time_scale: float = 1.0) -> Group:
    """The live view; `load`: what the load generator does now (a mixed profile's phase), `mixed`: show the
    schedules and goodput per load level; `time_scale`: the engines' (measurements back on their clock)."""
    tuning = status.get("tuning") or {}
    cond = _condition(status, "Tuning")
    head = Text.assemble(
        ("specpilot demo ", "bold"), f"{profile.name} ({profile.method}), default N={default_n}   ",
        f"{elapsed:.0f}s / {limit:.0f}s\n",
        (f"load: {load}\n" if load else ""),
        f"phase {tuning.get('phase', '-')}, round {tuning.get('round', '-')}, windows {tuning.get('seq', 0)}, "
        f"stable N={status.get('numSpeculativeTokens')}, canary N={status.get('canaryNumSpeculativeTokens')}, "
        f"accepted length {status.get('acceptedLength') or '-'}\n",
        (_schedules(status) if mixed else ""),
        (f"Tuning: {cond.get('reason', '')}: {cond.get('message', '')}", "dim"))
    parts: list[Any] = [head, _survival_table(tuning, profile.max_n)]
    # Under load that moves, windows at one N come from different loads: no curve of goodput against N.
    parts.append(_levels_table(status, profile, default_n) if mixed
                 else _goodput_table(tuning, profile, time_scale=time_scale))
    parts.append(_decisions_table(tuning))
    return Group(*parts)


def summary(status: dict[str, Any], profile: Profile, default_n: int, wall_s: float, plot: str | None,
            mixed: bool = False, load: str | None = None, plan: MixPlan | None = None) -> Table:
    tuning = status.get("tuning") or {}
    truth = readings.truth(profile, readings.reference_load(tuning))
    chosen, oracle = int(tuning.get("stableN", default_n)), readings.best(truth)
    history = tuning.get("history") or []
    table = Table(title="Summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("profile", f"{profile.name} ({profile.method})")
    if mixed:
        mix = readings.mix_truth(profile, default_n, chosen, tuning.get("stableSchedule"))
        served = status.get("servedSchedule")
        table.add_row("N", f"{default_n} -> {chosen} (the best single N over the load mix: {mix.single.n})")
        table.add_row("schedule", (f"served {served} (started N={chosen})" if served else "none served")
                      + "; the profile's best K per level: "
                      + ", ".join(f"{k} at {b}" for b, k in mix.best_k.items()))
        levels = ", ".join(f"{w:.0%} at {b}" for b, w in mix.weights.items())
        table.add_row("goodput", f"{mix.gain(mix.served, mix.default):+.1%} over the default N, "
                                 f"{mix.gain(mix.served, mix.single):+.1%} over the best single N, over the "
                                 f"profile's load mix ({levels} sequences per pod; profile truth)")
        if plan is not None:
            spread = spread_goodput(profile, plan, chosen, tuning.get("stableSchedule"))
            table.add_row("as served here", f"{spread / spread_goodput(profile, plan, default_n, None) - 1:+.1%} "
                                            f"over the default N with the demo's load spread over the pods (a "
                                            f"pod's batch size ~ Binomial(clients, 1/{plan.pods}), not exactly the "
                                            "level; about)")
    else:
        table.add_row("N", f"{default_n} -> {chosen} (the profile's best: {oracle})")
        table.add_row("goodput", f"{truth[chosen] / truth[default_n] - 1:+.1%} over the default N; "
                                 f"{truth[chosen] / truth[oracle]:.1%} of the best")
    if load:
        table.add_row("load", load)
    starts = [h for h in history if h.get("action") == "start_canary"]
    canaries = [f"N={h['n']}" + (f" [{schedule_text(h['schedule'])}]" if h.get("schedule") else "") for h in starts]
    table.add_row("canaries", ", ".join(canaries or [f"N={n}" for n in tuning.get("tried") or []]) or "none")
    table.add_row("decisions", ", ".join(
        f"{h['action']} N={h['n']}" + (f" [{schedule_text(h['schedule'])}]" if h.get("schedule") else "")
        for h in history) or "none")
    table.add_row("windows", f"{tuning.get('seq', 0)} ({wall_s:.0f}s wall)")
    table.add_row("phase", str(tuning.get("phase", "-")))
    if plot:
        table.add_row("plot", plot)
    return table


def _pct(value: Any) -> str:
    return f"{value:+.1%}" if isinstance(value, (int, float)) else ""


def _standings_table(status: dict[str, Any], t: TournamentProfile, mixed: bool) -> Table:
    """status.tournament's standings per contender, beside the tournament's truth for its method."""
    tuning = status.get("tuning") or {}
    truth = tour.truth(t, tuning, mixed)
    oracle = tour.best(truth)
    standings = {r.get("contender"): r for r in (status.get("tournament") or {}).get("standings") or []}
    table = Table(title=f"Method tournament {t.name}: standings (goodput vs the stable; profile truth "
                        f"{tour.truth_label(tuning, mixed)}, tokens/s)", title_justify="left")
    for name in ("#", "method", "role", "N", "accepted length", "expected vs stable (best N)",
                 "measured vs stable", "truth at N", "truth best N"):
        table.add_column(name, justify="left" if name in ("method", "role") else "right")
    for i, (p, first_n) in enumerate(tour.start_ns(t)):
        row = standings.get(i, {})
        role = str(row.get("role", "-"))
        n = row.get("n")
        shown_n = str(n) if n is not None else f"({first_n} first)"
        length = row.get("acceptedLength")
        expected = ""
        if row.get("expectedGain") is not None:
            expected = f"{_pct(row['expectedGain'])} ± {row.get('sd') or 0.0:.1%} (N={row.get('bestN')})"
        by_n, at_n = truth[p.method], ""
        if isinstance(n, int) and n in by_n:
            at_n = f"{by_n[n]:.0f} ({by_n[n] / truth[oracle[0]][oracle[1]]:.0%})"
        top = readings.best(by_n)
        table.add_row(str(i), p.method, role, shown_n, f"{length:.2f}" if isinstance(length, (int, float)) else "",
                      expected, _pct(row.get("measuredGain")), at_n, f"{top} ({by_n[top]:.0f})",
                      style="bold" if role == "stable" else None)
    table.caption = (f"(%) truth at N over the best (method, N) {tour.truth_label(tuning, mixed)}: {oracle[0]} "
                     f"N={oracle[1]}; the tournament's oracle over its load mix: {t.oracle()[0]} N={t.oracle()[1]}")
    table.caption_justify = "left"
    return table


def tournament_dashboard(status: dict[str, Any], t: TournamentProfile, elapsed: float, limit: float,
                         load: str | None = None, mixed: bool = False, time_scale: float = 1.0) -> Group:
    """The live view of a method tournament: the tuner's line, the standings, survival and goodput against N
    of the stable method (its N tuner's windows, on the engine clock: `time_scale` the engines'), and the
    decisions naming each method canary's method."""
    tuning = status.get("tuning") or {}
    state = status.get("tournament") or {}
    stable = tour.stable_profile(status, t)
    canary_method = tour.method_of(t, state.get("canary"))
    canary = (f"{canary_method} N={state.get('canaryN')} (method canary)" if canary_method is not None
              else f"N={status['canaryNumSpeculativeTokens']}" if status.get("canaryNumSpeculativeTokens") is not None
              else "-")
    cond = _condition(status, "Tuning")
    head = Text.assemble(
        ("specpilot demo ", "bold"), f"tournament {t.name} ({' vs '.join(p.method for p in t.ordered())}), "
                                     f"started {t.start.method} N={t.start.n}   ",
        f"{elapsed:.0f}s / {limit:.0f}s\n",
        (f"load: {load}\n" if load else ""),
        f"phase {tuning.get('phase', '-')}, round {tuning.get('round', '-')}, windows {tuning.get('seq', 0)}, "
        f"stable {status.get('method') or stable.method} N={status.get('numSpeculativeTokens')}, canary {canary}, "
        f"accepted length {status.get('acceptedLength') or '-'}\n",
        f"tournament stage {state.get('stage', '-')}, method canaries {state.get('canaries', 0)}"
        f"{', over' if tour.finished(status) else ''}\n",
        (f"Tuning: {cond.get('reason', '')}: {cond.get('message', '')}", "dim"))
    parts: list[Any] = [head, _standings_table(status, t, mixed), _survival_table(tuning, stable.max_n)]
    if not mixed:  # under load that moves, windows at one N come from different loads
        parts.append(_goodput_table(tuning, stable, prefix=f"{stable.method} (stable): ", time_scale=time_scale,
                                    exact=True))
    parts.append(_decisions_table(tuning, lambda h: tour.describe(h, t)))
    return Group(*parts)


def tournament_summary(status: dict[str, Any], t: TournamentProfile, wall_s: float, plot: str | None,
                       mixed: bool = False, load: str | None = None) -> Table:
    """Which method and N won, against the tournament's oracle (the best (method, N) by true goodput over its
    load mix) and against the start."""
    tuning = status.get("tuning") or {}
    state = status.get("tournament") or {}
    start = (t.start.method, t.start.n)
    won, oracle = tour.chosen(status, t), t.oracle()
    table = Table(title="Summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("tournament", f"{t.name}: {', '.join(p.name for p in t.ordered())}")
    table.add_row("winner", f"{start[0]} N={start[1]} -> {won[0]} N={won[1]} (the tournament's oracle: "
                            f"{oracle[0]} N={oracle[1]}{', found' if won == oracle else ''})")
    levels = ", ".join(f"{w:.0%} at {b}" for b, w in sorted(t.concurrency.items()))
    table.add_row("goodput", f"{t.goodput(won) / t.goodput(start) - 1:+.1%} over the start; "
                             f"{t.goodput(won) / t.goodput(oracle):.1%} of the oracle (profile truth over the "
                             f"tournament's load mix: {levels} sequences per pod)")
    if not mixed:
        truth = tour.truth(t, tuning, mixed)
        here = tour.best(truth)
        table.add_row("as served here", f"{truth[won[0]][won[1]] / truth[start[0]][start[1]] - 1:+.1%} over the "
                                        f"start {tour.truth_label(tuning, mixed)} (best there: {here[0]} "
                                        f"N={here[1]})")
    rows = []
    for r in state.get("standings") or []:
        text = f"{r.get('method')}: {r.get('role')}"
        if r.get("n") is not None:
            text += f" N={r['n']}"
        if r.get("measuredGain") is not None:
            text += f", measured {_pct(r['measuredGain'])} vs the stable of the time"
        if r.get("expectedGain") is not None:
            text += f", expected {_pct(r['expectedGain'])} at N={r.get('bestN')}"
        rows.append(text)
    table.add_row("standings", "; ".join(rows) or "none (no window judged yet)")
    if load:
        table.add_row("load", load)
    history = tuning.get("history") or []
    table.add_row("canaries", ", ".join(tour.canaries(history, t)) or "none")
    table.add_row("decisions", ", ".join(f"{h['action']} {tour.describe(h, t)}" for h in history
                                         if h.get("action") not in ("hold", "keep_analysing")) or "none")
    table.add_row("windows", f"{tuning.get('seq', 0)} ({wall_s:.0f}s wall)")
    table.add_row("phase", f"{tuning.get('phase', '-')}; tournament "
                           f"{'over' if tour.finished(status) else 'not over: ' + str(state.get('stage', '-'))}")
    if plot:
        table.add_row("plot", plot)
    return table
