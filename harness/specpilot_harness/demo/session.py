"""One demo run: a sandbox (API server, simulated engines, the operator) as a subprocess, a tuned
SpeculativeDeployment, load through its Service from this process, and the live view until the tuner
converges or the time limit passes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import AsyncIterator, Sequence
from typing import Any

from rich.console import Console
from rich.live import Live

from specpilot_harness.sim.launch import SIM_PROFILE_ANNOTATION, SIM_TIME_SCALE_ANNOTATION
from specpilot_harness.sim.profile import Profile
from specpilot_runtime.speculative import METHODS, max_n

from specpilot.controller.kube import Kube, load_api_client, sd_path
from specpilot_harness.load.command import drive
from specpilot_harness.load.endpoints import EndpointError, ServiceTargets
from specpilot_harness.load.runner import LoadClock, LoadConfig, phases_text
from specpilot.api.names import service_name
from specpilot.tuning import Phase
from specpilot_harness.sandbox.sim_pods import DEFAULT_PROFILE_FILES, read_profiles
from specpilot.api.models import duration_seconds

from . import tournament as tour
from specpilot_harness.bench.tournament import TournamentProfile
from .mix import MAX_CLIENTS, MIXED_REPLICAS, MixPlan, is_mixed, mix_plan
from .plot import demo_plot, tournament_plot
from .view import dashboard, summary, tournament_dashboard, tournament_summary
from specpilot_harness.ports import free_port

NAME, NAMESPACE = "demo", "default"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
POLL_S = 1.0
# Short windows under load that moves: the single-N search and the schedule canary need more of them than the
# default round budget (48) before the judge has seen every load level often enough.
MIXED_WINDOWS_PER_ROUND = 150


@dataclass(frozen=True)
class DemoOptions:
    profile: str
    time_limit_s: float
    window: str
    time_scale: float
    concurrency: int  # clients for a single-load profile
    out: Path
    workdir: Path
    max_clients: int = MAX_CLIENTS  # a mixed profile's heaviest phase at most


class DemoError(RuntimeError):
    """The demo cannot run (unknown profile, sandbox did not start); the message says why."""


def load_profile(name: str) -> Profile:
    profiles = read_profiles(DEFAULT_PROFILE_FILES)
    if name not in profiles:
        raise DemoError(f"no profile {name!r}; known: {', '.join(sorted(profiles))}; tournaments: "
                        f"{', '.join(sorted(tour.read_tournaments()))}")
    return profiles[name]


def resolve_profile(name: str) -> tuple[Profile, TournamentProfile | None]:
    """What `--profile` names: a method tournament (its starting entry and the tournament) or a profile."""
    found = tour.find_tournament(name)
    if found is not None:
        return found.entry(found.start.method), found
    return load_profile(name), None


def manifest(profile: Profile, opts: DemoOptions, tournament: TournamentProfile | None = None) -> dict[str, Any]:
    """The SpeculativeDeployment: the method's usual default N, tuning on, every N the profile serves. For a
    profile with several load levels: schedule mode, and MIXED_REPLICAS pods of which a canary replaces one
    while it runs, so each pod serves the same share of the load throughout (demo/mix.py).

    For a method tournament (`profile` its starting entry): the tournament's start method and N, block size
    16 for block drafters, the other entries as spec.tuning.alternatives and their profiles in per-method
    annotations (demo/tournament.py); several load levels get the two pods and replace canary but keep
    single-N tuning (the tournament chooses a method and one N)."""
    rule = METHODS[profile.method]
    speculative: dict[str, Any] = {"method": profile.method, "numSpeculativeTokens": rule.default_n}
    if rule.draft_model == "required":
        speculative["draftModel"] = f"example/{profile.method}-draft"  # simulated: never downloaded
    top = min(profile.max_n, max_n(profile.method, None))
    canary: dict[str, Any] = {"analysisWindow": opts.window, "progressDeadline": "30s"}
    tuning: dict[str, Any] = {"enabled": True, "candidates": list(range(top + 1)), "cooldown": "10m",
                              "canary": canary}
    annotations = {SIM_PROFILE_ANNOTATION: profile.name}
    model = f"example/{profile.name}"
    if tournament is not None:
        speculative = tour.speculative(profile, tournament.start.n)
        tuning.update(candidates=list(range(tour.top_n(profile) + 1)), alternatives=tour.alternatives(tournament))
        annotations = tour.sim_profile_annotations(tournament)
        model = f"example/{tournament.name}"
    replicas = 1
    if is_mixed(profile):
        if tournament is None:
            tuning.update(mode="schedule")
        tuning.update(maxWindowsPerRound=MIXED_WINDOWS_PER_ROUND)
        canary.update(mode="replace", replicas=1)
        replicas = MIXED_REPLICAS
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": NAME, "namespace": NAMESPACE,
                         "annotations": {**annotations, SIM_TIME_SCALE_ANNOTATION: repr(opts.time_scale)}},
            "spec": {"model": model, "servedModelName": NAME, "replicas": replicas,
                     "speculative": speculative, "tuning": tuning}}


def load_config(profile: Profile, opts: DemoOptions) -> tuple[LoadConfig, MixPlan | None]:
    """What the demo's load generator sends: `concurrency` clients, or a mixed profile's levels in phases."""
    if not is_mixed(profile):
        return LoadConfig(concurrency=opts.concurrency, duration_s=opts.time_limit_s, timeout_s=30.0), None
    plan = mix_plan(profile, duration_seconds(opts.window), max_clients=opts.max_clients)
    return LoadConfig(concurrency=max(p.concurrency for p in plan.phases), duration_s=opts.time_limit_s,
                      timeout_s=30.0, phases=plan.phases), plan


def load_text(config: LoadConfig, plan: MixPlan | None) -> str:
    """The load in one line for the summary."""
    if plan is None:
        return f"{config.concurrency} clients"
    return (f"phases {phases_text(config.phases)} (clients:seconds, cycled) over {plan.pods} pods: "
            + ", ".join(f"{plan.per_pod(i):g}" for i in range(len(plan.phases))) + " sequences per pod")


@contextlib.asynccontextmanager
async def sandbox(workdir: Path, extra_args: Sequence[str] = ()) -> AsyncIterator[Path]:
    """`specpilot sandbox` with its operator, logging to workdir/sandbox.log; yields the kubeconfig."""
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig, log_path = workdir / "kubeconfig", workdir / "sandbox.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "specpilot.cli", "sandbox", "--port", "0", "--kubeconfig", str(kubeconfig),
            "--metrics-port", str(free_port()), *extra_args, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not re.search(r"API server at https://127\.0\.0\.1:\d+", log_path.read_text(errors="replace")):
            if proc.returncode is not None or time.monotonic() > deadline:
                raise DemoError(f"the sandbox did not start; see {log_path}")
            await asyncio.sleep(0.2)
        yield kubeconfig
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                # Pods drain as on a node being shut down (preStop, SIGTERM, grace period).
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _serving(targets: ServiceTargets) -> bool:
    """The Service exists and has a ready pod: load can start."""
    try:
        return bool(await asyncio.to_thread(targets.resolve))
    except EndpointError:
        return False


async def run_demo(opts: DemoOptions, console: Console) -> dict[str, Any]:
    """Run the demo; returns the SpeculativeDeployment's final status."""
    profile, tournament = resolve_profile(opts.profile)
    default_n = METHODS[profile.method].default_n if tournament is None else tournament.start.n
    config, plan = load_config(profile, opts)
    mixed = plan is not None
    clock = LoadClock()
    started = time.monotonic()
    console.print(f"Starting the sandbox (API server, simulated engines, operator); log in {opts.workdir}/sandbox.log")
    async with sandbox(opts.workdir) as kubeconfig:
        kube = Kube(load_api_client(str(kubeconfig)))
        path = sd_path(NAMESPACE, NAME)
        await asyncio.to_thread(kube.apply, manifest(profile, opts, tournament), "specpilot-demo")
        targets = ServiceTargets(service_name(NAME), NAMESPACE, str(kubeconfig))
        load: asyncio.Task[Any] | None = None
        status: dict[str, Any] = {}
        try:
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                while (elapsed := time.monotonic() - started) < opts.time_limit_s:
                    if load is None and await _serving(targets):
                        load = asyncio.create_task(drive(targets, config, clock=clock))
                    if load is not None and load.done():
                        raise DemoError(f"the load stopped: {load.exception() or 'duration over'}")
                    obj = await asyncio.to_thread(kube.get, path)
                    status = (obj or {}).get("status") or {}
                    now = clock.phase(config)
                    line = plan.label(*now) if plan is not None and now is not None else None
                    if tournament is not None:
                        live.update(tournament_dashboard(status, tournament, elapsed, opts.time_limit_s, line,
                                                         mixed, opts.time_scale))
                        if tour.finished(status):
                            break
                    else:
                        live.update(dashboard(status, profile, default_n, elapsed, opts.time_limit_s, line, mixed,
                                              opts.time_scale))
                        if (status.get("tuning") or {}).get("phase") == Phase.CONVERGED:
                            break
                    await asyncio.sleep(POLL_S)
        finally:
            if load is not None:
                load.cancel()
                await asyncio.gather(load, return_exceptions=True)
            targets.close()
        (opts.workdir / "status.json").write_text(json.dumps(status, indent=1) + "\n", encoding="utf-8")
        if tournament is not None:
            tour_plot = tournament_plot(status, tournament, opts.out, mixed, opts.time_scale)
            console.print()
            console.print(tournament_summary(status, tournament, time.monotonic() - started,
                                             str(tour_plot) if tour_plot else None, mixed,
                                             load_text(config, plan)))
            return status
        plot = demo_plot(status, profile, default_n, opts.out, mixed, opts.time_scale)
        console.print()
        console.print(summary(status, profile, default_n, time.monotonic() - started, str(plot) if plot else None,
                              mixed, load_text(config, plan) if mixed else None, plan))
        return status
