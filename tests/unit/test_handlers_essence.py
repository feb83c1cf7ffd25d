"""Which SpeculativeDeployment events ask for a reconcile: the first sight, a spec change, a pause, a label;
never a status-only write (the operator's own, every window of a tuned object)."""

from __future__ import annotations

import copy
from typing import Any

from specpilot.controller.handlers import Scheduler


def _obj() -> dict[str, Any]:
    return {"metadata": {"name": "chat", "namespace": "team", "generation": 1, "labels": {"team": "a"},
                         "annotations": {}, "resourceVersion": "10"},
            "spec": {"model": "org/m"}, "status": {"observedGeneration": 1}}


def test_status_writes_do_not_reconcile_and_what_the_reconcile_reads_does() -> None:
    scheduler = Scheduler(reconciler=None, metrics=None)  # type: ignore[arg-type]
    obj = _obj()
    assert scheduler.essence_changed("team", "chat", obj)  # first sight (a new operator's listing)
    status_write = copy.deepcopy(obj)
    status_write["status"]["tuning"] = {"seq": 7}
    status_write["metadata"]["resourceVersion"] = "11"
    assert not scheduler.essence_changed("team", "chat", status_write)
    for change in ({"generation": 2}, {"annotations": {"specpilot.io/paused": "true"}}, {"labels": {"team": "b"}},
                   {"deletionTimestamp": "2026-12-01T00:00:00Z"}):
        changed = copy.deepcopy(status_write)
        changed["metadata"].update(change)
        assert scheduler.essence_changed("team", "chat", changed), change
        assert not scheduler.essence_changed("team", "chat", changed), change


def test_the_resync_asks_for_every_known_object_once_per_interval_and_stops_at_shutdown() -> None:
    """The level-based safety net is one loop over the objects the operator knows, not a Kopf timer per object
    (which would put Kopf's finalizer on every object)."""
    import asyncio

    async def scenario() -> list[tuple[str, str]]:
        scheduler = Scheduler(reconciler=None, metrics=None)  # type: ignore[arg-type]
        asked: list[tuple[str, str]] = []
        scheduler.request = lambda ns, name: asked.append((ns, name))  # type: ignore[method-assign]
        scheduler._known.update({("team", "a"), ("team", "b"), ("ops", "c")})
        scheduler.start_resync(interval_s=0.3)
        await asyncio.sleep(0.45)
        scheduler._known.discard(("team", "b"))  # deleted: no longer asked for
        await asyncio.sleep(0.6)
        await scheduler.shutdown()
        return asked

    asked = asyncio.run(scenario())
    assert asked[:3] == [("ops", "c"), ("team", "a"), ("team", "b")]
    assert ("team", "b") not in asked[3:] and {("ops", "c"), ("team", "a")} <= set(asked[3:])
