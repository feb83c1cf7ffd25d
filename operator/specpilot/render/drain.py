"""The automatic drain on the pods (spec.engine.drainSeconds left out): their template and engine.json carry the
constant maximum, and the `<name>-drain` ConfigMap the drain in force, which the runtime reads when SIGTERM comes
(runtime/specpilot_runtime/drain.py). So a new measured drain rewrites one small file and rolls no pod."""

from __future__ import annotations

from typing import Any

from specpilot_runtime.drain import DRAIN_FILE, drain_json

from ..api.drain import MAX_AUTO_DRAIN_S
from ..api.models import SpeculativeDeployment
from ..api.names import drain_config_map_name
from .mounted_files import file_config_map


def pod_drain_s(sd: SpeculativeDeployment) -> int:
    """The drain the pod template and engine.json are rendered with: the spec's, else the automatic maximum
    (constant, so that the drain in force changes without a roll)."""
    seconds = sd.spec.engine.drain_seconds
    return MAX_AUTO_DRAIN_S if seconds is None else seconds


def drain_config_map(sd: SpeculativeDeployment, seconds: int, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ConfigMap carrying `seconds` as drain.json, labelled as every child and owned by `owner` when given."""
    return file_config_map(sd, drain_config_map_name(sd.metadata["name"]), DRAIN_FILE, drain_json(seconds), owner)
