"""Helpers of the tuning-loop tests: tuned SpeculativeDeployments served by simulated engines, load
through their Services (`specpilot load` subprocesses), and reading what the tuner did."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from cluster_kit import REPO, Cluster

from specpilot_harness.sim.profile import Profile, load_profiles
from specpilot_runtime.speculative import METHODS

PROFILE_FILES = (REPO / "harness/specpilot_harness/bench/profiles/article.json",
                 REPO / "harness/specpilot_harness/sim/profiles.json")
# Engine time runs at wall time: a 2 s window holds a thousand drafts or more per pod at the load below.
# At 3x, streaming the tokens of three deployments left two busy cores so short of CPU that the load
# generators, not the engines, set the load per pod (1-2 sequences instead of 4, moving with whatever else
# ran): a CI run saw its heaviest load only before the canary started, so the judge counted it unseen.
TIME_SCALE = 1
WINDOW = "2s"
CONCURRENCY = 8  # four sequences per pod while a canary runs beside the single stable pod
DRAFT_MODELS = {"dflash": "z-lab/draft-b16", "eagle3": "org/eagle3-head", "dspark": "org/dspark-b16"}


def profile(name: str) -> Profile:
    """The profile as the simulated engines run it (step times interpolated between load levels)."""
    for path in PROFILE_FILES:
        found = load_profiles(path.read_text(), str(path))
        if name in found:
            return found[name]
    raise KeyError(name)


def default_n(p: Profile) -> int:
    return METHODS[p.method].default_n


def goodput(p: Profile, n: int, loads: list[float]) -> float:
    """Tokens per ms per pod at N, averaged over the per-pod loads (concurrent sequences) served."""
    return sum(p.goodput_at(n, b) for b in loads) / len(loads)


def relative_goodput(p: Profile, n: int, loads: list[float]) -> float:
    """Goodput at N over the best N's at the same loads: the profile's oracle for the traffic it got."""
    return goodput(p, n, loads) / max(goodput(p, k, loads) for k in range(p.max_n + 1))


def served_loads(tuning_status: dict[str, Any]) -> list[float]:
    """Per-pod loads of the stable track's windows, as the tuner measured them."""
    return [r["b"] for r in tuning_status.get("records") or [] if r["track"] == "stable"]


def tuned(name: str, profile_name: str, n: int | None = None, **tuning: Any) -> dict[str, Any]:
    """A SpeculativeDeployment at the profile's method and default N (or `n`), tuning on with short
    windows; `tuning` keys override spec.tuning (canary keys go under tuning["canary"])."""
    p = profile(profile_name)
    speculative: dict[str, Any] = {"method": p.method, "numSpeculativeTokens": default_n(p) if n is None else n}
    if p.method in DRAFT_MODELS:
        speculative["draftModel"] = DRAFT_MODELS[p.method]
    canary = {"analysisWindow": WINDOW, "progressDeadline": "30s", **tuning.pop("canary", {})}
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": name, "annotations": {"specpilot.io/sim-profile": profile_name,
                                                       "specpilot.io/sim-time-scale": str(TIME_SCALE)}},
            "spec": {"model": f"example/{profile_name}", "servedModelName": name, "speculative": speculative,
                     "tuning": {"enabled": True, "cooldown": "10m", "canary": canary, **tuning}}}


def start_load(cluster: Cluster, namespace: str, name: str, duration_s: float,
               concurrency: int = CONCURRENCY) -> subprocess.Popen[bytes]:
    log = (cluster.workdir / f"load-{namespace}-{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "specpilot.cli", "load", "--deployment", name, "--namespace", namespace,
         "--kubeconfig", str(cluster.kubeconfig), "--concurrency", str(concurrency),
         "--duration", str(duration_s), "--timeout", "20"],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO)


def stop_load(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return (cluster.get("sd", name, "-n", namespace) or {}).get("status") or {}


def tuning(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return status(cluster, namespace, name).get("tuning") or {}


def decisions(cluster: Cluster, namespace: str, name: str, action: str) -> list[dict[str, Any]]:
    return [h for h in tuning(cluster, namespace, name).get("history") or [] if h["action"] == action]


def condition(cluster: Cluster, namespace: str, name: str, ctype: str) -> dict[str, Any]:
    return next((c for c in status(cluster, namespace, name).get("conditions") or [] if c["type"] == ctype), {})


def deployment(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    return cluster.get("deployment", name, "-n", namespace)


def events(cluster: Cluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.items("events", "-n", namespace) if e.get("reason") == reason]
