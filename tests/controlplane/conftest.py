"""The control-plane tier: a real etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built
from source by scripts/build-control-plane.sh (once, cached) and run on loopback by
harness/specpilot_harness/controlplane."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Registered here, with the tier, so that selecting it (-m controlplane) needs no other file.
    config.addinivalue_line("markers", "controlplane: needs the real control plane built from source")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.controlplane)
