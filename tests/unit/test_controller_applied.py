"""applied.py: when a reconcile may skip a server-side apply (the live child holds every field it would set)."""

from __future__ import annotations

from specpilot.controller.applied import digest, holds

DESIRED = {"metadata": {"name": "x", "labels": {"a": "1"}},
           "spec": {"replicas": 1,
                    "template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}}}}


def test_fields_added_by_the_server_do_not_matter() -> None:
    live = {"metadata": {"name": "x", "labels": {"a": "1"}, "uid": "u", "resourceVersion": "9"},
            "spec": {"replicas": 1, "strategy": {}, "template": {"spec": {"containers": [
                {"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP"}], "imagePullPolicy": "Always"}]}}},
            "status": {"readyReplicas": 1}}
    assert holds(live, DESIRED)


def test_a_changed_missing_or_extra_item_needs_an_apply() -> None:
    changed = {**DESIRED, "spec": {**DESIRED["spec"], "replicas": 2}}
    missing = {**DESIRED, "metadata": {"name": "x", "labels": {}}}
    extra = {**DESIRED, "spec": {**DESIRED["spec"], "template": {"spec": {"containers": [
        {"name": "c", "ports": [{"containerPort": 80}]}, {"name": "hand-added"}]}}}}
    assert not any(holds(live, DESIRED) for live in (changed, missing, extra))


def test_booleans_are_not_numbers() -> None:
    assert not holds({"a": 1}, {"a": True}) and not holds({"a": False}, {"a": 0}) and holds({"a": True}, {"a": True})


def test_digest_ignores_key_order() -> None:
    assert digest({"a": 1, "b": {"c": 2, "d": 3}}) == digest({"b": {"d": 3, "c": 2}, "a": 1})


def test_quantities_the_api_server_rewrote_still_hold() -> None:
    # kube-apiserver stores quantities canonically: an int limit comes back "1", 1024Mi as 1Gi, 0.5 CPU as 500m;
    # taking them for edits re-applied every Deployment on every reconcile.
    assert holds({"limits": {"amd.com/gpu": "1", "memory": "1Gi", "cpu": "500m"}},
                 {"limits": {"amd.com/gpu": 1, "memory": "1024Mi", "cpu": 0.5}})
    assert not holds({"limits": {"amd.com/gpu": "2"}}, {"limits": {"amd.com/gpu": 1}})
    assert not holds({"protocol": "TCP"}, {"protocol": "UDP"})
