"""Gateway API routing of canary traffic: HTTPRoute backend weights and the per-track Services."""

from __future__ import annotations

from specpilot.api.validate import load
from specpilot.controller.traffic import canary_weight, weighted_rules
from specpilot.render import render


def _sd(routing: str = "gateway", replicas: int = 3) -> object:
    canary = {"trafficRouting": routing, "httpRoute": "r"} if routing == "gateway" else {}
    return load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "chat", "namespace": "ns"},
                 "spec": {"model": "m", "replicas": replicas, "speculative": {"method": "mtp", "numSpeculativeTokens": 3},
                          "tuning": {"enabled": True, "canary": canary}}})


def test_the_canary_gets_its_replica_share_only_while_it_serves() -> None:
    sd = _sd(replicas=3)
    assert canary_weight(sd, True) == 25 and canary_weight(sd, False) == 0


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


def test_a_route_without_our_backends_gets_them_in_every_rule() -> None:
    rules = weighted_rules({"spec": {"rules": [{"matches": []}]}}, "chat", 0)
    assert rules == [{"matches": [], "backendRefs": [{"name": "chat-stable", "port": 8000, "weight": 100}]}]


def test_gateway_routing_renders_a_service_per_track() -> None:
    services = {o["metadata"]["name"]: o for o in render(_sd(), 3, 7) if o["kind"] == "Service"}
    assert set(services) == {"chat", "chat-stable", "chat-canary"}
    assert services["chat-canary"]["spec"]["selector"] == {"specpilot.io/deployment": "chat",
                                                          "specpilot.io/track": "canary"}
    assert {o["metadata"]["name"] for o in render(_sd("replicas"), 3, 7) if o["kind"] == "Service"} == {"chat"}
