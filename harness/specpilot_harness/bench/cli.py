"""`specpilot bench tuner`: the tuner against its baselines on simulated deployments.

The only file I/O of the benchmark (reading the profiles, writing --json / --markdown) happens here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from specpilot.api.models import Canary, Tuning, canary_pods

from specpilot_harness.sim.profile import Profile, ProfileError, load_profiles

from . import (controlplane_start, floor, judge_bench, operator_bench, runtime_overhead, slo_bench, tournament,
               tuned_bench)
from .simulate import CANARY_MODES, MEASURES, STABLE_PODS, Fleet
from .strategies import MAX_WINDOWS, run_tuner
from .report import drafter_rows, family_rows, markdown, mixed_rows, mixed_verdict, row, run_all, table_rows

T = TypeVar("T")


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks")
    sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    p = sub.add_parser("tuner", help="simulate tuning N per profile and seed; compare with baselines",
                       description="Simulate a deployment per profile and seed: the tuner (through the same "
                                   "step() the controller uses) against default, sweep and hill-climb.")
    p.add_argument("--profiles", required=True, type=Path, help="profile file (JSON)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per profile (default 5)")
    p.add_argument("--windows", type=int, default=MAX_WINDOWS,
                   help=f"5-minute windows per run (default {MAX_WINDOWS}, one tuning round)")
    p.add_argument("--mode", choices=("single", "schedule"), default="single",
                   help="the tuner's spec.tuning.mode (default single; schedule: it may canary and serve a "
                        "batch-size schedule, for mixed-load profiles)")
    _fleet_args(p)
    _noise_arg(p)
    p.add_argument("--floor", action="store_true",
                   help="also run the judge's floor: the tuner's own state machine and judge with a planner told "
                        "the profile's answer (the best N; in schedule mode the per-load oracle's schedule): what "
                        "proving the answer costs at this noise, so the gap to the tuner is the planner's")
    p.add_argument("--json", type=Path, dest="json_out", help="write results as JSON here")
    p.add_argument("--markdown", type=Path, help="write the summary table as Markdown here")
    p.add_argument("--trace", metavar="PROFILE:SEED",
                   help="run the tuner on that one profile and seed only and print its decisions, window by window "
                        "(every action but keep-analysing, with its reason: per band, the two K, estimate and "
                        "interval), then what it serves; a debugging aid")
    p.set_defaults(func=run)
    t = sub.add_parser("tournament", help="simulate choosing the speculative method as well as N",
                       description="Simulate a deployment per tournament and seed: the method tournament "
                                   "(the operator's tuner with spec.tuning.alternatives) against the article's "
                                   "manual sweep of every method at every N and against tuning N of the "
                                   "starting method alone.")
    t.add_argument("--profiles", required=True, type=Path,
                   help='tournaments file (JSON: {"tournaments": [{"name", "start": {"method", "n"}, '
                        '"concurrency", "noise", "entries": [profile per method]}]})')
    t.add_argument("--seeds", type=int, default=5, help="seeds per tournament (default 5)")
    t.add_argument("--windows", type=int, default=tournament.WINDOWS,
                   help=f"5-minute windows per run (default {tournament.WINDOWS})")
    _fleet_args(t)
    _noise_arg(t)
    t.add_argument("--json", type=Path, dest="json_out", help="write results as JSON here")
    t.add_argument("--markdown", type=Path, help="write the per-tournament (and per-family) tables as Markdown here")
    t.set_defaults(func=run_tournament)
    j = sub.add_parser("judge", help="how often the canary judge promotes, by the canary's true gain",
                       description="Simulate canaries truly better (or worse) than the stable by each of --gains "
                                   "and ask the judge after every paired window, as the controller does: the "
                                   "share promoted (false promotions at gains <= 0, power above), rolled back "
                                   "and inconclusive, and the windows a verdict takes. One load level; "
                                   "step-time noise as in the simulated deployment.")
    j.add_argument("--gains", default=",".join(f"{100 * g:g}" for g in judge_bench.DEFAULT_GAINS),
                   help="true goodput gains of the canary over the stable, in percent, comma-separated; "
                        "write a list that starts with a minus as --gains=-3,0,3 (default %(default)s)")
    j.add_argument("--trials", type=int, default=1000, help="canaries per gain (default 1000)")
    j.add_argument("--noise", type=float, default=0.1,
                   help="per-window sd of log step time, as a profile's noise (default 0.1)")
    j.add_argument("--windows", type=int, default=Canary().windows,
                   help="spec.tuning.canary.windows (default %(default)s)")
    j.add_argument("--margin", type=float, default=Tuning().canary_margin,
                   help="spec.tuning.promotionMargin (default %(default)s)")
    j.add_argument("--confidence", type=float, default=Tuning().confidence,
                   help="spec.tuning.confidence (default %(default)s)")
    j.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    j.add_argument("--json", type=Path, dest="json_out", help="write results as JSON here")
    j.set_defaults(func=run_judge)
    operator_bench.register(sub)
    tuned_bench.register(sub)
    slo_bench.register(sub)
    runtime_overhead.register(sub)
    controlplane_start.register(sub)


def _fleet_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stable-replicas", type=int, metavar="R", default=STABLE_PODS,
                   help="stable pods of the simulated deployment (default %(default)s): a Service spreads their "
                        "traffic over the canary's pod too, so a surge canary lowers every pod's load (R=1: to "
                        "half)")
    p.add_argument("--canary-mode", choices=CANARY_MODES, default="auto",
                   help="the spec's tuning.canary.mode (default auto, as in the spec: replace when R >= 2, else "
                        "surge; surge: the canary's pod comes on top of the stable's; replace: the stable gives "
                        "one up while the canary runs, so every pod keeps its load and a canary is measured at "
                        "the load a promotion will serve; needs R >= 2)")
    p.add_argument("--confidence", type=_confidence, metavar="C", default=Tuning().confidence,
                   help="the spec's tuning.confidence the judge promotes with (default %(default)s, as in the spec; "
                        "from 0.5 up to, not including, 1): lower proves more gains in a round and promotes "
                        "more canaries that are no better")


    p.add_argument("--measure", choices=MEASURES, default="switchback",
                   help="the spec's tuning.measure (default %(default)s, which the benchmark favours: "
                        "docs/benchmark.md, \"Switchback\"): canary: every N the tuner tries is a pod "
                        "of its own (a restart); switchback: the engines start at the largest candidate and "
                        "serve the N under trial as a live arm, alternating with the stable's inside every "
                        "stable pod (no restart; a method of its own is still a canary)")


def _settings(args: argparse.Namespace, fleet: Fleet) -> dict[str, Any]:
    """What a results file was run with, beside its rows: runs at other settings are not comparable."""
    return {"seeds": args.seeds, "windows": args.windows, "noise": args.noise, "confidence": fleet.confidence,
            "stable_replicas": fleet.stable_replicas, "canary_mode": args.canary_mode, "measure": fleet.measure}


def _confidence(text: str) -> float:
    """argparse type of --confidence: what spec.tuning.confidence allows."""
    try:
        return Tuning(confidence=float(text)).confidence
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a confidence from 0.5 up to (not including) 1") from None


def _noise(text: str) -> float:
    """argparse type of --noise: a finite per-window sd in [0, 1), as a profile's own."""
    try:
        sd = float(text)
    except ValueError:
        sd = math.nan
    if not 0.0 <= sd < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a per-window sd from 0 up to (not including) 1")
    return sd


def _noise_arg(p: argparse.ArgumentParser) -> None:
    # Every shipped file has noise 0.1, which the judge's prior on the paired spread was set next to: this
    # asks how the tuner holds on a machine calmer or noisier than the one it was calibrated on.
    p.add_argument("--noise", type=_noise, metavar="SD",
                   help="replace every profile's per-window step-time noise (log sd; the shipped files' is 0.1) "
                        "with SD: the tuner on a machine calmer or noisier than the files'")


def _fleet(args: argparse.Namespace, err: Console) -> Fleet | None:
    """The simulated deployment's pods from the command line, or None after saying what is wrong."""
    if not 1 <= args.stable_replicas <= 64:
        err.print("[red]error:[/red] --stable-replicas must be a whole number from 1 to 64")
        return None
    if args.canary_mode == "replace" and args.stable_replicas < 2:
        err.print("[red]error:[/red] --canary-mode replace needs --stable-replicas of at least 2 (a stable pod "
                  "always serves)")
        return None
    return Fleet(args.stable_replicas, canary_pods(args.canary_mode, args.stable_replicas, 1), args.confidence,
                 args.measure)


def _read(path: Path, parse: Callable[[str, str], T], err: Console) -> T | None:
    """The parsed file, or None after saying on stderr why it cannot be read."""
    try:
        return parse(path.read_text(encoding="utf-8"), str(path))
    except OSError as e:
        err.print(f"[red]error:[/red] cannot read {path}: {e.strerror}")
    except ProfileError as e:
        err.print(f"[red]error:[/red] {e}")
    return None


def with_load_mix(profile: Profile, source: str) -> Profile:
    """The profile with the load mix each simulated window draws its level from. A profile without
    `concurrency` (the simulated engine needs none: its load is the requests it gets) runs at its one
    step-time row's load; with several rows the mix is not implied, and the error says what to add."""
    if profile.concurrency:
        return profile
    if len(profile.step_time_ms) == 1:
        return profile.model_copy(update={"concurrency": {next(iter(profile.step_time_ms)): 1.0}})
    levels = ", ".join(f'"{b}": w' for b in sorted(profile.step_time_ms))
    raise ProfileError(f"{source}: profile {profile.name!r}: concurrency: the benchmark draws each window's "
                       f"load (sequences per pod) from it and the profile has step times at several loads; "
                       f"give the load mix, e.g. {{{levels}}}")


def _print_table(out: Console, title: str, header: list[str], rows: list[list[str]], left: tuple[str, ...],
                 no_wrap: tuple[str, ...] = (), total: bool = True) -> None:
    """One results table, if it has rows; `total`: its last row sums up the others (a rule above it)."""
    if not rows:
        return
    table = Table(title=title)
    for h in header:
        table.add_column(h, justify="left" if h in left else "right", no_wrap=h in no_wrap)
    for i, r in enumerate(rows):
        table.add_row(*r, end_section=total and i == len(rows) - 2)
    out.print(table)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    found = _read(args.profiles, load_profiles, err)
    if found is None:
        return 2
    try:
        profiles = [with_load_mix(p, str(args.profiles)) for p in found.values()]
    except ProfileError as e:
        err.print(f"[red]error:[/red] {e}")
        return 2
    profiles = [p if args.noise is None else p.model_copy(update={"noise": args.noise}) for p in profiles]
    if args.seeds < 1:
        err.print("[red]error:[/red] --seeds must be at least 1")
        return 2
    if args.windows < 8:
        err.print("[red]error:[/red] --windows must be at least 8")
        return 2
    fleet = _fleet(args, err)
    if fleet is None:
        return 2
    if args.trace:
        return _trace(args.trace, profiles, args, fleet, err)
    res = run_all(profiles, args.seeds, lambda msg: print(msg, file=sys.stderr, flush=True), args.windows,
                  args.mode, fleet, {"floor": floor.run_floor} if args.floor else None)
    out = Console(width=200)
    _print_table(out, f"specpilot bench tuner: {len(profiles)} profiles x {args.seeds} seeds x "
                      f"{args.windows} windows, confidence {fleet.confidence:g}", *table_rows(res), left=("profile",))
    _print_table(out, "by cost-shape family", *family_rows(res), left=("family",))
    _print_table(out, "by drafter family", *drafter_rows(res), left=("drafter family",))
    _print_table(out, "mixed loads: served configuration against the best single N and the per-load oracle",
                 *mixed_rows(res), left=("profile", "tuner serves"), no_wrap=("profile",))
    s = res.summary()
    for name, v in s.items():
        out.print(f"{name:>10}: mean regret {v['mean_regret_pct']:.2f}%, max {v['max_regret_pct']:.2f}%, "
                  f"{v['mean_canaries']:.2f} canaries, {v['mean_restarts']:.2f} restarts (max {v['max_restarts']}), exploration cost {v['mean_exploration_cost_pct']:.2f}%, "
                  f"worst promotion {v['worst_promotion_pct']:+.2f}%", highlight=False)
    for line in mixed_verdict(res):
        out.print(line, highlight=False)
    if args.json_out:
        args.json_out.write_text(json.dumps({**res.to_json(), "settings": _settings(args, fleet)}, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(res))
    return 0


def _trace(spec: str, profiles: list[Profile], args: argparse.Namespace, fleet: Fleet, err: Console) -> int:
    """`bench tuner --trace PROFILE:SEED`: one tuner run's decisions, then what it serves and its regret."""
    name, _, seed_text = spec.rpartition(":")
    found = {p.name: p for p in profiles}
    if name not in found or not seed_text.isdigit():
        err.print(f"[red]error:[/red] --trace wants PROFILE:SEED with a profile of {args.profiles} (got {spec!r})")
        return 2
    profile, seed = found[name], int(seed_text)
    run = run_tuner(profile, seed, args.windows, args.mode, fleet, trace=print)
    r = row(profile, seed, run)
    print(f"serves N={r['chosen_n']} {r['schedule'] or ''}: regret {r['regret_pct']:.2f}% (best single N "
          f"{r['oracle_n']}), against the best single N {r.get('vs_single_pct', 0.0):+.2f}%")
    return 0


def run_tournament(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    tournaments = _read(args.profiles, tournament.load_tournaments, err)
    if tournaments is None:
        return 2
    if args.noise is not None:
        tournaments = [t.with_noise(args.noise) for t in tournaments]
    if args.seeds < 1 or args.windows < 8:
        err.print("[red]error:[/red] --seeds must be at least 1 and --windows at least 8")
        return 2
    fleet = _fleet(args, err)
    if fleet is None:
        return 2
    res = tournament.run_all(tournaments, args.seeds, lambda msg: print(msg, file=sys.stderr, flush=True),
                             args.windows, fleet)
    out = Console(width=200)
    _print_table(out, f"specpilot bench tournament: {len(tournaments)} tournaments x {args.seeds} seeds x "
                      f"{args.windows} windows, confidence {fleet.confidence:g}", *tournament.tournament_rows(res),
                 left=("tournament", "oracle", "tuner chose"), total=False)
    _print_table(out, "by cost-shape family", *tournament.family_rows(res), left=("family",))
    for name, v in res["summary"].items():
        out.print(f"{name:>8}: mean regret {v['mean_regret_pct']:.2f}%, max {v['max_regret_pct']:.2f}%, "
                  f"{v['mean_canaries']:.2f} canaries, worst promotion {v['worst_promotion_pct']:+.2f}%, "
                  f"exploration cost {v['mean_exploration_cost_pct']:.2f}%", highlight=False)
    goal = res["targets"]
    out.print(f"targets: mean regret <= {goal['mean_regret_pct']}%, mean canaries <= {goal['mean_canaries']}, "
              f"worst promotion >= {goal['worst_promotion_pct']}%", highlight=False)
    if args.json_out:
        args.json_out.write_text(json.dumps({**res, "settings": _settings(args, fleet)}, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(tournament.markdown(res))
    return 0


def _gains(text: str) -> list[float] | None:
    """--gains as fractions; None unless every item is a finite percent above -100."""
    try:
        gains = [float(x) / 100.0 for x in text.split(",")]
    except ValueError:
        return None
    ok = gains and len(gains) <= 50 and all(math.isfinite(g) and -1.0 < g <= 10.0 for g in gains)
    return gains if ok else None


def run_judge(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    gains = _gains(args.gains)
    if gains is None:
        err.print("[red]error:[/red] --gains must be 1 to 50 comma-separated percents above -100 and at most 1000 "
                  f"(got {args.gains[:80]!r})")
        return 2
    if not 1 <= args.trials <= 100_000:
        err.print("[red]error:[/red] --trials must be between 1 and 100000")
        return 2
    if not (math.isfinite(args.noise) and 0.0 <= args.noise < 1.0):
        err.print("[red]error:[/red] --noise must be a number from 0 up to (not including) 1")
        return 2
    try:
        # The spec's own rules for these three (the CRD's schema comes from the same models).
        tuning = Tuning(promotion_margin=args.margin, confidence=args.confidence,
                        canary=Canary(windows=args.windows))
    except ValidationError as e:
        first = e.errors()[0]
        flag = {"promotion_margin": "--margin", "confidence": "--confidence", "windows": "--windows"}.get(
            str(first["loc"][-1]), str(first["loc"][-1]))
        err.print(f"[red]error:[/red] {flag}: {first['msg']}")
        return 2
    points = judge_bench.operating_characteristic(gains, args.trials, args.noise, tuning.canary.windows,
                                                  tuning.canary_margin, tuning.confidence, args.seed)
    out = Console(width=200)
    table = Table(title=f"specpilot bench judge: {args.trials} canaries per gain, noise {args.noise:g}, "
                        f"{tuning.canary.windows} windows (up to {judge_bench.EXTEND * tuning.canary.windows}), "
                        f"margin {tuning.canary_margin:.1%}, confidence {tuning.confidence:g}")
    for h in ("true gain %", "promoted %", "planner expects %", "rolled back %", "inconclusive %",
              "windows to verdict"):
        table.add_column(h, justify="right")
    for p in points:
        table.add_row(f"{100 * p.gain:+.1f}", f"{100 * p.promoted / p.trials:.2f}", f"{100 * p.expected:.2f}",
                      f"{100 * p.rolled_back / p.trials:.2f}", f"{100 * p.inconclusive / p.trials:.2f}",
                      f"{p.mean_windows:.1f}")
    out.print(table)
    worse = [p for p in points if p.gain <= 0.0]
    if worse:
        p = max(worse, key=lambda q: q.promoted / q.trials)
        out.print(f"false promotions: {100 * p.promoted / p.trials:.2f}% of canaries truly {100 * p.gain:+.1f}% "
                  f"against the stable, the most of any gain <= 0", highlight=False)
    if args.json_out:
        args.json_out.write_text(json.dumps({"noise": args.noise, "windows": tuning.canary.windows,
                                             "margin": tuning.canary_margin, "confidence": tuning.confidence,
                                             "seed": args.seed, "points": [p.to_json() for p in points]},
                                            indent=1) + "\n")
    return 0
