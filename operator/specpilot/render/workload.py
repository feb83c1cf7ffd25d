"""The Deployment of one track and the Service in front of both tracks."""

from __future__ import annotations

from typing import Any

from specpilot_runtime.engine_config import DEFAULT_PORT

from ..api.models import SpeculativeDeployment, duration_seconds
from ..api.names import (
    N_LABEL,
    PORT_NAME,
    TRACK_LABEL,
    Track,
    deployment_name,
    owned_labels,
    selector,
    service_name,
    track_service_name,
)
from .images import DEFAULT_SERVING, ServingDefaults
from .pod import STARTUP_FAILURES, STARTUP_PERIOD_S, pod_template
from .replicas import strategy, track_replicas


def _metadata(sd: SpeculativeDeployment, name: str, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if sd.metadata.get("namespace"):
        meta["namespace"] = sd.metadata["namespace"]
    meta["labels"] = labels
    return meta


def deployment(sd: SpeculativeDeployment, track: Track, n: int, engine_hash: str,
               canary_running: bool = False, defaults: ServingDefaults = DEFAULT_SERVING) -> dict[str, Any]:
    name = sd.metadata["name"]
    replicas = track_replicas(sd, track, canary_running)
    if track == "stable":
        # A stable rollout may load a large model from scratch: give it the whole startup budget.
        deadline = STARTUP_PERIOD_S * STARTUP_FAILURES
    else:
        deadline = int(duration_seconds(sd.spec.tuning.canary.progress_deadline))
    labels = {**owned_labels(name), TRACK_LABEL: track, N_LABEL: str(n)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(sd, deployment_name(name, track), labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector(name, track)},
            "strategy": strategy(sd),
            "progressDeadlineSeconds": max(deadline, 1),
            "revisionHistoryLimit": 3,
            "template": pod_template(sd, track, n, engine_hash, defaults),
        },
    }


def track_service(sd: SpeculativeDeployment, track: Track) -> dict[str, Any]:
    """One track's pods only: the backend an HTTPRoute weights when traffic routing is `gateway`."""
    name = sd.metadata["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(sd, track_service_name(name, track), {**owned_labels(name), TRACK_LABEL: track}),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(name, track),
            "ports": [{"name": PORT_NAME, "port": DEFAULT_PORT, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def service(sd: SpeculativeDeployment) -> dict[str, Any]:
    """Selects every pod of the SpeculativeDeployment, stable and canary: replica ratio splits traffic."""
    name = sd.metadata["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(sd, service_name(name), owned_labels(name)),
        "spec": {
            "type": "ClusterIP",
            "selector": owned_labels(name),
            "ports": [{"name": PORT_NAME, "port": DEFAULT_PORT, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }
