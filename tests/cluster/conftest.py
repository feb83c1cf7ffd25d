"""Fixtures of the cluster tier (helpers in cluster_kit.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest
from cluster_kit import Cluster, start_cluster, stop_cluster


# The files that take longest (seconds, measured in three workers): first in collection order, which the
# Makefile's workers keep (--no-loadscope-reorder), so that none ends the tier alone. By default xdist sends
# files with the most tests first, and the oracle's one test (about 190 s) ran last while two workers idled.
LONGEST_FIRST = ("test_cluster_faults.py",  # ~240
                 "test_cluster_tuning_oracle.py",  # ~190
                 "test_cluster_fit.py",  # ~125
                 "test_cluster_tuning_restart.py",  # ~105
                 "test_cluster_rollouts_drain.py",  # ~90
                 "test_cluster_tuning_switchback.py")  # ~75


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/cluster/" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)

    def rank(item: pytest.Item) -> int:
        name = Path(str(item.fspath)).name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One sandbox and one operator for the tests that do not stop operators."""
    c = start_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.wait_to_lead(c.start_operator("main"))
        yield c
    finally:
        stop_cluster(c)


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A sandbox without operators, for tests that start, kill and restart them."""
    c = start_cluster(tmp_path / "cluster")
    try:
        yield c
    finally:
        stop_cluster(c)


@pytest.fixture
def ns(cluster: Cluster, request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-")
    return cluster.namespace(name)
