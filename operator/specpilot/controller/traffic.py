"""Gateway API traffic routing for canaries (`tuning.canary.trafficRouting: gateway`): the HTTPRoute named
in `tuning.canary.httpRoute` gets backend weights for the stable and canary track Services (pure part).

The weights give the canary the share it would have by replica ratio, canary.replicas / (replicas +
canary.replicas), so the tuner's cost of a canary is the same in both modes; the canary is weighted only
once it has a ready pod (a Service without endpoints would turn its share into errors).
"""

from __future__ import annotations

import copy
from typing import Any

from specpilot.api.models import SpeculativeDeployment
from specpilot.render.names import service_name, track_service_name
from specpilot_runtime.engine_config import DEFAULT_PORT

GATEWAY_GROUP_VERSION = "gateway.networking.k8s.io/v1"


def route_path(namespace: str, route: str) -> str:
    return f"/apis/{GATEWAY_GROUP_VERSION}/namespaces/{namespace}/httproutes/{route}"


def canary_weight(sd: SpeculativeDeployment, canary_serving: bool) -> int:
    """Percent of requests for the canary: its replica share while it serves, else 0."""
    if not canary_serving:
        return 0
    canary = sd.spec.tuning.canary.replicas
    return round(100 * canary / (canary + max(sd.spec.replicas, 1)))


def weighted_rules(route: dict[str, Any], name: str, weight: int) -> list[dict[str, Any]]:
    """The route's rules with this deployment's backends replaced by the weighted track Services.

    Rules that point at one of this deployment's Services are rewritten; when none does, every rule is
    (a route made for this deployment). Other backends in a rule are kept as they are."""
    ours = {service_name(name), track_service_name(name, "stable"), track_service_name(name, "canary")}
    rules = copy.deepcopy((route.get("spec") or {}).get("rules") or [{}])
    mine = [r for r in rules if any(b.get("name") in ours for b in r.get("backendRefs") or [])] or rules
    backends = [{"name": track_service_name(name, "stable"), "port": DEFAULT_PORT, "weight": 100 - weight}]
    if weight:
        backends.append({"name": track_service_name(name, "canary"), "port": DEFAULT_PORT, "weight": weight})
    for rule in mine:
        rule["backendRefs"] = [b for b in rule.get("backendRefs") or [] if b.get("name") not in ours] + backends
    return rules
