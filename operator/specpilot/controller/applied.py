"""Server-side applies a reconcile can skip: most reconciles follow a child's status change and would apply
the same three bodies again (three of about ten requests per reconcile). A child is applied again
unless this replica last applied exactly this body to it and the live child still holds every field of it;
so a spec change (which may drop fields: only a new apply removes them), a hand edit and a restart apply."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kubernetes.utils.quantity import parse_quantity


def digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def holds(live: Any, desired: Any) -> bool:
    """Every field of `desired` is in `live` with the same value (lists item by item: same length, each item
    held); fields the API server or other controllers added to `live` do not matter."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(k in live and holds(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(map(holds, live, desired))
    if isinstance(live, bool) or isinstance(desired, bool):
        return live is desired
    return bool(live == desired) or _same_quantity(live, desired)


def _same_quantity(live: Any, desired: Any) -> bool:
    """The API server stores resource quantities in canonical form (8 -> "8", "1024Mi" -> "1Gi", "0.5" -> "500m"):
    a child is not changed because its quantities read differently."""
    if not isinstance(live, str) or not isinstance(desired, (str, int, float)):
        return False
    try:
        return bool(parse_quantity(live) == parse_quantity(desired))
    except ValueError:
        return False
