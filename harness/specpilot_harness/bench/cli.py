"""`specpilot bench tuner`: the tuner against its baselines on simulated deployments.

The only file I/O of the benchmark (reading the profiles, writing --json / --markdown) happens here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, TypeVar

from rich.console import Console
from rich.table import Table

from specpilot_harness.sim.profile import ProfileError, load_profiles

from . import operator_bench, tournament, tuned_bench
from .strategies import MAX_WINDOWS
from .report import family_rows, markdown, mixed_rows, mixed_verdict, run_all, table_rows

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
    p.add_argument("--json", type=Path, dest="json_out", help="write results as JSON here")
    p.add_argument("--markdown", type=Path, help="write the summary table as Markdown here")
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
    t.add_argument("--json", type=Path, dest="json_out", help="write results as JSON here")
    t.set_defaults(func=run_tournament)
    operator_bench.register(sub)
    tuned_bench.register(sub)


def _read(path: Path, parse: Callable[[str, str], T], err: Console) -> T | None:
    """The parsed file, or None after saying on stderr why it cannot be read."""
    try:
        return parse(path.read_text(encoding="utf-8"), str(path))
    except OSError as e:
        err.print(f"[red]error:[/red] cannot read {path}: {e.strerror}")
    except ProfileError as e:
        err.print(f"[red]error:[/red] {e}")
    return None


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    found = _read(args.profiles, load_profiles, err)
    if found is None:
        return 2
    profiles = list(found.values())
    if args.seeds < 1:
        err.print("[red]error:[/red] --seeds must be at least 1")
        return 2
    if args.windows < 8:
        err.print("[red]error:[/red] --windows must be at least 8")
        return 2
    res = run_all(profiles, args.seeds, lambda msg: print(msg, file=sys.stderr, flush=True), args.windows,
                  args.mode)
    header, rows = table_rows(res)
    table = Table(title=f"specpilot bench tuner: {len(profiles)} profiles x {args.seeds} seeds x "
                        f"{args.windows} windows")
    for h in header:
        table.add_column(h, justify="left" if h == "profile" else "right")
    for i, r in enumerate(rows):
        table.add_row(*r, end_section=i == len(rows) - 2)
    out = Console(width=200)
    out.print(table)
    fam_header, fam = family_rows(res)
    if fam:
        ftable = Table(title="by cost-shape family")
        for h in fam_header:
            ftable.add_column(h, justify="left" if h == "family" else "right")
        for i, r in enumerate(fam):
            ftable.add_row(*r, end_section=i == len(fam) - 2)
        out.print(ftable)
    mixed_header, mixed = mixed_rows(res)
    if mixed:
        mtable = Table(title="mixed loads: served configuration against the best single N and the per-load oracle")
        for h in mixed_header:
            mtable.add_column(h, justify="left" if h in ("profile", "tuner serves") else "right",
                              no_wrap=h == "profile")
        for i, r in enumerate(mixed):
            mtable.add_row(*r, end_section=i == len(mixed) - 2)
        out.print(mtable)
    s = res.summary()
    for name, v in s.items():
        out.print(f"{name:>10}: mean regret {v['mean_regret_pct']:.2f}%, max {v['max_regret_pct']:.2f}%, "
                  f"{v['mean_canaries']:.2f} canaries, exploration cost {v['mean_exploration_cost_pct']:.2f}%, "
                  f"worst promotion {v['worst_promotion_pct']:+.2f}%", highlight=False)
    for line in mixed_verdict(res):
        out.print(line, highlight=False)
    if args.json_out:
        args.json_out.write_text(json.dumps(res.to_json(), indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(res))
    return 0


def run_tournament(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    tournaments = _read(args.profiles, tournament.load_tournaments, err)
    if tournaments is None:
        return 2
    if args.seeds < 1 or args.windows < 8:
        err.print("[red]error:[/red] --seeds must be at least 1 and --windows at least 8")
        return 2
    res = tournament.run_all(tournaments, args.seeds, lambda msg: print(msg, file=sys.stderr, flush=True),
                             args.windows)
    out = Console(width=200)
    table = Table(title=f"specpilot bench tournament: {len(tournaments)} tournaments x {args.seeds} seeds x "
                        f"{args.windows} windows")
    strategies = ["tuner", *res["baselines"]]
    for h in ("tournament", "oracle", "tuner chose", *(f"{s} regret %" for s in strategies), "tuner canaries"):
        table.add_column(h, justify="left" if h in ("tournament", "oracle", "tuner chose") else "right")
    rows = {"tuner": res["results"], **res["baselines"]}
    for t in tournaments:
        mine = {s: [r for r in rows[s] if r["name"] == t.name] for s in strategies}
        chose = sorted({f"{r['chosen_method']} {r['chosen_n']}" for r in mine["tuner"]})
        first = mine["tuner"][0]
        table.add_row(t.name, f"{first['oracle_method']} {first['oracle_n']}", ", ".join(chose),
                      *(f"{sum(r['regret_pct'] for r in mine[s]) / len(mine[s]):.2f}" for s in strategies),
                      f"{sum(r['canaries'] for r in mine['tuner']) / len(mine['tuner']):.1f}")
    out.print(table)
    for name, v in res["summary"].items():
        out.print(f"{name:>8}: mean regret {v['mean_regret_pct']:.2f}%, max {v['max_regret_pct']:.2f}%, "
                  f"{v['mean_canaries']:.2f} canaries, worst promotion {v['worst_promotion_pct']:+.2f}%, "
                  f"exploration cost {v['mean_exploration_cost_pct']:.2f}%", highlight=False)
    goal = res["targets"]
    out.print(f"targets: mean regret <= {goal['mean_regret_pct']}%, mean canaries <= {goal['mean_canaries']}, "
              f"worst promotion >= {goal['worst_promotion_pct']}%", highlight=False)
    if args.json_out:
        args.json_out.write_text(json.dumps(res, indent=1) + "\n")
    return 0
