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
