"""`specpilot load`: drive task-like traffic at a URL or a SpeculativeDeployment's Service and summarize it."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from rich.console import Console

from specpilot.api.names import service_name
from .endpoints import Endpoint, EndpointError, ServiceTargets, StaticTargets, Targets
from .prompts import bundled_tasks
from .report import Summary, render, summarize
from .runner import LoadClock, LoadConfig, LoadPhase, PhaseError, parse_phases, phases_text, run_load


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "load", help="send task-like prompts (math, code, chat) to a URL or a SpeculativeDeployment",
        description="Send streamed task-like prompts with C concurrent clients for D seconds (or a client "
                    "count that moves, --phases) and print requests, tokens/s, TPOT and errors. With "
                    "--deployment, each request goes to a random ready pod behind the Service, so traffic "
                    "splits by replica ratio.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="base URL of one OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    where.add_argument("--deployment", metavar="NAME", help="SpeculativeDeployment whose Service to load")
    p.add_argument("--namespace", "-n", default="default", metavar="NS",
                   help="namespace of --deployment (default: default)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--concurrency", "-c", type=int, metavar="C",
                   help="concurrent clients (required unless --phases is given)")
    p.add_argument("--phases", metavar="C:S,...",
                   help="load that moves: C clients for S seconds, then the next phase, cycled until --duration "
                        "ends, e.g. 2:30,32:30 (2 clients for 30 s, 32 for 30 s, again); instead of "
                        "--concurrency. When a phase drops clients, their requests in flight finish")
    p.add_argument("--duration", "-d", type=float, required=True, metavar="D",
                   help="seconds to keep sending; requests in flight then finish")
    p.add_argument("--max-tokens", type=int, default=256, metavar="M", help="max_tokens per request")
    p.add_argument("--requests", type=int, metavar="R", help="stop after R requests even if D has not passed")
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout, seconds")
    p.add_argument("--wait", type=float, default=30.0, metavar="S",
                   help="with --deployment: seconds to wait for the Service to exist and the API to answer "
                        "before giving up (default: 30; the operator may still be creating it)")
    p.add_argument("--model", help="model name to request (default: what each endpoint's /v1/models lists)")
    p.add_argument("--seed", type=int, help="seed for task and endpoint choice")
    p.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    p.set_defaults(func=run)


async def drive(targets: Targets, config: LoadConfig, wait_s: float = 0.0, clock: LoadClock | None = None) -> Summary:
    """Run the load against `targets` (a ServiceTargets is resolved first, waiting up to `wait_s` for it,
    and refreshed meanwhile); `clock` learns when the load started (to tell which phase runs)."""
    refresher = None
    if isinstance(targets, ServiceTargets):
        await targets.start(wait_s)
        refresher = asyncio.create_task(targets.refresh_forever())
    try:
        results, elapsed = await run_load(targets, bundled_tasks(), config, clock)
    finally:
        if refresher is not None:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
    return summarize(results, elapsed)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    phases: tuple[LoadPhase, ...] = ()
    if args.phases is not None:
        if args.concurrency is not None:
            err.print("error: --phases and --concurrency: give one (--phases sets the clients of each phase)")
            return 2
        try:
            phases = parse_phases(args.phases)
        except PhaseError as e:
            err.print(f"error: {e}")
            return 2
    elif args.concurrency is None:
        err.print("error: give --concurrency C (clients) or --phases C:S,... (clients per phase)")
        return 2
    concurrency = args.concurrency if args.concurrency is not None else max(p.concurrency for p in phases)
    if concurrency < 1 or args.duration <= 0 or args.max_tokens < 1 or (args.requests is not None
                                                                         and args.requests < 1):
        err.print("error: --concurrency, --duration, --max-tokens and --requests must be positive")
        return 2
    if not 0 <= args.wait <= 3600:
        err.print("error: --wait must be between 0 and 3600 seconds")
        return 2
    config = LoadConfig(concurrency=concurrency, duration_s=args.duration, max_tokens=args.max_tokens,
                        max_requests=args.requests, timeout_s=args.timeout, model=args.model, seed=args.seed,
                        phases=phases)
    if phases:
        err.print(f"phases {phases_text(phases)}: cycled for {args.duration:g} s")
    targets: Targets
    if args.url:
        url = args.url.rstrip("/")
        targets = StaticTargets((Endpoint(url, url),))
    else:
        try:
            targets = ServiceTargets(service_name(args.deployment), args.namespace, args.kubeconfig)
        except Exception as e:  # noqa: BLE001 - kubeconfig problems come in many exception types
            err.print(f"error: cannot reach the Kubernetes API: {e}")
            return 2
    try:
        summary = asyncio.run(drive(targets, config, args.wait))
    except EndpointError as e:
        err.print(f"error: {e}")
        return 2
    finally:
        if isinstance(targets, ServiceTargets):
            targets.close()
    render(summary, Console())
    if args.json:
        doc = summary.to_json()
        if phases:
            doc["phases"] = [{"concurrency": p.concurrency, "seconds": p.seconds} for p in phases]
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0 if summary.total.requests > summary.total.errors else 1
