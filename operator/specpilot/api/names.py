"""Names, labels and the port name of the children of a SpeculativeDeployment (docs/architecture.md,
"Data flow").

render/ sets them; the controller, the scraper, the harness and the dashboards find pods by them. They
live here, under every layer that reads them, so that none reaches up to render/ for a name.
"""

from __future__ import annotations

from typing import Any, Literal

Track = Literal["stable", "canary"]
TRACKS: tuple[Track, ...] = ("stable", "canary")

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "specpilot"
DEPLOYMENT_LABEL = "specpilot.io/deployment"
TRACK_LABEL = "specpilot.io/track"
N_LABEL = "specpilot.io/num-speculative-tokens"
# The owning SpeculativeDeployment's uid, set by the operator on its pod templates and in its Services'
# selectors: the other labels follow from the spec, so a pod anyone labels by hand would join the Service;
# this one only a pod that copied a live object's uid has, and the scraper also checks owner references.
OWNER_UID_LABEL = "specpilot.io/owner-uid"
ENGINE_HASH_ANNOTATION = "specpilot.io/engine-config-hash"

# The serving container's port, by name: probes, Services and the scraper refer to it.
PORT_NAME = "http"

ENGINE_CONFIG_KEY = "engine.json"
ENGINE_CONFIG_DIR = "/etc/specpilot"
ENGINE_CONFIG_PATH = f"{ENGINE_CONFIG_DIR}/{ENGINE_CONFIG_KEY}"


def deployment_name(name: str, track: Track) -> str:
    """`<name>` for the stable track, `<name>-canary` for the canary."""
    return name if track == "stable" else f"{name}-canary"


def config_map_name(name: str, track: Track) -> str:
    """The ConfigMap holding the track's engine.json."""
    return f"{deployment_name(name, track)}-engine"


def live_config_map_name(name: str) -> str:
    """The ConfigMap holding live.json, the draft lengths the stable pods serve now (spec.tuning.measure
    switchback): one per SpeculativeDeployment, written without rolling a pod."""
    return f"{name}-live"


def drain_config_map_name(name: str) -> str:
    """The ConfigMap holding drain.json, the drain in force on every track's pods when spec.engine.drainSeconds
    is left out: one per SpeculativeDeployment, written without rolling a pod."""
    return f"{name}-drain"


def service_name(name: str) -> str:
    """One Service per SpeculativeDeployment, in front of both tracks."""
    return name


def track_service_name(name: str, track: Track) -> str:
    """With Gateway API traffic routing, a Service per track that the HTTPRoute weights."""
    return f"{name}-{track}"


def owned_labels(name: str) -> dict[str, str]:
    """Labels on every child: who manages it and which SpeculativeDeployment it belongs to."""
    return {MANAGED_BY: MANAGER, DEPLOYMENT_LABEL: name}


def selector(name: str, track: Track) -> dict[str, str]:
    """A track's pods. Immutable in a Deployment, so it never includes N."""
    return {DEPLOYMENT_LABEL: name, TRACK_LABEL: track}


def pod_labels(name: str, track: Track, n: int) -> dict[str, str]:
    """Labels of a serving pod: owner, track and the N it runs."""
    return {**owned_labels(name), TRACK_LABEL: track, N_LABEL: str(n)}


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """A controller ownerReference to `owner` (an object as read from the API, with metadata.uid)."""
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}

