"""The sandbox store's label index (label_index.py): a list with a label selector gives exactly what a scan of
the whole type would, whatever writes came before (labels changed, objects deleted), and Service addresses
stay unique."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from specpilot_harness.sandbox.resources import Registry
from specpilot_harness.sandbox.selectors import parse_label_selector, required_labels
from specpilot_harness.sandbox.store import Store

SELECTORS = ["app=a", "app=a,tier=web", "app in (b)", "app in (a,b)", "app!=a", "tier", "!tier", "app=a,tier!=db",
             "app==b,owner=o1", "owner=o2", "app=zzz", ""]


def _scan(store: Store, rtype: Any, namespace: str | None, selector: str) -> list[str]:
    """What the store held before the index: every object of the type, filtered."""
    match = parse_label_selector(selector)
    return [o["metadata"]["name"] for (ns, _), o in sorted(store.objects.get(rtype.key, {}).items())
            if (not namespace or ns == namespace) and match(o["metadata"].get("labels") or {})]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_indexed_lists_equal_a_scan_after_any_writes(seed: int) -> None:
    async def run() -> None:
        rng = random.Random(seed)
        store = Store(Registry())
        ns_type, cm = store._type("", "namespaces"), store._type("", "configmaps")
        for ns in ("a", "b"):
            store.create(ns_type, None, {"metadata": {"name": ns}})

        def labels() -> dict[str, str]:
            out = {"app": rng.choice("abc"), "owner": rng.choice(["o1", "o2"])}
            if rng.random() < 0.5:
                out["tier"] = rng.choice(["web", "db"])
            return out

        names = [(rng.choice("ab"), f"cm-{i}") for i in range(60)]
        for ns, name in names:
            store.create(cm, ns, {"metadata": {"name": name, "labels": labels()}})
        for _ in range(200):
            ns, name = rng.choice(names)
            try:
                obj = store.get(cm, ns, name)
            except Exception:
                store.create(cm, ns, {"metadata": {"name": name, "labels": labels()}})
                continue
            action = rng.random()
            if action < 0.4:
                store.replace(cm, ns, name, {**obj, "metadata": {**obj["metadata"], "labels": labels()}})
            elif action < 0.6:
                store.patch(cm, ns, name, "application/merge-patch+json", {"metadata": {"labels": {"tier": None}}})
            elif action < 0.8:
                store.delete(cm, ns, name)
            else:
                store.patch(cm, ns, name, "application/merge-patch+json", {"data": {"k": str(rng.random())}})
        for selector in SELECTORS:
            for namespace in (None, "a", "b"):
                got = [o["metadata"]["name"] for o in store.list(cm, namespace, selector)]
                assert got == _scan(store, cm, namespace, selector), (selector, namespace)

    asyncio.run(run())


def test_required_labels_are_what_every_match_carries() -> None:
    assert required_labels("a=1,b==2,c!=3,d in (4),e in (5,6),f,!g,h notin (7)") == [("a", "1"), ("b", "2"), ("d", "4")]
    assert required_labels(None) == []


def test_service_addresses_stay_unique_across_deletes() -> None:
    async def run() -> None:
        store = Store(Registry())
        svc = store._type("", "services")
        ips = set()
        for i in range(30):
            made = store.create(svc, "default", {"metadata": {"name": f"s{i}"}, "spec": {"ports": [{"port": 80}]}})
            ips.add(made["spec"]["clusterIP"])
            if i % 3 == 0:
                store.delete(svc, "default", f"s{i}")
        live = [o["spec"]["clusterIP"] for o in store.list(svc, "default")]
        assert len(ips) == 30 and len(set(live)) == len(live) == 20

    asyncio.run(run())
