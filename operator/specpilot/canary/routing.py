"""The canary's HTTPRoute (`tuning.canary.trafficRouting: gateway`): weighted toward the canary track while it
serves, and given its own rules back when tuning stops. The I/O half of traffic.py; the tuning loop drives
it once per window."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from specpilot.canary import traffic


class RouteClient(Protocol):
    """What this needs of the controller's Kubernetes client (controller/kube.py), which sits above."""

    def get(self, path: str) -> dict[str, Any] | None: ...

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class Warnings(Protocol):
    """What this needs of the controller's Event recorder (controller/events.py)."""

    def warning(self, obj: dict[str, Any], reason: str, message: str) -> None: ...


class CanaryRoute:
    """One deployment's HTTPRoute; each problem with it is said once, not every window."""

    def __init__(self, kube: RouteClient, events: Warnings, namespace: str, name: str) -> None:
        self.kube, self.events, self.namespace, self.name = kube, events, namespace, name
        self.weighted: str | None = None  # the HTTPRoute weighted: restored when tuning stops
        self.warned: set[str] = set()
        self.rebuilt: set[tuple[str, str]] = set()  # (route, why its record was rebuilt), said once

    async def weigh(self, obj: dict[str, Any], route_name: str, weight: int) -> None:
        """Set the HTTPRoute's backend weights if it opted in; a missing or foreign route is reported once,
        and traffic then splits by replicas behind the deployment's Service."""
        path = traffic.route_path(self.namespace, route_name)
        route = await asyncio.to_thread(self.kube.get, path)
        unusable = traffic.route_problem(route) if route is not None else None
        if route is None or unusable or not traffic.opted_in(route, self.name):
            if route_name not in self.warned:
                self.warned.add(route_name)
                why = "not found" if route is None else f"{unusable}, so it is left alone" if unusable else (
                    f"does not route to Service {self.name} nor carry the annotation "
                    f"{traffic.OPT_IN_ANNOTATION}: {self.name}, so it is left alone")
                self.events.warning(obj, "HTTPRouteNotUsable",
                                    f"HTTPRoute {route_name} {why}: canary traffic follows the replica ratio")
            return
        self.warned.discard(route_name)
        damaged = traffic.record_problem(route)
        if damaged and (route_name, damaged) not in self.rebuilt:
            self.rebuilt.add((route_name, damaged))
            self.events.warning(obj, "HTTPRouteRecordRebuilt",
                                f"HTTPRoute {route_name}'s {damaged}: the rules it had before specpilot weighted "
                                f"it are rebuilt from the rules it has (the track backends back to Service "
                                f"{self.name}) and recorded again")
        self.weighted = route_name
        patch = traffic.route_patch(route, self.name, weight)
        if patch is not None:
            await asyncio.to_thread(self.kube.merge_patch, path, patch)

    async def restore(self, route_name: str | None) -> None:
        """Put back the rules the route had before this deployment weighted it."""
        if not route_name:
            return
        path = traffic.route_path(self.namespace, route_name)
        route = await asyncio.to_thread(self.kube.get, path)
        patch = traffic.restore_patch(route, self.name) if route is not None else None
        if patch is not None:
            await asyncio.to_thread(self.kube.merge_patch, path, patch)
