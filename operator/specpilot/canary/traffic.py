"""Gateway API traffic routing for canaries (`tuning.canary.trafficRouting: gateway`): the HTTPRoute named
in `tuning.canary.httpRoute` gets backend weights for the stable and canary track Services (pure part).

Only a route that opted in is touched: it carries the annotation `specpilot.io/speculative-deployment:
<name>`, or one of its rules already sends traffic to this deployment's Service. The rules as they were
before specpilot touched them are kept in the annotation `specpilot.io/original-rules`; every weighting
starts from them, and turning tuning off or deleting the SpeculativeDeployment puts them back.

The weights give the canary the share it would have by replica ratio, canary.replicas / (replicas +
canary.replicas), so the tuner's cost of a canary is the same in both modes; the canary is weighted only
once it has a ready pod (a Service without endpoints would turn its share into errors). Shares are exact:
in a rule, this deployment's backends keep their combined weight, split between the tracks, and any other
backend keeps its share of the rule (weights are scaled by 100 to stay integers).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from specpilot.api.models import SpeculativeDeployment
from specpilot.api.names import service_name, track_service_name
from specpilot.render.replicas import track_replicas
from specpilot_runtime.engine_config import DEFAULT_PORT

GATEWAY_GROUP_VERSION = "gateway.networking.k8s.io/v1"


def route_path(namespace: str, route: str) -> str:
    return f"/apis/{GATEWAY_GROUP_VERSION}/namespaces/{namespace}/httproutes/{route}"


def canary_weight(sd: SpeculativeDeployment, canary_serving: bool) -> int:
    """Percent of requests for the canary: its replica share while it serves, else 0."""
    if not canary_serving:
        return 0
    canary = sd.spec.tuning.canary.replicas
    return round(100 * canary / (canary + max(track_replicas(sd, "stable", canary_running=True), 1)))


OPT_IN_ANNOTATION = "specpilot.io/speculative-deployment"
ORIGINAL_ANNOTATION = "specpilot.io/original-rules"
SCALE = 100  # the tracks split the deployment's share in percent; other backends are scaled to match
# Gateway API's bounds: a backendRef weight is 0..1000000, a route has at most 16 rules of 16 backendRefs
# (the record of them is well under this many characters).
MAX_WEIGHT = 1_000_000
MAX_RECORD_CHARS = 64 * 1024


def _ours(name: str) -> set[str]:
    return {service_name(name), track_service_name(name, "stable"), track_service_name(name, "canary")}


def _annotations(route: dict[str, Any]) -> dict[str, str]:
    return (route.get("metadata") or {}).get("annotations") or {}


def _recorded(route: dict[str, Any]) -> list[dict[str, Any]] | str | None:
    """The rules recorded before specpilot weighted the route; None when none are; why not, when the
    record is not a list of rules (anyone who may edit the route may edit its annotations)."""
    text = _annotations(route).get(ORIGINAL_ANNOTATION)
    if text is None:
        return None
    if len(text) > MAX_RECORD_CHARS:
        return f"is over {MAX_RECORD_CHARS} characters"
    try:
        rules = json.loads(text)
    except (ValueError, RecursionError):
        return "is not JSON"
    return rules if _are_rules(rules) else "is not a list of rules with named, weighted backendRefs"


def _are_rules(rules: Any) -> bool:
    return isinstance(rules, list) and all(
        isinstance(rule, dict) and isinstance(refs := rule.get("backendRefs", []), list) and all(
            isinstance(b, dict) and isinstance(b.get("name", ""), str) and _is_weight(b.get("weight", 1))
            for b in refs)
        for rule in rules)


def _is_weight(w: Any) -> bool:
    return isinstance(w, int) and not isinstance(w, bool) and 0 <= w <= MAX_WEIGHT


def record_problem(route: dict[str, Any]) -> str | None:
    """Why the route's record of its original rules cannot be read (they are then rebuilt from its rules
    as they are, `original_rules`); None when it can, or there is none."""
    recorded = _recorded(route)
    return f"annotation {ORIGINAL_ANNOTATION} {recorded}" if isinstance(recorded, str) else None


def route_problem(route: dict[str, Any]) -> str | None:
    """Why the route cannot be weighted at all: its own rules are not rules either (a route the Gateway
    API's schema did not check); None when it can."""
    if isinstance(_recorded(route), list) or _are_rules((route.get("spec") or {}).get("rules") or []):
        return None
    return "has rules that are not a list of rules with named, weighted backendRefs"


def original_rules(route: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The rules before specpilot weighted them: as recorded; the route's own when it never weighted
    them; rebuilt from the rules it has when the record cannot be read (`record_problem`)."""
    recorded = _recorded(route)
    if isinstance(recorded, list):
        return recorded
    rules = copy.deepcopy((route.get("spec") or {}).get("rules") or [])
    return _unweighted(rules, name) if recorded is not None else rules


def _unweighted(rules: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """`weighted_rules` undone: in each rule, the track backends go back to the deployment's Service (with
    their combined share when other backends are there, whose weights go back to their own scale). What
    the lost record held but for fields our backends had beyond name, port and weight; left weighted, a
    route would keep sending the canary's share to its Service after the canary is gone."""
    tracks = {track_service_name(name, "stable"), track_service_name(name, "canary")}
    for rule in rules:
        refs = rule.get("backendRefs") or []
        others = [b for b in refs if b.get("name") not in tracks]
        if len(others) == len(refs):
            continue
        share = sum(b.get("weight", 1) for b in refs if b.get("name") in tracks)
        ours = {"name": service_name(name), "port": DEFAULT_PORT}
        rule["backendRefs"] = [{**b, "weight": b.get("weight", 1) // SCALE} for b in others] + [
            {**ours, "weight": max(share // SCALE, 1)} if others else ours]
    return rules


def opted_in(route: dict[str, Any], name: str) -> bool:
    """The route names this deployment in its annotation, or routes to one of its Services."""
    if _annotations(route).get(OPT_IN_ANNOTATION) == name:
        return True
    ours = _ours(name)
    return any(b.get("name") in ours for r in original_rules(route, name) for b in r.get("backendRefs") or [])


def weighted_rules(route: dict[str, Any], name: str, weight: int) -> list[dict[str, Any]]:
    """The route's original rules with this deployment's backends replaced by the weighted track Services.

    Rules that point at one of this deployment's Services are rewritten; when none does, every rule is
    (a route annotated for this deployment). Other backends keep their share of each rewritten rule."""
    ours = _ours(name)
    rules = original_rules(route, name) or [{}]
    mine = [r for r in rules if any(b.get("name") in ours for b in r.get("backendRefs") or [])] or rules
    for rule in mine:
        refs = rule.get("backendRefs") or []
        others = [b for b in refs if b.get("name") not in ours]
        # Our backends' combined weight is the deployment's share of the rule (1 when it had none yet).
        share = sum(int(b.get("weight", 1)) for b in refs if b.get("name") in ours) if len(others) < len(refs) else 1
        tracks = [(track_service_name(name, "stable"), SCALE - weight), (track_service_name(name, "canary"), weight)]
        rule["backendRefs"] = [{**b, "weight": int(b.get("weight", 1)) * SCALE} for b in others] + [
            {"name": svc, "port": DEFAULT_PORT, "weight": share * pct if others else pct}
            for svc, pct in tracks if pct]
    return rules


def route_patch(route: dict[str, Any], name: str, weight: int) -> dict[str, Any] | None:
    """The merge patch that weights the route (and records its original rules), None when it is so."""
    rules = weighted_rules(route, name, weight)
    recorded = isinstance(_recorded(route), list)  # one that cannot be read is written anew
    if recorded and rules == (route.get("spec") or {}).get("rules"):
        return None
    annotations = {} if recorded else {ORIGINAL_ANNOTATION: json.dumps(original_rules(route, name), sort_keys=True)}
    return {"metadata": {"annotations": annotations}, "spec": {"rules": rules}} if annotations else \
        {"spec": {"rules": rules}}


def restore_patch(route: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The merge patch that puts the original rules back and drops the record; None when never weighted."""
    if ORIGINAL_ANNOTATION not in _annotations(route) or route_problem(route):
        return None
    return {"metadata": {"annotations": {ORIGINAL_ANNOTATION: None}},
            "spec": {"rules": original_rules(route, name)}}
