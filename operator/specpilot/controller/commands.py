"""`specpilot run`: start the operator against the cluster of a kubeconfig or the one it runs in."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import Any

from specpilot.api.validate import add_policy_arguments, policy_from
from specpilot.controller import log_levels
from specpilot.controller.health import DEFAULT_STALL_S, HEARTBEAT_S
from specpilot.controller.operator import OperatorOptions, run_operator
from specpilot.render.images import add_serving_arguments, serving_defaults_from
from specpilot.scrape.pods import DEFAULT_MAX_BYTES, ScrapeLimits


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the operator (Kopf) against a cluster",
                       description="Run the specpilot operator. Uses in-cluster config inside a pod, else the "
                                   "kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config).")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("-n", "--namespace", action="append", dest="namespaces", default=[], metavar="NS",
                   help="watch this namespace (repeat for several; globs like 'team-*' work); default: all")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (the default)")
    p.add_argument("--metrics-port", type=int, default=8080,
                   help="port of /metrics, /healthz (liveness) and /readyz (readiness) (default 8080)")
    p.add_argument("--metrics-host", default="0.0.0.0", help="address that port binds (default 0.0.0.0)")
    p.add_argument("--liveness-stall-seconds", type=float, default=DEFAULT_STALL_S, metavar="SECONDS",
                   help=f"/healthz fails once the event loop has been stuck this long (default {DEFAULT_STALL_S:g})")
    p.add_argument("--lease-name", default="specpilot-operator", help="leader election Lease name")
    p.add_argument("--lease-namespace", help="Lease namespace (default: the pod's namespace, else default)")
    p.add_argument("--lease-duration", type=int, default=15, metavar="SECONDS",
                   help="how long a silent leader keeps the Lease before a standby takes over")
    p.add_argument("--no-leader-election", action="store_true", help="act without holding the Lease")
    p.add_argument("--identity", default="", help="this replica's name in the Lease (default: host + random)")
    p.add_argument("--scrape-max-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="BYTES",
                   help=f"largest pod /metrics answer read; a larger one costs that pod's window "
                        f"(default {DEFAULT_MAX_BYTES})")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_policy_arguments(p)
    add_serving_arguments(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log_levels.install()
    if not args.verbose:
        # Kopf logs every handler run at INFO, httpx every request (a line per pod per window); the
        # reconciler logs what changed, the tuning loop each decision and each scrape that failed.
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.all_namespaces and args.namespaces:
        raise SystemExit("specpilot run: --all-namespaces and --namespace are exclusive")
    if args.liveness_stall_seconds <= HEARTBEAT_S:
        raise SystemExit(f"specpilot run: --liveness-stall-seconds must exceed the {HEARTBEAT_S:g} s heartbeat")
    opts = OperatorOptions(kubeconfig=args.kubeconfig, context=args.context, namespaces=args.namespaces,
                           metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                           stall_after_s=args.liveness_stall_seconds,
                           lease_name=args.lease_name, lease_namespace=args.lease_namespace,
                           lease_duration_s=args.lease_duration, identity=args.identity,
                           leader_election=not args.no_leader_election, policy=policy_from(args),
                           serving=serving_defaults_from(args),
                           scrape=ScrapeLimits(max_bytes=args.scrape_max_bytes))
    return run_to_exit(run_operator(opts))


def run_to_exit(main: Coroutine[Any, Any, int]) -> int:
    """Run the operator's coroutine; a non-zero code (the Lease was lost) ends the process at once, as
    client-go's leader election does (klog.Fatal): threads still blocked in API calls (timeouts, retries
    through an outage) would otherwise hold the exit, and so the restart that makes it a standby, for
    minutes. A clean stop (SIGTERM) waits for them, as before."""
    runner = asyncio.Runner()
    code = runner.run(main)
    if code:
        logging.shutdown()
        os._exit(code)
    runner.close()
    return code
