"""The sandbox's admission of custom resources: the same defaulting, schema and CEL checks that
`specpilot validate` runs (api/admission.py), so the emulator refuses what a real API server would."""

from __future__ import annotations

from typing import Any

from specpilot.api import admission
from specpilot.sandbox.resources import ResourceType


def admit_custom_resource(rtype: ResourceType, obj: dict[str, Any],
                          old: dict[str, Any] | None) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    if rtype.schema is None:
        return obj, []
    stored = admission.defaulted(rtype.schema, obj)
    return stored, [(p.path, p.message) for p in admission.problems(rtype.schema, stored)]
