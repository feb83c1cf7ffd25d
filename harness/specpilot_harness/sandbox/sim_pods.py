"""A PodRuntime that serves: one simulated vLLM engine per sandbox pod.

Each pod runs what the operator rendered for it: N, method, served model name and port come from its
mounted `engine.json`; the workload (acceptance curve, step times) is the profile named by the
`specpilot.io/sim-profile` annotation of the SpeculativeDeployment that owns the pod (found through
ownerReferences, so both tracks serve it and the operator never sees it), or, for a pod running another
method of a tournament, its `specpilot.io/sim-profile-<method>` annotation; `specpilot.io/sim-time-scale`
there makes the engine's clock run faster than wall time, and `specpilot.io/sim-table-cost` (a number in
[0, 1]) overrides the profile's `table_cost`, the share a batch-size table adds to each step of an engine
that serves one (a switchback pod's; a static pod carries no table and pays nothing), so a cluster test can
give a bundled profile a table cost; a value that is not a finite number in [0, 1] fails the pod with a
message naming the annotation. The engine binds the pod's 127.x address,
readiness is its `/health`, and deleting the pod drains it as vLLM's --shutdown-timeout does, then stops
it. Engines share the sandbox's event loop (one process: no per-pod interpreter to start).

A pod whose engine.json names a `live_file` gets its mounted files in a directory of its own, where its engine
polls the live file as a vLLM engine polls it in the pod; when the node agent re-syncs the pod's volumes, the
changed files are replaced there whole (written, then renamed into place), so the engine follows the new
ConfigMap without a restart.

A pod without the profile annotation serves nothing and is Ready at once, as with the no-op runtime, so
the same sandbox runs plain deployments too. A pod whose profile cannot be found or cannot run its N fails
to start (phase Failed, the simulator's error as the message) and never becomes Ready.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

import httpx

from specpilot_runtime.engine_config import EngineConfig
from specpilot_harness.sim.launch import (SIM_PROFILE_ANNOTATION, pod_seed, sim_config, sim_time_scale,
                                          with_table_cost)
from specpilot_harness.sim.profile import BUNDLED_PROFILES, Profile, ProfileError, load_profiles
from specpilot_harness.sim import server as sim_server
from specpilot_harness.bench.tournament import load_tournaments

from specpilot.api.names import ENGINE_CONFIG_PATH
from specpilot_harness.sandbox.pod_runtime import PodContext, pre_stop_sleep, write_atomic

# The tuner benchmark's profiles (the source article's measurements, docs/references.md §1) first, then the
# runtime's bundled examples, then the article's method head-to-heads (`specpilot bench tournament`), whose
# entries are named "<tournament>/<method>".
BENCH_PROFILES = Path(__file__).resolve().parents[1] / "bench" / "profiles"
ARTICLE_PROFILES = BENCH_PROFILES / "article.json"
BUNDLED = Path(sim_server.__file__).resolve().parent / BUNDLED_PROFILES
ARTICLE_TOURNAMENTS = BENCH_PROFILES / "tournaments-article.json"
DEFAULT_PROFILE_FILES = (ARTICLE_PROFILES, BUNDLED, ARTICLE_TOURNAMENTS)
HEALTH_TIMEOUT_S = 2.0


def is_tournament_file(text: str) -> bool:
    """A tournaments file ({"tournaments": [...]}, bench/tournament.py) rather than a profiles file."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return False  # load_profiles says what is wrong with it
    return isinstance(doc, dict) and "tournaments" in doc and "profiles" not in doc


def profiles_in(path: Path) -> dict[str, Profile]:
    """The profiles of one file: a profiles file's by name, or every entry of a tournaments file as
    "<tournament>/<method>" (each with its tournament's load mix and noise)."""
    text = path.read_text(encoding="utf-8")
    if is_tournament_file(text):
        return {e.name: e for t in load_tournaments(text, str(path)) for e in t.entries}
    return load_profiles(text, str(path))


def read_profiles(files: tuple[Path, ...]) -> dict[str, Profile]:
    """Every profile of `files` (profiles or tournaments files); a name found in an earlier file wins."""
    out: dict[str, Profile] = {}
    for path in reversed(files):
        out.update(profiles_in(path))
    return out


class SimEngineRuntime:
    """Starts a `SimServer` per annotated pod; `ready` asks its /health over HTTP, as a probe would."""

    def __init__(self, profile_files: tuple[Path, ...] = DEFAULT_PROFILE_FILES) -> None:
        self.profiles = read_profiles(profile_files)
        self._servers: dict[str, sim_server.SimServer] = {}  # pod uid -> its engine
        # pod uid -> (the directory its mounted files are in, the files written there): pods that follow a
        # live file only, the others' engines read nothing after start.
        self._volumes: dict[str, tuple[Path, dict[str, str]]] = {}
        self._client = httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S)

    def engine_for(self, ctx: PodContext) -> sim_server.SimConfig | None:
        """What the pod's engine runs; None for a pod that names no profile. Raises ValueError."""
        annotations = next((o["metadata"].get("annotations") or {} for o in ctx.owners
                            if SIM_PROFILE_ANNOTATION in (o["metadata"].get("annotations") or {})), {})
        if not annotations.get(SIM_PROFILE_ANNOTATION):
            return None
        text = ctx.files.get(ENGINE_CONFIG_PATH)
        if text is None:
            raise ValueError(f"{ENGINE_CONFIG_PATH} is not mounted")
        engine = EngineConfig.model_validate(json.loads(text))
        # A method tournament runs other drafters for the same target: `<annotation>-<method>` names theirs.
        name = annotations.get(f"{SIM_PROFILE_ANNOTATION}-{engine.speculative.method}") \
            or annotations[SIM_PROFILE_ANNOTATION]
        if name not in self.profiles:
            raise ProfileError(f"no profile {name!r}; known: {', '.join(sorted(self.profiles))}")
        return sim_config(engine, with_table_cost(self.profiles[name], annotations), ctx.ip,
                          time_scale=sim_time_scale(annotations), seed=pod_seed(ctx.name))

    async def start(self, ctx: PodContext) -> None:
        config = self.engine_for(ctx)
        if config is None:
            return
        uid = ctx.pod["metadata"]["uid"]
        try:
            if config.live_file is not None:
                root = Path(tempfile.mkdtemp(prefix="sp-sim-pod-"))
                self._volumes[uid] = (root, {})
                self._write_files(uid, ctx.files)
                config = dataclasses.replace(config, live_file=str(_under(root, config.live_file)))
            server = sim_server.SimServer(config)
            await server.start()
        except BaseException:
            self._remove_files(uid)  # a failed start is retried afresh: nothing of this one may stay
            raise
        self._servers[uid] = server

    def _write_files(self, uid: str, files: dict[str, str]) -> None:
        root, written = self._volumes[uid]
        for path in written.keys() - files.keys():
            _under(root, path).unlink(missing_ok=True)
        for path, text in files.items():
            if written.get(path) != text:
                write_atomic(_under(root, path), text)
        self._volumes[uid] = (root, dict(files))

    def _remove_files(self, uid: str) -> None:
        entry = self._volumes.pop(uid, None)
        if entry is not None:
            shutil.rmtree(entry[0], ignore_errors=True)

    async def update_files(self, ctx: PodContext) -> None:
        """The pod's ConfigMaps changed: the files its engine reads change under it (no restart)."""
        uid = ctx.pod["metadata"]["uid"]
        if uid in self._volumes:
            self._write_files(uid, ctx.files)

    async def ready(self, ctx: PodContext) -> bool:
        server = self._servers.get(ctx.pod["metadata"]["uid"])
        if server is None:
            return True  # nothing to serve
        try:
            return (await self._client.get(f"{server.url}/health")).status_code == 200
        except httpx.HTTPError:
            return False

    async def terminate(self, ctx: PodContext) -> None:
        """preStop (serving pods sleep while endpoints drop them), then SIGTERM: the engine drains as vLLM
        does with the pod's --shutdown-timeout (engine.json)."""
        for container in (ctx.pod.get("spec") or {}).get("containers") or []:
            await asyncio.sleep(pre_stop_sleep(container))
        server = self._servers.get(ctx.pod["metadata"]["uid"])
        if server is not None:
            await server.shutdown()

    async def stop(self, ctx: PodContext) -> None:
        server = self._servers.pop(ctx.pod["metadata"]["uid"], None)
        try:
            if server is not None:
                await server.stop()
        finally:
            self._remove_files(ctx.pod["metadata"]["uid"])



def _under(root: Path, mounted: str) -> Path:
    """Where a file mounted at `mounted` in the pod lives here; a mountPath climbing out of it is refused."""
    path = (root / mounted.lstrip("/")).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ValueError(f"mounted path {mounted!r} leaves the pod's directory")
    return path
