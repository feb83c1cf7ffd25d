"""The runtime's EngineConfig for one track, and the ConfigMap that carries it as engine.json."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from specpilot_runtime.engine_config import Accelerator, EngineConfig
from specpilot_runtime.speculative import OFF, SpeculativeConfig

from ..api.models import SpeculativeDeployment
from ..api.validate import speculative_config
from .images import DEFAULT_LISTEN_ADDRESS
from .names import ENGINE_CONFIG_KEY, TRACK_LABEL, Track, config_map_name, owned_labels


def engine_config(sd: SpeculativeDeployment, n: int | None = None,
                  schedule: list[list[int]] | None = None, listen: str = DEFAULT_LISTEN_ADDRESS) -> EngineConfig:
    """What one pod of the track runs, at N = `n` (default: the spec's N), with the tuner's batch-size
    `schedule` when it chose one (else the spec's, capped at N), listening on `listen`.

    Raises ValueError when that N breaks the method's rules: render never emits a config vLLM refuses.
    """
    spec = sd.spec
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
        args=list(spec.engine.args),
        env={e.name: e.value for e in spec.engine.env},
        shutdown_timeout_s=spec.engine.drain_seconds,
        host=listen,
    )


def engine_json(config: EngineConfig) -> str:
    """engine.json text. With method off the speculative section is left out: nothing to configure."""
    data: dict[str, Any] = config.model_dump(mode="json")
    if config.speculative.method == OFF:
        del data["speculative"]
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
