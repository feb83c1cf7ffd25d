"""The demo's live view and summary as rich renderables (pure: status and profile in, tables out)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from specpilot_harness.sim.profile import Profile

from specpilot.tuning.schedule import schedule_text

from . import readings
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


def _goodput_table(tuning: dict[str, Any], profile: Profile) -> Table:
    measured, predicted = readings.observed(tuning), readings.predicted(tuning)
    truth = readings.truth(profile, readings.reference_load(tuning))
    oracle = readings.best(truth)
    table = Table(title=f"Goodput per pod at {readings.reference_load(tuning):.1f} sequences, tokens/s "
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


def _decisions_table(tuning: dict[str, Any]) -> Table:
    table = Table(title="Decisions", title_justify="left")
    for name in ("window", "action", "N", "why"):
        table.add_column(name)
    for entry in (tuning.get("history") or [])[-DECISIONS_SHOWN:]:
        n = str(entry.get("n"))
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
              load: str | None = None, mixed: bool = False) -> Group:
    """The live view; `load`: what the load generator does now (a mixed profile's phase), `mixed`: show the
    schedules and goodput per load level."""
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
    parts.append(_levels_table(status, profile, default_n) if mixed else _goodput_table(tuning, profile))
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
