"""Fixtures of the cluster tier (helpers in cluster_kit.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest
from cluster_kit import Cluster, start_cluster, stop_cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/cluster/" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)


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
