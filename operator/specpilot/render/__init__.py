"""Pure rendering: (SpeculativeDeployment, decided N, track) -> the Kubernetes objects the operator applies.

Nothing here talks to Kubernetes; the controller applies what these functions return (and sets owner
references through `owner`). Every function takes a parsed, validated SpeculativeDeployment
(`specpilot.api.validate.load`).
"""

from __future__ import annotations

from typing import Any

from specpilot_runtime.live import LiveConfig

from ..api.drain import DEFAULT_DRAIN_SECONDS
from ..api.models import SpeculativeDeployment
from .drain import drain_config_map
from .engine import config_hash, config_map, engine_config, engine_json
from .live import live_config_map
from .images import DEFAULT_SERVING, ServingDefaults
from ..api.names import OWNER_UID_LABEL, Track, owner_reference
from .workload import deployment, service, track_service

__all__ = ["DEFAULT_SERVING", "ServingDefaults", "Track", "drain_config_map", "engine_config", "live_config_map",
           "owner_reference", "render", "render_service", "render_track"]


def _owned(objects: list[dict[str, Any]], owner: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Owner references to `owner`, and its uid on the pods and in the Services' selectors (OWNER_UID_LABEL)."""
    if owner is not None:
        for obj in objects:
            obj["metadata"]["ownerReferences"] = [dict(owner)]
            if obj["kind"] == "Deployment":
                obj["spec"]["template"]["metadata"]["labels"][OWNER_UID_LABEL] = owner["uid"]
            elif obj["kind"] == "Service":
                obj["spec"]["selector"][OWNER_UID_LABEL] = owner["uid"]
    return objects


def render_track(sd: SpeculativeDeployment, track: Track = "stable", n: int | None = None,
                 owner: dict[str, Any] | None = None, canary_running: bool = False,
                 defaults: ServingDefaults = DEFAULT_SERVING,
                 schedule: list[list[int]] | None = None, static: bool = False) -> list[dict[str, Any]]:
    """The track's ConfigMap (engine.json) and Deployment, running N = `n` (default: the spec's N);
    `canary_running` sizes the stable track beside a canary (tuning.canary.mode replace); `defaults` are
    the cluster-wide serving image, pull secrets, runtime image and listen address; `schedule` is the tuner's batch-size
    schedule for the track. Under spec.tuning.measure switchback the stable track's engine.json and pods do
    not change with `n` (up to the started N) or `schedule`: live.json carries them (live_config_map),
    unless the track is `static` (engine_config).

    Raises ValueError when `n` or `schedule` breaks the method's rules.
    """
    config = engine_config(sd, n, schedule, defaults.listen_address, track, static)
    text = engine_json(config)
    n_run = config.speculative.num_speculative_tokens
    objects = [config_map(sd, track, text),
               deployment(sd, track, n_run, config_hash(text), canary_running, defaults)]
    if sd.spec.tuning.canary.traffic_routing == "gateway":
        objects.append(track_service(sd, track))
    return _owned(objects, owner)


def render_service(sd: SpeculativeDeployment, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Service in front of both tracks."""
    return _owned([service(sd)], owner)[0]


def render(sd: SpeculativeDeployment, stable_n: int | None = None, canary_n: int | None = None,
           owner: dict[str, Any] | None = None, defaults: ServingDefaults = DEFAULT_SERVING,
           stable_schedule: list[list[int]] | None = None,
           canary_schedule: list[list[int]] | None = None,
           stable_contender: int = 0, canary_contender: int | None = None,
           live: LiveConfig | None = None, drain_s: int = DEFAULT_DRAIN_SECONDS,
           stable_static: bool = False, canary_static: bool = False) -> list[dict[str, Any]]:
    """Every child: the stable track, the Service, and the canary track when `canary_n` is given; each
    track serves its batch-size schedule when the tuner chose one, and runs its contender's method and
    draft (0: spec.speculative; i: spec.tuning.alternatives[i - 1]; the canary's defaults to the stable's);
    under switchback, the `<name>-live` ConfigMap holding `live`; with an automatic drain (no
    spec.engine.drainSeconds), the `<name>-drain` ConfigMap holding `drain_s`, the drain in force. A
    `*_static` track runs static pods under switchback (the tuner's table check, render.engine)."""
    objects = (render_track(sd.for_contender(stable_contender), "stable", stable_n, owner, canary_n is not None,
                            defaults, stable_schedule, stable_static)
               + [render_service(sd, owner)])
    if canary_n is not None:
        canary = sd.for_contender(stable_contender if canary_contender is None else canary_contender)
        objects += render_track(canary, "canary", canary_n, owner, defaults=defaults, schedule=canary_schedule,
                                static=canary_static or stable_static)
    if live is not None:
        objects += _owned([live_config_map(sd, live)], owner)
    if sd.spec.engine.drain_seconds is None:
        objects += _owned([drain_config_map(sd, drain_s)], owner)
    return objects
