"""Gateway API routing of canary traffic: HTTPRoute backend weights and the per-track Services."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from specpilot.api.validate import load
from specpilot.canary.routing import CanaryRoute
from specpilot.canary.traffic import (OPT_IN_ANNOTATION, ORIGINAL_ANNOTATION, canary_weight, opted_in,
                                      original_rules, record_problem, restore_patch, route_patch,
                                      weighted_rules)
from specpilot.render import render


def _sd(routing: str = "gateway", replicas: int = 3, mode: str = "auto") -> object:
    canary = {"trafficRouting": routing, "httpRoute": "r", "mode": mode} if routing == "gateway" else {"mode": mode}
    return load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "chat", "namespace": "ns"},
                 "spec": {"model": "m", "replicas": replicas, "speculative": {"method": "mtp", "numSpeculativeTokens": 3},
                          "tuning": {"enabled": True, "canary": canary}}})


def test_the_canary_gets_its_replica_share_only_while_it_serves() -> None:
    surge = _sd(replicas=3, mode="surge")  # one canary pod beside three stable ones
    assert canary_weight(surge, True) == 25 and canary_weight(surge, False) == 0
    default = _sd(replicas=3)  # auto: the canary pod replaces one of the three
    assert canary_weight(default, True) == 33 and canary_weight(default, False) == 0
    assert canary_weight(_sd(replicas=1), True) == 50  # auto with one replica is surge: it cannot give up its pod


def test_only_this_deployments_backends_are_reweighted() -> None:
    route = {"spec": {"rules": [{"matches": [{"path": {"value": "/v1"}}], "backendRefs": [{"name": "chat", "port": 8000}]},
                                {"backendRefs": [{"name": "other", "port": 80}]}]}}
    rules = weighted_rules(route, "chat", 25)
    assert rules[0]["backendRefs"] == [{"name": "chat-stable", "port": 8000, "weight": 75},
                                       {"name": "chat-canary", "port": 8000, "weight": 25}]
    assert rules[0]["matches"] == route["spec"]["rules"][0]["matches"]
    assert rules[1] == {"backendRefs": [{"name": "other", "port": 80}]}
    assert weighted_rules({"spec": {"rules": rules}}, "chat", 0)[0]["backendRefs"] == [
        {"name": "chat-stable", "port": 8000, "weight": 100}]


def test_an_annotated_route_without_our_backends_gets_them_in_every_rule() -> None:
    route = {"metadata": {"annotations": {OPT_IN_ANNOTATION: "chat"}}, "spec": {"rules": [{"matches": []}]}}
    assert opted_in(route, "chat")
    rules = weighted_rules(route, "chat", 0)
    assert rules == [{"matches": [], "backendRefs": [{"name": "chat-stable", "port": 8000, "weight": 100}]}]


def test_a_route_that_did_not_opt_in_is_not_ours() -> None:
    foreign = {"spec": {"rules": [{"backendRefs": [{"name": "shop", "port": 80}]}]}}
    assert not opted_in(foreign, "chat")
    assert not opted_in({"metadata": {"annotations": {OPT_IN_ANNOTATION: "other"}}, **foreign}, "chat")


def test_shares_are_exact_beside_other_backends() -> None:
    route = {"spec": {"rules": [{"backendRefs": [{"name": "chat", "port": 8000, "weight": 3},
                                                 {"name": "legacy", "port": 80, "weight": 1}]}]}}
    refs = weighted_rules(route, "chat", 25)[0]["backendRefs"]
    weights = {b["name"]: b["weight"] for b in refs}
    total = sum(weights.values())
    # The deployment keeps its 3/4 of the rule, split 75/25 between the tracks; legacy keeps 1/4.
    assert weights["legacy"] / total == 0.25
    assert weights["chat-canary"] / total == 0.75 * 0.25 and weights["chat-stable"] / total == 0.75 * 0.75


def test_the_original_rules_are_recorded_once_and_restored() -> None:
    original = [{"backendRefs": [{"name": "chat", "port": 8000}]}]
    route = {"metadata": {"name": "r"}, "spec": {"rules": original}}
    patch = route_patch(route, "chat", 25)
    assert patch is not None and json.loads(patch["metadata"]["annotations"][ORIGINAL_ANNOTATION]) == original
    weighted = {"metadata": {"annotations": patch["metadata"]["annotations"]}, "spec": {"rules": patch["spec"]["rules"]}}
    assert route_patch(weighted, "chat", 25) is None  # already so: no write
    again = route_patch(weighted, "chat", 0)  # computed from the original, not from the weighted rules
    assert again == {"spec": {"rules": [{"backendRefs": [{"name": "chat-stable", "port": 8000, "weight": 100}]}]}}
    assert restore_patch(weighted, "chat") == {"metadata": {"annotations": {ORIGINAL_ANNOTATION: None}},
                                               "spec": {"rules": original}}
    assert restore_patch(route, "chat") is None  # never weighted: nothing to restore


def test_gateway_routing_renders_a_service_per_track() -> None:
    services = {o["metadata"]["name"]: o for o in render(_sd(), 3, 7) if o["kind"] == "Service"}
    assert set(services) == {"chat", "chat-stable", "chat-canary"}
    assert services["chat-canary"]["spec"]["selector"] == {"specpilot.io/deployment": "chat",
                                                          "specpilot.io/track": "canary"}
    assert {o["metadata"]["name"] for o in render(_sd("replicas"), 3, 7) if o["kind"] == "Service"} == {"chat"}


DAMAGED = ["{not json", "5", '{"rules": []}', '[{"backendRefs": [{"name": "chat", "weight": "50"}]}]',
           '[{"backendRefs": [{"name": "chat", "weight": 2000000}]}]', '[{"backendRefs": "chat"}]', "[" * 100_000,
           json.dumps([{"backendRefs": [{"name": "x" * 70_000}]}])]


def _route(route: dict, patches: list[dict], warnings: list[tuple[str, str]]) -> CanaryRoute:
    kube = SimpleNamespace(get=lambda path: route, merge_patch=lambda path, p: patches.append(p))
    events = SimpleNamespace(warning=lambda obj, reason, message: warnings.append((reason, message)))
    return CanaryRoute(kube, events, "ns", "chat")  # type: ignore[arg-type]


def test_a_damaged_record_of_the_original_rules_is_rebuilt_from_the_weighted_ones() -> None:
    """Anyone who may edit the route may edit the record. It raised out of every window (JSON, KeyError,
    RecursionError), and a restore would have written it back as the route's rules. Now the original rules
    are rebuilt by undoing the weighting, said once, and recorded again; left as they were, the route
    would go on sending the canary's share to its Service after the canary is gone."""
    original = [{"matches": [{"path": {"value": "/v1"}}],
                 "backendRefs": [{"name": "legacy", "port": 80, "weight": 1},
                                 {"name": "chat", "port": 8000, "weight": 3}]},
                {"backendRefs": [{"name": "chat", "port": 8000}]}, {"backendRefs": [{"name": "shop", "port": 80}]}]
    patch = route_patch({"spec": {"rules": original}}, "chat", 25)
    assert patch is not None
    for text in DAMAGED:
        weighted = {"metadata": {"annotations": {ORIGINAL_ANNOTATION: text}}, "spec": {"rules": patch["spec"]["rules"]}}
        problem = record_problem(weighted)
        assert problem is not None and problem.startswith(f"annotation {ORIGINAL_ANNOTATION} "), text[:40]
        assert original_rules(weighted, "chat") == original
        again = route_patch(weighted, "chat", 25)
        assert again is not None and json.loads(again["metadata"]["annotations"][ORIGINAL_ANNOTATION]) == original
        assert restore_patch(weighted, "chat") == {"metadata": {"annotations": {ORIGINAL_ANNOTATION: None}},
                                                   "spec": {"rules": original}}

        patches: list[dict] = []
        warnings: list[tuple[str, str]] = []
        http_route = _route(weighted, patches, warnings)
        for _ in range(3):
            asyncio.run(http_route.weigh({"metadata": {"name": "chat"}}, "r", 0))
        assert [r for r, _ in warnings] == ["HTTPRouteRecordRebuilt"]  # said once
        assert ORIGINAL_ANNOTATION in warnings[0][1] and "Service chat" in warnings[0][1]
        assert patches[0]["spec"]["rules"][1] == {"backendRefs": [{"name": "chat-stable", "port": 8000, "weight": 100}]}
    assert record_problem({"spec": {"rules": []}}) is None
    assert record_problem({"metadata": {"annotations": {ORIGINAL_ANNOTATION: "[]"}}}) is None


def test_a_route_whose_rules_are_not_rules_is_left_alone() -> None:
    """A route no Gateway API schema checked (weights as text): not weighted, not restored, said once."""
    route = {"metadata": {"annotations": {OPT_IN_ANNOTATION: "chat"}},
             "spec": {"rules": [{"backendRefs": [{"name": "chat", "weight": "half"}]}]}}
    patches: list[dict] = []
    warnings: list[tuple[str, str]] = []
    http_route = _route(route, patches, warnings)
    for _ in range(3):
        asyncio.run(http_route.weigh({"metadata": {"name": "chat"}}, "r", 25))
    asyncio.run(http_route.restore("r"))
    assert patches == [] and [r for r, _ in warnings] == ["HTTPRouteNotUsable"]
    assert "has rules that are not a list of rules" in warnings[0][1]
