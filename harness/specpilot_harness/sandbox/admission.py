"""The sandbox's admission of custom resources: the same defaulting, schema and CEL checks that
`specpilot validate` runs (api/admission.py), so the emulator refuses what a real API server would."""

from __future__ import annotations

from typing import Any

from specpilot.api import admission
from specpilot_harness.sandbox.resources import ResourceType


def _body(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def admit_custom_resource(rtype: ResourceType, obj: dict[str, Any],
                          old: dict[str, Any] | None) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    if rtype.schema is None:
        return obj, []
    if old is not None and _body(obj) == _body(old):
        # Validation ratcheting (on by default since Kubernetes 1.30): parts an update leaves unchanged are
        # not checked again. Status writes then only need the status schema, not every spec CEL rule.
        status_schema = (rtype.schema.get("properties") or {}).get("status")
        if status_schema is None or "status" not in obj:
            return obj, []
        problems = admission.problems(status_schema, obj["status"])
        return obj, [(f"status.{p.path}" if p.path else "status", p.message) for p in problems]
    stored = admission.defaulted(rtype.schema, obj)
    return stored, [(p.path, p.message) for p in admission.problems(rtype.schema, stored)]
