"""The operator's collector settings: what the imports built is frozen out of every scan, and the young
generation is scanned every 10,000 allocations rather than 700 (gc_policy.py says why)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from specpilot.controller import gc_policy


@pytest.fixture
def restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_imports_are_frozen_and_young_scans_are_rarer(restored: None) -> None:
    _, middle, old = gc.get_threshold()
    gc_policy.configure()
    assert gc.get_freeze_count() > 10_000  # this process' modules, classes and functions
    assert gc.get_threshold() == (gc_policy.YOUNG_THRESHOLD, middle, old)
    garbage: list[object] = []
    garbage.append(garbage)  # a cycle made after the freeze is still collected
    del garbage
    assert gc.collect() >= 1
