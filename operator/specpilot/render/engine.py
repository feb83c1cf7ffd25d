"""The runtime's EngineConfig for one track, and the ConfigMap that carries it as engine.json."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from specpilot_runtime.drain import DRAIN_PATH
from specpilot_runtime.engine_config import Accelerator, EngineConfig
from specpilot_runtime.live import LIVE_DIR, LIVE_FILE, MAX_BATCH_SIZE
from specpilot_runtime.speculative import DEFAULT_NGRAM_DRAFTER, DRAFTER_METHOD, OFF, SpeculativeConfig

from ..api.models import SpeculativeDeployment
from ..api.switchback import capture_plan, measured_live, started_n
from ..api.validate import speculative_config
from .drain import pod_drain_s
from .images import DEFAULT_LISTEN_ADDRESS
from ..api.names import ENGINE_CONFIG_KEY, TRACK_LABEL, Track, config_map_name, owned_labels


def engine_config(sd: SpeculativeDeployment, n: int | None = None,
                  schedule: list[list[int]] | None = None, listen: str = DEFAULT_LISTEN_ADDRESS,
                  track: Track = "stable", static: bool = False) -> EngineConfig:
    """What one pod of the track runs, at N = `n` (default: the spec's N), with the tuner's batch-size
    `schedule` when it chose one (else the spec's, capped at N), listening on `listen`; under switchback,
    what `switchback_config` says instead, unless the track is `static` (the tuner's table check, or the
    static pods it fell back to): N as a pod without switchback runs it, no table, no live.json.

    Raises ValueError when that N breaks the method's rules: render never emits a config vLLM refuses.
    """
    spec = sd.spec
    args = list(spec.engine.args)
    live_file = None
    if measured_live(sd) and not static:
        speculative, extra_args, live_file = switchback_config(sd, n, schedule, track)
        args += extra_args
    else:
        # "0 turns speculation off" (tuning candidates): vLLM then runs without a speculative config, since
        # every drafting method needs N >= 1.
        speculative = SpeculativeConfig(method=OFF) if n == 0 else speculative_config(spec, n, schedule)
    problems = speculative.problems("spec.speculative")
    if problems:
        raise ValueError("; ".join(str(p) for p in problems))
    return EngineConfig(
        model=spec.model,
        served_model_name=spec.served_model_name,
        accelerator=Accelerator(vendor=spec.accelerator.vendor, count=spec.accelerator.count),
        speculative=speculative,
        args=args,
        env={e.name: e.value for e in spec.engine.env},
        shutdown_timeout_s=pod_drain_s(sd),
        host=listen,
        live_file=live_file,
        # A track at N=0 runs method off: no drafter to choose.
        ngram_drafter=spec.speculative.ngram_drafter if speculative.method == DRAFTER_METHOD else DEFAULT_NGRAM_DRAFTER,
        # Automatic drain: the runtime cuts the drain to drain.json's when SIGTERM comes (render/drain.py).
        drain_file=None if spec.engine.drain_seconds is not None else DRAIN_PATH,
    )


def switchback_config(sd: SpeculativeDeployment, n: int | None, schedule: list[list[int]] | None,
                      track: Track) -> tuple[SpeculativeConfig, list[str], str | None]:
    """A switchback track's speculative config, capture flags and live.json path. Both tracks start at the
    larger of started_n and `n` (a canary or a promotion above it restarts the pods; below it nothing does)
    and carry a batch-size table (vLLM keeps no batch size -> K list to rewrite without one, and the table
    has its own cost, which both tracks then pay alike), with capture settings for that N.

    The stable track follows live.json; its engine.json does not depend on `n` or `schedule` (the K in force
    is live.json's), and its table, what it serves until live.json is read, is what the spec asks: the
    spec's own schedule (every K <= spec N <= the started N), else spec N at every batch size. The canary
    measures one configuration: the tuner's schedule, else `n` at every batch size, and no live.json."""
    spec = sd.spec
    start = max(started_n(sd), n or 0)
    if track == "stable":
        rows = [[e.min_batch_size, e.max_batch_size, e.num_speculative_tokens] for e in spec.speculative.schedule or ()]
        rows = rows or [[1, MAX_BATCH_SIZE, spec.speculative.num_speculative_tokens]]
        live_file: str | None = f"{LIVE_DIR}/{LIVE_FILE}"
    else:
        k = spec.speculative.num_speculative_tokens if n is None else n
        rows = [[lo, hi, min(kr, start)] for lo, hi, kr in schedule] if schedule else [[1, MAX_BATCH_SIZE, k]]
        live_file = None
    plan = capture_plan(spec.engine.args, spec.accelerator.vendor, start)
    return speculative_config(spec, start, rows), plan.args if plan else [], live_file


def engine_json(config: EngineConfig) -> str:
    """engine.json text. With method off the speculative section is left out: nothing to configure."""
    data: dict[str, Any] = config.model_dump(mode="json")
    if config.speculative.method == OFF:
        del data["speculative"]
    if config.drain_file is None:  # as before drain files existed, so a fixed drain's pods do not roll
        del data["drain_file"]
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def config_hash(text: str) -> str:
    """Short digest of engine.json; in the pod template it rolls the pods when the config changes."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_map(sd: SpeculativeDeployment, track: Track, text: str) -> dict[str, Any]:
    name = sd.metadata["name"]
    meta: dict[str, Any] = {"name": config_map_name(name, track)}
    if sd.metadata.get("namespace"):
        meta["namespace"] = sd.metadata["namespace"]
    meta["labels"] = {**owned_labels(name), TRACK_LABEL: track}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {ENGINE_CONFIG_KEY: text}}
