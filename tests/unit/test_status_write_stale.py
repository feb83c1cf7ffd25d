"""The tuning loop's status writes are dropped once the spec has moved on: a window that began before the user
turned tuning off (or set N by hand) must not put its Tuning condition back over the reconciler's, which a
cluster run caught (Tuning=True/Analysing left on an object whose tuning was off)."""

from __future__ import annotations

import asyncio
from typing import Any

from specpilot.controller.status_write import write_fresh

PATH = "/apis/specpilot.io/v1alpha1/namespaces/team/speculativedeployments/chat"
ANALYSING = {"conditions": [{"type": "Tuning", "status": "True", "reason": "Analysing"}]}


class FakeKube:
    """The object as the API server holds it; status patches merged into it."""

    def __init__(self, generation: int) -> None:
        disabled = {"type": "Tuning", "status": "False", "reason": "Disabled"}
        self.obj: dict[str, Any] | None = {"metadata": {"generation": generation}, "status": {"conditions": [disabled]}}
        self.patches: list[dict[str, Any]] = []

    def get(self, path: str) -> dict[str, Any] | None:
        assert path == PATH
        return self.obj

    def patch_status(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.obj is not None
        self.patches.append(body)
        self.obj["status"].update(body)
        return self.obj


def _write(kube: FakeKube, generation: int | None) -> bool:
    return asyncio.run(write_fresh(kube, asyncio.Lock(), PATH, lambda status: ANALYSING, generation))  # type: ignore[arg-type]


def test_a_decision_made_for_an_older_spec_is_not_written() -> None:
    kube = FakeKube(generation=4)  # tuning was turned off: generation 3 -> 4, the reconciler wrote Disabled
    assert _write(kube, generation=3) is False
    assert kube.patches == []
    assert kube.obj is not None and kube.obj["status"]["conditions"][0]["reason"] == "Disabled"


def test_a_decision_for_the_spec_as_it_is_is_written() -> None:
    kube = FakeKube(generation=4)
    assert _write(kube, generation=4) is True
    assert kube.patches == [ANALYSING]


def test_nothing_is_written_for_an_object_that_is_gone() -> None:
    kube = FakeKube(generation=4)
    kube.obj = None
    assert _write(kube, generation=4) is False
