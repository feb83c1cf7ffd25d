"""The `<name>-live` ConfigMap: live.json, the draft lengths the stable pods serve now (spec.tuning.measure
switchback). The pods mount it without their template hashing it, so writing it changes K in the running
engines and rolls no pod (runtime/specpilot_runtime/live.py holds the contract)."""

from __future__ import annotations

from typing import Any

from specpilot_runtime.live import LIVE_FILE, LiveConfig

from ..api.models import SpeculativeDeployment
from ..api.names import live_config_map_name
from .mounted_files import file_config_map


def live_config_map(sd: SpeculativeDeployment, config: LiveConfig,
                    owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ConfigMap carrying `config` as live.json, labelled as every child and owned by `owner` when given."""
    return file_config_map(sd, live_config_map_name(sd.metadata["name"]), LIVE_FILE, config.to_json(), owner)
