"""The reconciler reads children from the cache the child watches feed: an object created while the operator
watches is reconciled without a single list, a hand-deleted child reported by its watch is re-created, and an
operator meeting an object it did not see created lists live once."""

from __future__ import annotations

import copy
from typing import Any

from specpilot.api.models import API_VERSION, KIND
from specpilot.controller.events import EventRecorder
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.reconcile import Reconciler
from specpilot.controller.kube import KubeError


class FakeApi:
    """Just enough of the API server: objects by path-like key, numbered resourceVersions, calls counted."""

    def __init__(self, sd: dict[str, Any]) -> None:
        self.sd, self.children, self.rv, self.calls = sd, {}, 1, []

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj

    def get(self, path: str, cached: bool = False) -> dict[str, Any] | None:
        *_, plural, name = path.split("/")
        if plural == "speculativedeployments":
            self.calls.append("get")
            return copy.deepcopy(self.sd)
        self.calls.append(f"get {plural}")
        found = [c for (kind, child), c in self.children.items() if child == name and plural.startswith(kind.lower())]
        return copy.deepcopy(found[0]) if found else None

    def list(self, api_version: str, plural: str, namespace: str | None, selector: str | None = None) -> list[dict[str, Any]]:
        self.calls.append(f"list {plural}")
        return [copy.deepcopy(c) for (kind, _), c in self.children.items() if plural.startswith(kind.lower())]

    def apply(self, obj: dict[str, Any], field_manager: str = "specpilot", force: bool = True) -> dict[str, Any]:
        self.calls.append(f"apply {obj['kind']}")
        stored = self.children[(obj["kind"], obj["metadata"]["name"])] = self._stamp(obj)
        return copy.deepcopy(stored)

    def patch_status(self, path: str, status: dict[str, Any], resource_version: str | None = None) -> dict[str, Any]:
        """As the API: merged, only onto the version the writer read, which it then moves on."""
        self.calls.append("status")
        if resource_version is not None and resource_version != self.sd["metadata"].get("resourceVersion"):
            raise KubeError(409, "Conflict", "the object has been modified")
        merged = {**(self.sd.get("status") or {}), **status}  # a merge patch: keys it leaves out stay
        self.sd["status"] = {k: v for k, v in merged.items() if v is not None}
        self.sd = self._stamp(self.sd)
        return copy.deepcopy(self.sd)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return obj  # Events

    def delete(self, obj: dict[str, Any]) -> None:
        self.calls.append(f"delete {obj['kind']}")
        self.children.pop((obj["kind"], obj["metadata"]["name"]), None)


def _sd() -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": "chat", "namespace": "team", "uid": "u-chat", "generation": 1},
            "spec": {"model": "org/target", "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}}


def _reconciler(api: FakeApi) -> Reconciler:
    return Reconciler(api, OperatorMetrics(), EventRecorder(api, "test"))  # type: ignore[arg-type]


def test_a_new_object_is_reconciled_from_the_cache_and_a_deleted_child_comes_back() -> None:
    api = FakeApi(_sd())
    reconciler = _reconciler(api)
    reconciler.born("team", "chat", "u-chat")
    assert reconciler.reconcile("team", "chat") == "applied"
    assert not any(c.startswith("list") for c in api.calls)
    made = sorted(kind for kind, _ in api.children)
    assert made == ["ConfigMap", "ConfigMap", "Deployment", "Service"]  # engine.json, drain.json
    for child in api.children.values():  # the watches echo the applies: nothing new
        assert not reconciler.cache.observe("ADDED", copy.deepcopy(child))
    api.calls.clear()
    assert reconciler.reconcile("team", "chat") == "unchanged"
    assert api.calls == []  # no read (the body is known), no list, no apply, status already current
    gone = api.children.pop(("Deployment", "chat"))
    api.rv += 1
    gone["metadata"]["resourceVersion"] = str(api.rv)
    assert reconciler.cache.observe("DELETED", gone)  # news: the parent is reconciled
    assert reconciler.reconcile("team", "chat") == "applied"
    assert ("Deployment", "chat") in api.children and not any(c.startswith("list") for c in api.calls)


def test_an_operator_that_did_not_see_the_object_created_lists_live_once() -> None:
    api = FakeApi(_sd())
    _reconciler(api).reconcile("team", "chat")  # a previous operator made the children
    api.calls.clear()
    fresh = _reconciler(api)  # a restart: nothing known, the object is not new to the watch
    assert fresh.reconcile("team", "chat") == "unchanged"
    assert sorted(c for c in api.calls if c.startswith("list")) == \
        ["list configmaps", "list deployments", "list services"]
    assert len(api.children) == 4  # found them (re-applied once, as after any restart): nothing new
    api.calls.clear()
    assert fresh.reconcile("team", "chat") == "unchanged" and api.calls == []


def test_the_log_says_what_a_reconcile_changed(caplog: Any) -> None:
    caplog.set_level("INFO", logger="specpilot.controller.reconcile")
    api = FakeApi(_sd())
    reconciler = _reconciler(api)
    reconciler.born("team", "chat", "u-chat")
    assert reconciler.reconcile("team", "chat") == "applied"
    made = [r.getMessage() for r in caplog.records]
    assert len(made) == 1 and made[0].startswith("reconciled team/chat: created ")
    assert "created Deployment chat" in made[0] and "created Service chat" in made[0]
    caplog.clear()
    assert reconciler.reconcile("team", "chat") == "unchanged"
    assert caplog.records == []  # nothing changed, nothing said
    api.sd["spec"]["speculative"]["numSpeculativeTokens"] = 0  # ngram cannot run N=0
    reconciler.bodies.offer(copy.deepcopy(api.sd))  # the watch delivers the edit
    for _ in range(2):
        assert reconciler.reconcile("team", "chat") == "invalid"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("reconciled team/chat: invalid spec, nothing applied: spec.")


def test_a_reconcile_from_a_stale_body_writes_nothing_over_the_newer_status_and_the_retry_reads_afresh() -> None:
    """Reconciles start from the body the watch delivered (no GET); their status write is conditional on its
    resourceVersion, so a status someone wrote since (the tuning loop, another client) is never put back."""
    import pytest

    api = FakeApi(_sd())
    reconciler = _reconciler(api)
    reconciler.reconcile("team", "chat")
    api.sd["metadata"]["generation"] = 2  # a spec edit, delivered: the reconcile has a status to write
    api.sd = api._stamp(api.sd)
    reconciler.bodies.offer(copy.deepcopy(api.sd))
    api.sd["status"]["tuning"] = {"stableN": 5}  # then another client's write, not delivered yet
    api.sd = api._stamp(api.sd)
    api.calls.clear()
    with pytest.raises(KubeError) as refused:
        reconciler.reconcile("team", "chat")
    assert refused.value.status == 409 and api.sd["status"]["tuning"] == {"stableN": 5}
    assert reconciler.reconcile("team", "chat") == "unchanged"  # the Scheduler's retry: status only
    assert "get" in api.calls and api.sd["status"]["tuning"] == {"stableN": 5}
    assert api.sd["status"]["observedGeneration"] == 2


def test_a_child_whose_apply_met_a_conflict_is_announced_as_updated_by_the_retry(caplog: Any) -> None:
    """A 409 on an apply is retried; the retry does what the first attempt did not, and says so, rather than
    "reverted a change made outside the spec" (the render it failed to apply is not a hand edit)."""
    import pytest

    caplog.set_level("INFO", logger="specpilot.controller.reconcile")
    api = FakeApi(_sd())
    reconciler = _reconciler(api)
    reconciler.reconcile("team", "chat")
    assert reconciler.reconcile("team", "chat") == "unchanged"
    # The tuning loop measured the drain (same generation, same track plan): drain.json changes.
    api.sd["status"]["drain"] = {"seconds": 45, "source": "measured", "p99Seconds": 17.0, "requests": 400}
    api.sd = api._stamp(api.sd)
    reconciler.bodies.offer(copy.deepcopy(api.sd))
    apply = api.apply

    def conflict(obj: dict[str, Any], field_manager: str = "specpilot", force: bool = True) -> Any:
        raise KubeError(409, "Conflict", "injected")
    api.apply = conflict  # type: ignore[method-assign]
    with pytest.raises(KubeError):
        reconciler.reconcile("team", "chat")
    caplog.clear()
    api.apply = apply  # type: ignore[method-assign]
    assert reconciler.reconcile("team", "chat") == "applied"
    said = [r.getMessage() for r in caplog.records]
    assert said == ["reconciled team/chat: updated ConfigMap chat-drain for generation 1 and the current track "
                    "plan"], said


def test_a_deployment_is_applied_only_after_the_configmaps_its_pods_mount() -> None:
    """A pod made before its ConfigMap waits for the kubelet's next mount attempt: the ConfigMaps (and the
    Service) go first, and when one of them meets a transient error the Deployment waits for the retry."""
    import pytest

    api = FakeApi(_sd())
    reconciler = _reconciler(api)
    reconciler.born("team", "chat", "u-chat")
    apply = api.apply

    def busy_engine_config(obj: dict[str, Any], field_manager: str = "specpilot", force: bool = True) -> Any:
        if obj["metadata"]["name"] == "chat-engine":
            raise KubeError(429, "TooManyRequests", "injected")
        return apply(obj, field_manager, force)
    api.apply = busy_engine_config  # type: ignore[method-assign]
    with pytest.raises(KubeError):
        reconciler.reconcile("team", "chat")
    assert "apply Deployment" not in api.calls and ("Deployment", "chat") not in api.children
    api.apply = apply  # type: ignore[method-assign]
    api.calls.clear()
    assert reconciler.reconcile("team", "chat") == "applied"
    applies = [c for c in api.calls if c.startswith("apply")]
    assert applies[-1] == "apply Deployment" and "apply ConfigMap" in applies[:-1], applies
