"""Gateway API traffic routing: with `trafficRouting: gateway` the operator renders a Service per track and
weights the named HTTPRoute's backends, the canary at its replica share while it serves, and back to the
stable track alone after the verdict. Other backends of the route are left alone, a route that did not opt
in is not touched at all, and deleting the SpeculativeDeployment puts the route's own rules back."""

from __future__ import annotations

from typing import Any

from cluster_kit import Cluster, wait_for

from specpilot.controller.applied import holds
from tuning_kit import events, start_load, stop_load, tuned, tuning

ROUTE = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "chat-route"},
         "spec": {"parentRefs": [{"name": "gateway"}],
                  "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                             "backendRefs": [{"name": "chat", "port": 8000}]},
                            {"backendRefs": [{"name": "elsewhere", "port": 80}]}]}}
# Another app's route: it neither routes to a SpeculativeDeployment's Service nor carries the opt-in
# annotation (specpilot.io/speculative-deployment), so naming it in a spec must not take its traffic.
FOREIGN = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "shop-route"},
           "spec": {"parentRefs": [{"name": "gateway"}], "rules": [{"backendRefs": [{"name": "shop", "port": 80}]}]}}
ORIGINAL = "specpilot.io/original-rules"


def _routes(cluster: Cluster, ns: str) -> None:
    # The sandbox installs Gateway API's own HTTPRoute CRD (from sigs.k8s.io/gateway-api): the server validates
    # the routes and the operator's patches of them.
    assert cluster.apply(ROUTE, ns).returncode == 0 and cluster.apply(FOREIGN, ns).returncode == 0


def _backends(cluster: Cluster, ns: str) -> list[list[tuple[Any, ...]]]:
    route = cluster.get("httproute", "chat-route", "-n", ns) or {}
    return [[(b["name"], b.get("weight")) for b in r.get("backendRefs") or []] for r in route["spec"]["rules"]]


def test_gateway_routing_weights_the_canary(cluster: Cluster, ns: str) -> None:
    _routes(cluster, ns)
    sd = tuned("chat", "qwen35-122b-mtp-math500", candidates=[3, 7],
               canary={"trafficRouting": "gateway", "httpRoute": "chat-route"})
    assert cluster.apply(sd, ns).returncode == 0
    wait_for("the track Services", lambda: cluster.get("service", "chat-stable", "-n", ns))
    load = start_load(cluster, ns, "chat", 60)
    try:
        wait_for("the canary to get half the traffic", lambda: _backends(cluster, ns)[0]
                 == [("chat-stable", 50), ("chat-canary", 50)], timeout=40)
        assert cluster.get("service", "chat-canary", "-n", ns)["spec"]["selector"]["specpilot.io/track"] == "canary"
        wait_for("the verdict", lambda: tuning(cluster, ns, "chat").get("phase") not in ("canary_starting", "analysing"),
                 timeout=40)
        wait_for("stable alone in the route", lambda: _backends(cluster, ns)[0] == [("chat-stable", 100)], timeout=20)
    finally:
        stop_load(load)
    assert _backends(cluster, ns)[1] == [("elsewhere", 1)]  # untouched: weight 1 is the CRD's default
    wait_for("the canary Service to go", lambda: cluster.get("service", "chat-canary", "-n", ns) is None)


def test_only_an_opted_in_route_is_weighted_and_deleting_restores_it(cluster: Cluster, ns: str) -> None:
    _routes(cluster, ns)
    chat = tuned("chat", "qwen35-122b-mtp-math500", candidates=[3, 7],
                 canary={"trafficRouting": "gateway", "httpRoute": "chat-route"})
    intruder = tuned("intruder", "qwen35-122b-mtp-math500", candidates=[3, 7],
                     canary={"trafficRouting": "gateway", "httpRoute": "shop-route"})
    assert cluster.apply(chat, ns).returncode == 0 and cluster.apply(intruder, ns).returncode == 0
    # chat-route opted in by routing to Service chat: weighted to the track Services, its rules recorded.
    wait_for("chat-route weighted", lambda: ORIGINAL in ((cluster.get("httproute", "chat-route", "-n", ns) or {})
                                                         .get("metadata", {}).get("annotations") or {}))
    assert {b for b, _ in _backends(cluster, ns)[0]} <= {"chat-stable", "chat-canary"}
    (refused,) = wait_for("HTTPRouteNotUsable", lambda: events(cluster, ns, "HTTPRouteNotUsable"))
    assert refused["involvedObject"]["name"] == "intruder" and "shop-route" in refused["message"]
    foreign = cluster.get("httproute", "shop-route", "-n", ns)
    # Untouched: what was applied, with only the server's defaults added (weight 1, kind Service, ...).
    assert holds(foreign["spec"], FOREIGN["spec"]) and ORIGINAL not in (foreign["metadata"].get("annotations") or {})
    assert [[b.get("weight") for b in r["backendRefs"]] for r in foreign["spec"]["rules"]] == [[1]]
    cluster.kubectl("delete", "sd", "chat", "-n", ns, "--wait=true", "--timeout=30s")
    restored = cluster.get("httproute", "chat-route", "-n", ns)
    assert holds(restored["spec"]["rules"], ROUTE["spec"]["rules"])
    assert [[b.get("weight") for b in r["backendRefs"]] for r in restored["spec"]["rules"]] == [[1], [1]]
    assert ORIGINAL not in (restored["metadata"].get("annotations") or {})
