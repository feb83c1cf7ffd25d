"""`specpilot demo`: watch the tuner move a deployment from a default N to the best one."""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path

from rich.console import Console

from specpilot.api.models import DURATION_PATTERN
from specpilot.tuning import Phase
from specpilot_harness.demo.mix import MAX_CLIENTS, is_mixed
from specpilot_harness.demo.session import DemoError, DemoOptions, resolve_profile, run_demo
from specpilot_harness.demo.tournament import finished
from specpilot_harness.realvllm.plot import sweep_plot
from specpilot_harness.realvllm.run import REAL_METHODS, REAL_WINDOW, real_options, report, run_real, write_json

DEFAULT_PROFILE = "qwen35-122b-mtp-math500"
MIXED_PROFILE = "mixed-eagle3-chat"
TOURNAMENT_EXAMPLE = "qwen36-35b-a3b-mtp-vs-dflash"
TIME_SCALE, MIXED_TIME_SCALE = 3.0, 1.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="the tuning loop end to end: sandbox, simulated vLLM pods, load, live tuner view",
        description="Start a sandbox (a real Kubernetes control plane, simulated vLLM engines, the operator), apply a "
                    "SpeculativeDeployment at its method's usual N with tuning enabled, send load through its "
                    "Service, and show the tuner live: windows, survival per position, measured, predicted and "
                    "true goodput per N, decisions. Ends when the tuner converges (or at --time-limit) with a "
                    "summary and a PNG of goodput against N. See docs/demo.md.")
    p.add_argument("--engine", choices=("sim", "vllm"), default="sim",
                   help="sim (default): simulated engines, about a minute; vllm: real vLLM (the CPU build, "
                        "installed on first use) serving small random models in pods that run their real "
                        "containers (two replicas, a canary replacing one of them), then a measured sweep over "
                        "every candidate N judges the tuner (about 9 minutes, plus about 3 to install vLLM; "
                        "docs/demo.md)")
    p.add_argument("--method", choices=REAL_METHODS, default="draft_model",
                   help="with --engine vllm: the speculative method (default draft_model: a noisy copy of the "
                        "target as its draft)")
    p.add_argument("--profile", default=DEFAULT_PROFILE,
                   help=f"workload profile the simulated engines serve (default {DEFAULT_PROFILE}: MTP on "
                        "Qwen3.5-122B-A10B, MATH500, where N=3 serves 17%% less than N=7); any name from "
                        "harness/specpilot_harness/bench/profiles/article.json or the runtime's bundled profiles. "
                        f"A profile with several load levels ({MIXED_PROFILE}: 2 and 32 sequences per pod) is "
                        "served under load cycling through its levels, tuned in schedule mode, and plotted per "
                        "load level. A method tournament's name from "
                        "harness/specpilot_harness/bench/profiles/tournaments-article.json (e.g. "
                        f"{TOURNAMENT_EXAMPLE}: MTP vs DFlash) starts at its start method and N with the other "
                        "methods as spec.tuning.alternatives, shows the tournament's standings live, and ends "
                        "when every method was measured and the N tuner converged; the summary names the "
                        "winning method and N against the tournament's best, the plot shows goodput against N "
                        "per method. Its entries also serve alone as '<tournament>/<method>'")
    p.add_argument("--time-limit", type=float, default=240.0, metavar="SECONDS",
                   help="stop after this long even if the tuner has not converged (default 240)")
    p.add_argument("--window", help="tuning.canary.analysisWindow, wall time (default 2s; 5s with --engine vllm)")
    p.add_argument("--time-scale", type=float,
                   help=f"simulated engines run this many times faster than wall time, so a 2 s window holds "
                        f"6 s of serving at 3 (default {TIME_SCALE:g}; {MIXED_TIME_SCALE:g} for a profile with "
                        "several load levels, whose heavy phase streams many more tokens; higher needs more CPU "
                        "for the streamed tokens)")
    p.add_argument("--concurrency", type=int, default=8,
                   help="concurrent streamed requests (default 8), for a profile with one load level")
    p.add_argument("--max-clients", type=int, default=MAX_CLIENTS,
                   help=f"for a profile with several load levels: clients in its heaviest phase at most (default "
                        f"{MAX_CLIENTS}); each phase sends (sequences per pod) x (pods) clients, all scaled down "
                        "alike when that exceeds this")
    p.add_argument("--out", type=Path,
                   help="where to write the goodput plot (default out/demo-goodput.png; with --engine vllm "
                        "out/demo-vllm.png, and the run's JSON beside it)")
    p.add_argument("--workdir", type=Path, default=Path(".specpilot/demo"),
                   help="kubeconfig and sandbox log (default .specpilot/demo)")
    p.set_defaults(func=_run)


def _window(args: argparse.Namespace, default: str) -> str:
    window = args.window or default
    if not re.fullmatch(DURATION_PATTERN, window):
        raise SystemExit(f"specpilot demo: --window {window!r} is not a duration like {default} or 1m")
    return str(window)


def _run(args: argparse.Namespace) -> int:
    if args.engine == "vllm":
        return _run_real(args)
    args.window = _window(args, "2s")
    args.out = args.out or Path("out/demo-goodput.png")
    console = Console()
    try:
        profile, tournament = resolve_profile(args.profile)
    except DemoError as exc:
        console.print(f"[red]specpilot demo: {exc}[/red]")
        return 1
    if args.time_scale is None:
        args.time_scale = MIXED_TIME_SCALE if is_mixed(profile) else TIME_SCALE
    if args.time_scale <= 0 or args.concurrency < 1 or args.time_limit <= 0 or args.max_clients < 1:
        raise SystemExit("specpilot demo: --time-scale, --concurrency, --max-clients and --time-limit must be "
                         "positive")
    opts = DemoOptions(profile=args.profile, time_limit_s=args.time_limit, window=args.window,
                       time_scale=args.time_scale, concurrency=args.concurrency, out=args.out,
                       workdir=args.workdir, max_clients=args.max_clients)
    try:
        status = asyncio.run(run_demo(opts, console))
    except DemoError as exc:
        console.print(f"[red]specpilot demo: {exc}[/red]")
        return 1
    if tournament is not None:
        return 0 if finished(status) else 1
    return 0 if (status.get("tuning") or {}).get("phase") == Phase.CONVERGED else 1


def _run_real(args: argparse.Namespace) -> int:
    opts = real_options(args.method, _window(args, REAL_WINDOW), args.workdir / "vllm")
    console = Console()
    try:
        result = asyncio.run(run_real(opts, console))
    except DemoError as exc:
        console.print(f"[red]specpilot demo: {exc}[/red]")
        return 1
    out = args.out or Path("out/demo-vllm.png")
    out_json = write_json(result, out.with_suffix(".json"))
    png = sweep_plot(result, out)
    console.print(report(result))
    console.print(f"Wrote {out_json} and {png}")
    return 0
