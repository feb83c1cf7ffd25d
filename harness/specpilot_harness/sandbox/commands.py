"""`specpilot sandbox`: a real control plane on 127.0.0.1 (fake GPU nodes) with the CRDs installed and the operator
running."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import signal
import sys
from pathlib import Path

from specpilot.controller import gc_policy
from specpilot_harness.sandbox.exec_pods import ExecRuntime, ImageMap
from specpilot_harness.sandbox.fault_proxy import FaultProxy, in_front_of, proxy_kubeconfig_path
from specpilot_harness.sandbox.pod_runtime import PodRuntime
from specpilot_harness.sandbox.real_cluster import DEFAULT_GPU_RESOURCES, RealSandbox
from specpilot_harness.sandbox.sim_pods import DEFAULT_PROFILE_FILES, SimEngineRuntime

DEFAULT_PORT = 16443
DEFAULT_KUBECONFIG = Path(".specpilot") / "sandbox.kubeconfig"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sandbox", help="run a real Kubernetes control plane with fake GPU nodes and the operator",
                       description="Start kube-apiserver, etcd, kube-controller-manager and kube-scheduler (built "
                                   "from source once by scripts/build-control-plane.sh) on 127.0.0.1, fake GPU "
                                   "nodes whose pods run locally, install the SpeculativeDeployment CRD, run the "
                                   "operator, write a kubeconfig and wait for Ctrl-C. See docs/sandbox.md.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"API server port (default {DEFAULT_PORT}; 0 picks one)")
    p.add_argument("--kubeconfig", type=Path, default=DEFAULT_KUBECONFIG,
                   help=f"where to write the kubeconfig (default {DEFAULT_KUBECONFIG})")
    p.add_argument("--metrics-port", type=int, default=8080, help="operator /metrics port on 127.0.0.1 (default 8080)")
    p.add_argument("--no-operator", action="store_true", help="only the cluster; run `specpilot run` yourself")
    p.add_argument("--workdir", type=Path, metavar="DIR",
                   help="keep the control plane's PKI, etcd data and logs in DIR (default: a "
                        "temporary directory, removed at exit)")
    p.add_argument("--audit", action="store_true",
                   help="kube-apiserver logs every request to DIR/logs/audit.log (--workdir)")
    p.add_argument("--audit-user", action="append", default=[], metavar="USER",
                   help="log only this user's requests (repeatable; implies --audit): each logged request costs "
                        "kube-apiserver CPU, e.g. system:serviceaccount:NS:NAME for one operator's")
    p.add_argument("--fault-proxy", action="store_true",
                   help="a fault-injecting proxy in front of the API server, with the "
                        "/sandbox/faults rules and /sandbox/control drills (restart kube-apiserver or etcd, expire "
                        "watches); the operator talks to it, through the kubeconfig written beside --kubeconfig "
                        "with the suffix .fault-proxy (docs/sandbox.md, \"API faults\")")
    p.add_argument("--pod-runtime", metavar="MODULE:FACTORY",
                   help="what runs behind each pod: a callable returning a PodRuntime (overrides --engine; "
                        "see specpilot_harness.sandbox.pod_runtime)")
    p.add_argument("--engine", choices=("sim", "exec"), default="sim",
                   help="sim (default): a simulated vLLM engine for pods whose SpeculativeDeployment is "
                        "annotated specpilot.io/sim-profile (docs/simulator.md), nothing for others; exec: run each pod's real containers (command + "
                        "args, env, volumes, probes, preStop, grace period) with images mapped to local "
                        "environments, the serving image to the vLLM CPU build (docs/sandbox.md)")
    p.add_argument("--exec-image", action="append", default=[], metavar="PATTERN=DIR",
                   help="with --engine exec: run images matching PATTERN (fnmatch) from the programs in DIR "
                        "(repeatable, first match wins; default: the operator image from this Python, every "
                        "other image from .tools/vllm-venv/bin)")
    p.add_argument("--exec-dir", type=Path, default=Path(".specpilot") / "pods", metavar="DIR",
                   help="with --engine exec: where each pod's volumes, logs, HOME and TMPDIR live")
    p.add_argument("--nodes", type=int, default=0, metavar="N",
                   help="N nodes with --gpus-per-node GPUs each, enforced when pods are scheduled (pods that fit "
                        "nowhere stay Pending as Unschedulable); default: one node that fits every pod")
    p.add_argument("--gpus-per-node", type=int, default=8, metavar="G",
                   help="allocatable GPUs per node with --nodes, of each --gpu-resource (default 8)")
    p.add_argument("--gpu-resource", action="append", default=[], metavar="NAME",
                   help="extended resource each node advertises with --nodes (repeatable; default: "
                        f"{', '.join(DEFAULT_GPU_RESOURCES)})")
    p.add_argument("--sim-profiles", type=Path, action="append", default=[], metavar="FILE",
                   help="profiles files the sim-profile annotations name a profile of (repeatable; a tournaments "
                        "file's entries are named <tournament>/<method>; default: the tuner benchmark's "
                        "article.json and tournaments-article.json, then the runtime's bundled examples)")
    p.set_defaults(func=_run)


async def _operator(kubeconfig: Path, metrics_port: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specpilot.cli", "run", "--kubeconfig", str(kubeconfig),
        "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1", "--lease-namespace", "kube-system")


async def serve(args: argparse.Namespace) -> int:
    sandbox = RealSandbox(pod_runtime(args), nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                          gpu_resources=tuple(args.gpu_resource) or DEFAULT_GPU_RESOURCES,
                          workdir=args.workdir.resolve() if args.workdir else None, audit=args.audit or bool(args.audit_user),
                          audit_users=tuple(args.audit_user))
    url = await sandbox.start(args.port)
    kubeconfig = sandbox.write_kubeconfig(args.kubeconfig.resolve())
    proxy: FaultProxy | None = None
    operator_kubeconfig = kubeconfig
    if args.fault_proxy:
        proxy = await in_front_of(sandbox)
        access = sandbox.access
        operator_kubeconfig = proxy.write_kubeconfig(proxy_kubeconfig_path(kubeconfig), access.token, access.ca_pem)
    operator = None if args.no_operator else await _operator(operator_kubeconfig, args.metrics_port)
    proxy_line = "" if proxy is None else f"  fault proxy at {proxy.url}; the operator's kubeconfig: {operator_kubeconfig}\n"
    print(f"specpilot sandbox: API server at {url}\n"
          f"  export KUBECONFIG={kubeconfig}\n"
          f"{proxy_line}"
          f"  kubectl apply -f deploy/examples/      # SpeculativeDeployments\n"
          f"  kubectl get sd,deploy,pods             # children appear; pods run on the sandbox's nodes\n"
          f"  kubectl explain speculativedeployment.spec\n" +
          ("" if operator is None else f"  operator metrics: http://127.0.0.1:{args.metrics_port}/metrics\n") +
          "Ctrl-C stops everything.", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    waits: list[asyncio.Task[object]] = [asyncio.create_task(stop.wait())]  # Ctrl-C, or the operator's exit
    if operator is not None:
        waits.append(asyncio.create_task(operator.wait()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if operator is not None:
        if operator.returncode is not None:
            print(f"specpilot sandbox: the operator exited with {operator.returncode}", file=sys.stderr)
            code = 1
        else:
            operator.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(operator.wait(), 15)
            except TimeoutError:
                operator.kill()
    for task in waits:
        task.cancel()
    if proxy is not None:
        await proxy.stop()
    await sandbox.stop()
    for written in {kubeconfig, operator_kubeconfig}:
        with contextlib.suppress(OSError):
            os.unlink(written)
    return code


def pod_runtime(args: argparse.Namespace) -> PodRuntime:
    """What runs behind each pod, from the command line."""
    if args.pod_runtime:
        return load_runtime(args.pod_runtime)
    if args.engine == "exec":
        try:
            images = ImageMap.parse(args.exec_image)
        except ValueError as exc:
            raise SystemExit(f"specpilot sandbox: {exc}") from None
        return ExecRuntime(args.exec_dir.resolve(), images)
    return SimEngineRuntime(tuple(args.sim_profiles) or DEFAULT_PROFILE_FILES)


def load_runtime(spec: str) -> PodRuntime:
    module, _, factory = spec.partition(":")
    if not module or not factory:
        raise SystemExit(f"specpilot sandbox: --pod-runtime wants MODULE:FACTORY, got {spec!r}")
    return getattr(importlib.import_module(module), factory)()


def _run(args: argparse.Namespace) -> int:
    # The API server it stands in for collects garbage concurrently (Go); this one would otherwise stop
    # every request for up to 0.7 s per full collection at 1000 objects, and benchmarks would measure that.
    gc_policy.configure()
    return asyncio.run(serve(args))
